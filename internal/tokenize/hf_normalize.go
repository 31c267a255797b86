package tokenize

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites text before it is pre-tokenized, as one of the
// tokenizers library's normalizers (tokenizers/src/normalizers) does.
type normalizer func(string) string

// hfPattern is a Replace or Split pattern: a literal string or a regex.
type hfPattern struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

type hfNormalizer struct {
	Type        string            `json:"type"`
	Normalizers []json.RawMessage `json:"normalizers"`
	Pattern     hfPattern         `json:"pattern"`
	Content     string            `json:"content"`
	Prepend     string            `json:"prepend"`
	Left        *bool             `json:"left"`
	Right       *bool             `json:"right"`
}

const supportedNormalizers = "NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, Replace, Prepend, Sequence"

// parseNormalizer reads the normalizer at path; nil means none.
func parseNormalizer(raw json.RawMessage, path string) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var c hfNormalizer
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %s: %w", path, err)
	}
	switch c.Type {
	case "NFC":
		return nfc, nil
	case "NFD":
		return func(s string) string { return normalizeForm(s, norm.NFD) }, nil
	case "NFKC":
		return func(s string) string { return normalizeForm(s, norm.NFKC) }, nil
	case "NFKD":
		return func(s string) string { return normalizeForm(s, norm.NFKD) }, nil
	case "Lowercase":
		return lowercase, nil
	case "StripAccents":
		return func(s string) string {
			return strings.Map(func(r rune) rune {
				if unicode.Is(unicode.M, r) {
					return -1
				}
				return r
			}, s)
		}, nil
	case "Strip":
		left, right := c.Left == nil || *c.Left, c.Right == nil || *c.Right
		return func(s string) string {
			if left {
				s = strings.TrimLeftFunc(s, unicode.IsSpace)
			}
			if right {
				s = strings.TrimRightFunc(s, unicode.IsSpace)
			}
			return s
		}, nil
	case "Prepend":
		p := c.Prepend
		return func(s string) string {
			if s == "" {
				return s
			}
			return p + s
		}, nil
	case "Replace":
		return parseReplace(c.Pattern, c.Content, path)
	case "Sequence":
		var seq []normalizer
		for i, n := range c.Normalizers {
			f, err := parseNormalizer(n, fmt.Sprintf("%s.normalizers[%d]", path, i))
			if err != nil {
				return nil, err
			}
			if f != nil {
				seq = append(seq, f)
			}
		}
		switch len(seq) {
		case 0:
			return nil, nil
		case 1:
			return seq[0], nil
		}
		return func(s string) string {
			for _, f := range seq {
				s = f(s)
			}
			return s
		}, nil
	}
	return nil, unsupported(path, c.Type, supportedNormalizers)
}

// parseReplace reads a Replace normalizer (or decoder): every match of the
// pattern becomes content.
func parseReplace(p hfPattern, content, path string) (func(string) string, error) {
	switch {
	case p.String != nil:
		old := *p.String
		if old == "" {
			return func(s string) string { return s }, nil
		}
		return func(s string) string { return strings.ReplaceAll(s, old, content) }, nil
	case p.Regex != nil:
		re, err := compileRegex(*p.Regex)
		if err != nil {
			return nil, fmt.Errorf("tokenizer.json: %s.pattern.Regex: %w", path, err)
		}
		return func(s string) string { return re.ReplaceAllLiteralString(s, content) }, nil
	}
	return nil, fmt.Errorf("tokenizer.json: %s.pattern: want String or Regex", path)
}

// lowercase maps each rune to its lower case as Rust's char::to_lowercase
// does: rune by rune, without the final-sigma rule, and U+0130 (capital I
// with dot above) to "i" and a combining dot above.
func lowercase(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if r == '\u0130' {
			b.WriteString("i\u0307")
			continue
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}
