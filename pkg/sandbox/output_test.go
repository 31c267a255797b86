package sandbox

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestHeadTail(t *testing.T) {
	tests := []struct {
		name      string
		limit     int
		writes    []string
		want      string
		truncated bool
	}{
		{"empty", 10, nil, "", false},
		{"fits", 10, []string{"abc", "def"}, "abcdef", false},
		{"exactly the limit", 10, []string{"0123456789"}, "0123456789", false},
		{"one over", 10, []string{"0123456789X"}, "01234\n[... 1 bytes elided ...]\n6789X", true},
		{"many small writes", 4, strings.Split("abcdefghij", ""), "ab\n[... 6 bytes elided ...]\nij", true},
		{"one big write", 4, []string{"abcdefghij"}, "ab\n[... 6 bytes elided ...]\nij", true},
		{"odd limit", 5, []string{"abcdefghij"}, "ab\n[... 5 bytes elided ...]\nhij", true},
		// "é" is 2 bytes; cuts never split it, the elided count grows instead.
		{"utf8 cuts", 6, []string{"aaéééé"}, "aa\n[... 6 bytes elided ...]\né", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newHeadTail(tt.limit)
			for _, w := range tt.writes {
				if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			if got := b.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
			if b.truncated() != tt.truncated {
				t.Errorf("truncated() = %v, want %v", b.truncated(), tt.truncated)
			}
		})
	}
}

var markerRE = regexp.MustCompile(`\n\[\.\.\. (\d+) bytes elided \.\.\.\]\n`)

func FuzzHeadTail(f *testing.F) {
	f.Add([]byte("hello world"), uint8(4), uint8(3))
	f.Add([]byte("ééééééé"), uint8(5), uint8(1))
	f.Add(bytes.Repeat([]byte{0xff}, 40), uint8(7), uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, limit8, chunk8 uint8) {
		limit, chunk := int(limit8)+1, int(chunk8)+1
		b := newHeadTail(limit)
		for p := data; len(p) > 0; {
			k := min(chunk, len(p))
			_, _ = b.Write(p[:k])
			p = p[k:]
		}
		if s := b.String(); !utf8.ValidString(s) || s != strings.ToValidUTF8(b.string(), "\uFFFD") {
			t.Fatalf("String() = %q: not the raw output made valid UTF-8", s)
		}
		out := b.string() // the raw bytes kept, for the checks below
		if len(data) <= limit {
			if out != string(data) || b.truncated() {
				t.Fatalf("within the limit: got %q, want %q", out, data)
			}
			return
		}
		if !b.truncated() {
			t.Fatal("not truncated past the limit")
		}
		locs := markerRE.FindAllStringSubmatchIndex(out, -1)
		if len(locs) == 0 {
			t.Fatalf("no marker in %q", out)
		}
		// The head could itself contain marker-like text; the real marker
		// is the one whose count makes the lengths add up.
		for _, loc := range locs {
			head, tail := out[:loc[0]], out[loc[1]:]
			n, _ := strconv.Atoi(out[loc[2]:loc[3]])
			if len(head)+n+len(tail) != len(data) {
				continue
			}
			if !bytes.HasPrefix(data, []byte(head)) || !bytes.HasSuffix(data, []byte(tail)) {
				t.Fatalf("head %q / tail %q not from %q", head, tail, data)
			}
			if len(head)+len(tail) > limit {
				t.Fatalf("kept %d bytes, limit %d", len(head)+len(tail), limit)
			}
			return
		}
		t.Fatalf("no marker accounts for %d bytes in %q", len(data), out)
	})
}

// A command's output is untrusted bytes: what is kept is valid UTF-8.
func TestHeadTailReplacesInvalidUTF8(t *testing.T) {
	b := newHeadTail(100)
	_, _ = b.Write([]byte("ok \xff\xfe done"))
	if got, want := b.String(), "ok \uFFFD done"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
