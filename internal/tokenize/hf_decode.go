package tokenize

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// decoder turns tokens into text pieces, as one of the tokenizers
// library's decoders (tokenizers/src/decoders) does with decode_chain; the
// text is the pieces joined.
type decoder func(toks []string) []string

type hfDecoder struct {
	Type          string            `json:"type"`
	Decoders      []json.RawMessage `json:"decoders"`
	Pattern       hfPattern         `json:"pattern"`
	Content       string            `json:"content"`
	Start         int               `json:"start"`
	Stop          int               `json:"stop"`
	Replacement   *string           `json:"replacement"`
	PrependScheme *string           `json:"prepend_scheme"`
	AddPrefix     *bool             `json:"add_prefix_space"`
}

const supportedDecoders = "ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence"

// parseDecoder reads the decoder at path. plainByteLevel reports a
// ByteLevel decoder alone, which HF.Decode runs byte by byte; a missing
// decoder joins the tokens with spaces, as the library does.
func parseDecoder(raw json.RawMessage, path string) (plainByteLevel bool, d decoder, err error) {
	if isNull(raw) {
		return false, func(toks []string) []string { return []string{strings.Join(toks, " ")} }, nil
	}
	var c hfDecoder
	if err := json.Unmarshal(raw, &c); err != nil {
		return false, nil, fmt.Errorf("tokenizer.json: %s: %w", path, err)
	}
	switch c.Type {
	case "ByteLevel":
		return true, decodeByteLevel, nil
	case "ByteFallback":
		return false, decodeByteFallback, nil
	case "Fuse":
		return false, func(toks []string) []string { return []string{strings.Join(toks, "")} }, nil
	case "Strip":
		content, n := utf8.DecodeRuneInString(c.Content)
		if n == 0 || n != len(c.Content) || c.Start < 0 || c.Stop < 0 {
			return false, nil, fmt.Errorf("tokenizer.json: %s: want one content character and start, stop ≥ 0", path)
		}
		return false, func(toks []string) []string {
			for i, t := range toks {
				toks[i] = strip(t, content, c.Start, c.Stop)
			}
			return toks
		}, nil
	case "Replace":
		f, err := parseReplace(c.Pattern, c.Content, path)
		if err != nil {
			return false, nil, err
		}
		return false, func(toks []string) []string {
			for i, t := range toks {
				toks[i] = f(t)
			}
			return toks
		}, nil
	case "Metaspace":
		repl := '▁'
		if c.Replacement != nil {
			r, n := utf8.DecodeRuneInString(*c.Replacement)
			if n == 0 || n != len(*c.Replacement) {
				return false, nil, fmt.Errorf("tokenizer.json: %s.replacement %q: want one character", path, *c.Replacement)
			}
			repl = r
		}
		prepend := true // prepend_scheme always or first
		if c.PrependScheme != nil {
			prepend = *c.PrependScheme != "never"
		} else if c.AddPrefix != nil {
			prepend = *c.AddPrefix
		}
		return false, func(toks []string) []string {
			for i, t := range toks {
				// The library drops every replacement character of the first
				// token, not only a leading one (decoders/metaspace.rs).
				toks[i] = strings.Map(func(r rune) rune {
					switch {
					case r != repl:
						return r
					case i == 0 && prepend:
						return -1
					}
					return ' '
				}, t)
			}
			return toks
		}, nil
	case "Sequence":
		var seq []decoder
		for i, r := range c.Decoders {
			_, d, err := parseDecoder(r, fmt.Sprintf("%s.decoders[%d]", path, i))
			if err != nil {
				return false, nil, err
			}
			seq = append(seq, d)
		}
		return false, func(toks []string) []string {
			for _, d := range seq {
				toks = d(toks)
			}
			return toks
		}, nil
	}
	return false, nil, unsupported(path, c.Type, supportedDecoders)
}

// decodeByteLevel maps each token's characters back to bytes (a token with
// a character outside the byte-level alphabet is kept as its UTF-8) and
// reads them as UTF-8, invalid sequences as U+FFFD.
func decodeByteLevel(toks []string) []string {
	var buf []byte
	for _, t := range toks {
		start := len(buf)
		ok := true
		for _, r := range t {
			b, in := runeToByte[r]
			if !in {
				ok = false
				break
			}
			buf = append(buf, b)
		}
		if !ok {
			buf = append(buf[:start], t...)
		}
	}
	return []string{lossyUTF8(buf)}
}

// lossyUTF8 reads b as Rust's String::from_utf8_lossy does: each maximal
// prefix of a valid sequence that breaks off, or a byte that starts none,
// becomes one U+FFFD (Unicode's "substitution of maximal subparts").
func lossyUTF8(b []byte) string {
	var s strings.Builder
	s.Grow(len(b))
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r != utf8.RuneError || n > 1 {
			s.Write(b[:n])
			b = b[n:]
			continue
		}
		s.WriteString("\uFFFD")
		b = b[maximalSubpart(b):]
	}
	return s.String()
}

// maximalSubpart returns how many bytes of b, which does not start with a
// valid sequence, form the longest prefix of one (at least 1).
func maximalSubpart(b []byte) int {
	c := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF) // the range of the second byte
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for k := 1; k <= need && k < len(b); k++ {
		if k == 1 && (b[k] < lo || b[k] > hi) || k > 1 && (b[k] < 0x80 || b[k] > 0xBF) {
			break
		}
		n++
	}
	return n
}

// decodeByteFallback turns runs of "<0xNN>" tokens into the text their
// bytes spell, or one U+FFFD per token when they are not valid UTF-8.
func decodeByteFallback(toks []string) []string {
	out := toks[:0:0]
	var bytes []byte
	flush := func() {
		if len(bytes) == 0 {
			return
		}
		if utf8.Valid(bytes) {
			out = append(out, string(bytes))
		} else {
			for range bytes {
				out = append(out, "\uFFFD")
			}
		}
		bytes = bytes[:0]
	}
	for _, t := range toks {
		if b, ok := byteToken(t); ok {
			bytes = append(bytes, b)
			continue
		}
		flush()
		out = append(out, t)
	}
	flush()
	return out
}

// byteToken reads "<0xNN>" as Rust's u8::from_str_radix does (a leading +
// allowed).
func byteToken(t string) (byte, bool) {
	if len(t) != 6 || !strings.HasPrefix(t, "<0x") || t[5] != '>' {
		return 0, false
	}
	h := strings.TrimPrefix(t[3:5], "+")
	v, err := strconv.ParseUint(h, 16, 8)
	return byte(v), err == nil
}

// strip removes up to start leading and stop trailing content characters
// from t.
func strip(t string, content rune, start, stop int) string {
	for k := 0; k < start; k++ {
		r, n := utf8.DecodeRuneInString(t)
		if n == 0 || r != content {
			break
		}
		t = t[n:]
	}
	for k := 0; k < stop; k++ {
		r, n := utf8.DecodeLastRuneInString(t)
		if n == 0 || r != content {
			break
		}
		t = t[:len(t)-n]
	}
	return t
}
