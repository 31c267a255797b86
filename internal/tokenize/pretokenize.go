package tokenize

import (
	"unicode"
	"unicode/utf8"
)

// The Split pre-tokenizer patterns this package implements by hand (Go's
// regexp has no look-ahead, which `\s+(?!\S)` needs). They differ only in
// how many digits one pre-token holds. From the tokenizer.json files of
// Qwen2/Qwen2.5/Qwen3 and Llama 3.
const (
	patternQwen2  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// splitter cuts text into pre-tokens as the regex above does under a
// backtracking engine (Oniguruma, which Hugging Face tokenizers uses): at
// each position the first alternative that matches wins, and every
// character is covered by some alternative, so the pieces concatenate back
// to the text.
type splitter struct {
	maxDigits int // 1 for Qwen2, 3 for Llama 3
}

// split calls fn with each pre-token of s, in order.
func (p splitter) split(s string, fn func(piece string)) {
	for len(s) > 0 {
		n := p.next(s)
		fn(s[:n])
		s = s[n:]
	}
}

func isLetter(r rune) bool { return unicode.IsLetter(r) }
func isNumber(r rune) bool { return unicode.IsNumber(r) }

// isSpace is \s: Unicode White_Space, which unicode.IsSpace implements.
func isSpace(r rune) bool   { return unicode.IsSpace(r) }
func isNewline(r rune) bool { return r == '\r' || r == '\n' }

// isOther is [^\s\p{L}\p{N}].
func isOther(r rune) bool { return !isSpace(r) && !isLetter(r) && !isNumber(r) }

func runeAt(s string, i int) (rune, int) {
	if i >= len(s) {
		return -1, 0
	}
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// span returns the end of the run of runes from i that satisfy f, and how
// many runes it holds (at most limit when limit > 0).
func span(s string, i int, f func(rune) bool, limit int) (end, count int) {
	for i < len(s) && (limit <= 0 || count < limit) {
		r, n := runeAt(s, i)
		if !f(r) {
			break
		}
		i += n
		count++
	}
	return i, count
}

// foldASCII lower-cases r for the case-insensitive contractions; U+017F
// (long s) folds to s under Unicode case folding.
func foldASCII(r rune) rune {
	switch {
	case r >= 'A' && r <= 'Z':
		return r + 'a' - 'A'
	case r == 'ſ':
		return 's'
	}
	return r
}

// next returns the byte length of the first pre-token of non-empty s.
func (p splitter) next(s string) int {
	r0, n0 := runeAt(s, 0)
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if r0 == '\'' {
		r1, n1 := runeAt(s, 1)
		switch foldASCII(r1) {
		case 's', 't', 'm', 'd':
			return 1 + n1
		case 'r', 'v', 'l':
			want := 'e'
			if foldASCII(r1) == 'l' {
				want = 'l'
			}
			if r2, n2 := runeAt(s, 1+n1); foldASCII(r2) == want {
				return 1 + n1 + n2
			}
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if isLetter(r0) {
		end, _ := span(s, 0, isLetter, 0)
		return end
	}
	if !isNewline(r0) && !isNumber(r0) {
		if r1, _ := runeAt(s, n0); r1 >= 0 && isLetter(r1) {
			end, _ := span(s, n0, isLetter, 0)
			return end
		}
	}
	// \p{N} or \p{N}{1,3}
	if isNumber(r0) {
		end, _ := span(s, 0, isNumber, p.maxDigits)
		return end
	}
	// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
	start := 0
	if r0 == ' ' {
		start = 1
	}
	if end, k := span(s, start, isOther, 0); k > 0 {
		end, _ = span(s, end, isNewline, 0)
		return end
	}
	// r0 is white space here: every other rune was taken above.
	end, count := span(s, 0, isSpace, 0)
	// \s*[\r\n]+ : up to the last line break of the run.
	for i := end - 1; i >= 0; i-- {
		if isNewline(rune(s[i])) {
			return i + 1
		}
	}
	// \s+(?!\S) : the run, less its last rune when a non-space follows.
	if end == len(s) || count == 1 {
		return end // at the end of the text; or \s+ of one rune
	}
	_, last := utf8.DecodeLastRuneInString(s[:end])
	return end - last
}
