package sandbox

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// DefaultOutputLimit is how many bytes of a command's output are kept when
// LocalConfig.OutputLimit is 0.
const DefaultOutputLimit = 10000

// headTail is an io.Writer that keeps the first and last bytes of what is
// written to it, using memory bounded by the limit, so that a command that
// prints gigabytes cannot exhaust the worker.
type headTail struct {
	limit   int
	head    []byte // the first limit/2 bytes
	tail    []byte // the last bytes; trimmed to tailCap when it grows past 2*tailCap
	tailCap int
	total   int64
}

func newHeadTail(limit int) *headTail {
	headCap := limit / 2
	return &headTail{limit: limit, tailCap: limit - headCap, head: make([]byte, 0, headCap)}
}

func (b *headTail) Write(p []byte) (int, error) {
	n := len(p)
	b.total += int64(n)
	if room := cap(b.head) - len(b.head); room > 0 {
		k := min(room, len(p))
		b.head = append(b.head, p[:k]...)
		p = p[k:]
	}
	if len(p) == 0 {
		return n, nil
	}
	if len(p) >= b.tailCap {
		b.tail = append(b.tail[:0], p[len(p)-b.tailCap:]...)
		return n, nil
	}
	b.tail = append(b.tail, p...)
	if len(b.tail) > 2*b.tailCap {
		b.tail = append(b.tail[:0], b.tail[len(b.tail)-b.tailCap:]...)
	}
	return n, nil
}

// truncated reports whether bytes were dropped.
func (b *headTail) truncated() bool { return b.total > int64(b.limit) }

// String returns everything written, or, when more than the limit was
// written, the head and the tail joined by a marker line saying how many
// bytes were elided. Cuts fall on UTF-8 boundaries where the text is UTF-8;
// invalid UTF-8 (a command's output is untrusted bytes) becomes U+FFFD, so
// the observation's tokens and its stored text agree.
func (b *headTail) String() string {
	return strings.ToValidUTF8(b.string(), "\uFFFD")
}

// ReplacedNote is the line a backend appends to a command's output whose
// invalid UTF-8 was replaced (see ExecResult.Replaced), so that the model,
// and whoever reads the trajectory, knows the U+FFFD it sees are not the
// command's own.
const ReplacedNote = "[sandbox: the output held bytes that are not valid UTF-8; each invalid sequence was replaced with U+FFFD]"

// output is String for a command's result: the text with ReplacedNote
// appended when invalid UTF-8 was replaced, whether it was truncated, and
// whether it was replaced.
func (b *headTail) output() (text string, truncated, replaced bool) {
	raw := b.string()
	if utf8.ValidString(raw) {
		return raw, b.truncated(), false
	}
	return appendLine(strings.ToValidUTF8(raw, "\uFFFD"), ReplacedNote), b.truncated(), true
}

// appendLine appends line to out on a line of its own.
func appendLine(out, line string) string {
	if out != "" && !strings.HasSuffix(out, "\n") {
		out += "\n"
	}
	return out + line + "\n"
}

func (b *headTail) string() string {
	if !b.truncated() {
		return string(b.head) + string(b.tail)
	}
	head := b.head
	tail := b.tail
	if len(tail) > b.tailCap {
		tail = tail[len(tail)-b.tailCap:]
	}
	head = trimPartialRuneEnd(head)
	tail = trimPartialRuneStart(tail)
	elided := b.total - int64(len(head)) - int64(len(tail))
	return fmt.Sprintf("%s\n[... %d bytes elided ...]\n%s", head, elided, tail)
}

// trimPartialRuneEnd drops an incomplete UTF-8 sequence at the end of p.
func trimPartialRuneEnd(p []byte) []byte {
	for i := 1; i <= utf8.UTFMax-1 && i <= len(p); i++ {
		c := p[len(p)-i]
		if utf8.RuneStart(c) {
			if c >= utf8.RuneSelf && !utf8.FullRune(p[len(p)-i:]) {
				return p[:len(p)-i]
			}
			return p
		}
	}
	return p
}

// trimPartialRuneStart drops UTF-8 continuation bytes at the start of p.
func trimPartialRuneStart(p []byte) []byte {
	for i := 0; i < utf8.UTFMax && i < len(p); i++ {
		if utf8.RuneStart(p[i]) {
			return p[i:]
		}
	}
	return p
}
