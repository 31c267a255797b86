package tokenize

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// The tokenizers library compiles its patterns with Oniguruma, where \s,
// \d and \w are Unicode classes; Go's regexp makes them ASCII. translate
// rewrites them, and refuses what Go's regexp would run differently
// (look-around, \b, anchors, which mean line starts in Oniguruma), so a
// pattern either runs as the library runs it or is refused.
const (
	uniSpace = `\t\n\v\f\r\x{85}\p{Z}` // White_Space, as unicode.IsSpace
	uniDigit = `\p{Nd}`
	uniWord  = `\p{L}\p{M}\p{Nd}\p{Pc}`
)

// errRegex reports a pattern construct this package does not run.
var errRegex = fmt.Errorf("regex construct: %w", ErrUnsupported)

// wsLookahead is the alternative `\s+(?!\S)`, the one look-ahead the
// models' patterns use: a run of white space, less its last character
// when a non-space follows.
const wsLookahead = `\s+(?!\S)`

// translate rewrites an Oniguruma pattern without look-around for Go's
// regexp.
func translate(pat string) (string, error) {
	var b strings.Builder
	inClass := 0
	for i := 0; i < len(pat); i++ {
		c := pat[i]
		switch {
		case c == '\\':
			if i+1 >= len(pat) {
				return "", fmt.Errorf("%q: trailing backslash", pat)
			}
			i++
			e := pat[i]
			switch e {
			case 's':
				b.WriteString(wrap(uniSpace, inClass > 0))
			case 'd':
				b.WriteString(wrap(uniDigit, inClass > 0))
			case 'w':
				b.WriteString(wrap(uniWord, inClass > 0))
			case 'S', 'D', 'W':
				if inClass > 0 {
					return "", fmt.Errorf("%q: \\%c inside a class: %w", pat, e, errRegex)
				}
				cls := map[byte]string{'S': uniSpace, 'D': uniDigit, 'W': uniWord}[e]
				b.WriteString("[^" + cls + "]")
			case 'b', 'B', 'A', 'z', 'Z', 'G', 'h', 'H', 'R', 'X', 'K', 'k', 'g':
				return "", fmt.Errorf("%q: \\%c: %w", pat, e, errRegex)
			case 'u': // \uHHHH
				if i+4 >= len(pat) || !isHex(pat[i+1:i+5]) {
					return "", fmt.Errorf("%q: \\u without four hex digits: %w", pat, errRegex)
				}
				b.WriteString(`\x{` + pat[i+1:i+5] + `}`)
				i += 4
			default:
				if e >= '1' && e <= '9' {
					return "", fmt.Errorf("%q: back-reference: %w", pat, errRegex)
				}
				b.WriteByte('\\')
				b.WriteByte(e)
			}
		case c == '[':
			b.WriteByte(c)
			if inClass > 0 && i+1 < len(pat) && pat[i+1] == ':' { // [:alpha:]
				end := strings.Index(pat[i:], ":]")
				if end < 0 {
					return "", fmt.Errorf("%q: unterminated class name", pat)
				}
				b.WriteString(pat[i+1 : i+end+2])
				i += end + 1
				continue
			}
			inClass++
			if i+1 < len(pat) && pat[i+1] == '^' {
				b.WriteByte('^')
				i++
			}
			if i+1 < len(pat) && pat[i+1] == ']' { // a literal ] first in a class
				b.WriteString(`\]`)
				i++
			}
		case c == ']' && inClass > 0:
			inClass--
			b.WriteByte(c)
		case inClass > 0:
			if c == '&' && i+1 < len(pat) && pat[i+1] == '&' {
				return "", fmt.Errorf("%q: class intersection: %w", pat, errRegex)
			}
			b.WriteByte(c)
		case c == '^' || c == '$':
			return "", fmt.Errorf("%q: anchor %c: %w", pat, c, errRegex)
		case c == '(' && (strings.HasPrefix(pat[i:], "(?=") || strings.HasPrefix(pat[i:], "(?!") ||
			strings.HasPrefix(pat[i:], "(?<=") || strings.HasPrefix(pat[i:], "(?<!") ||
			strings.HasPrefix(pat[i:], "(?>") || strings.HasPrefix(pat[i:], "(?~")):
			return "", fmt.Errorf("%q: look-around or atomic group: %w", pat, errRegex)
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

func wrap(cls string, inClass bool) string {
	if inClass {
		return cls
	}
	return "[" + cls + "]"
}

// compileRegex compiles an Oniguruma pattern without look-around.
func compileRegex(pat string) (*regexp.Regexp, error) {
	g, err := translate(pat)
	if err != nil {
		return nil, err
	}
	re, err := regexp.Compile(g)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", pat, errors.Join(errRegex, err))
	}
	return re, nil
}

// regexMatcher finds a pattern as Oniguruma's leftmost-first search does.
// Go's regexp prefers alternatives and repeats in the same order for the
// patterns translate accepts, so a pattern without look-ahead runs as Go's
// FindAll. A top-level alternative `\s+(?!\S)` splits the pattern into
// parts tried in order at each position.
type regexMatcher struct {
	whole *regexp.Regexp // the pattern, when it has no `\s+(?!\S)`
	parts []*regexp.Regexp
}

func newRegexMatcher(pat string) (matcher, error) {
	alts := topLevelAlternatives(pat)
	var parts []*regexp.Regexp
	var group []string
	flush := func() error {
		if len(group) == 0 {
			return nil
		}
		g, err := translate(strings.Join(group, "|"))
		if err != nil {
			return err
		}
		re, err := regexp.Compile(`\A(?:` + g + `)`)
		if err != nil {
			return fmt.Errorf("%q: %w", pat, errors.Join(errRegex, err))
		}
		parts = append(parts, re)
		group = nil
		return nil
	}
	lookahead := false
	for _, a := range alts {
		if a == wsLookahead {
			if err := flush(); err != nil {
				return nil, err
			}
			parts = append(parts, nil)
			lookahead = true
			continue
		}
		group = append(group, a)
	}
	if !lookahead {
		re, err := compileRegex(pat)
		if err != nil {
			return nil, err
		}
		return regexMatcher{whole: re}, nil
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return regexMatcher{parts: parts}, nil
}

// topLevelAlternatives splits pat at the | outside groups and classes.
func topLevelAlternatives(pat string) []string {
	var alts []string
	depth, inClass, start := 0, 0, 0
	for i := 0; i < len(pat); i++ {
		switch c := pat[i]; {
		case c == '\\':
			i++
		case c == '[':
			inClass++
		case c == ']' && inClass > 0:
			inClass--
		case inClass > 0:
		case c == '(':
			depth++
		case c == ')':
			depth--
		case c == '|' && depth == 0:
			alts = append(alts, pat[start:i])
			start = i + 1
		}
	}
	return append(alts, pat[start:])
}

func (m regexMatcher) matches(s string) [][2]int {
	if m.whole != nil {
		var out [][2]int
		for _, x := range m.whole.FindAllStringIndex(s, -1) {
			if x[1] > x[0] {
				out = append(out, [2]int{x[0], x[1]})
			}
		}
		return out
	}
	var out [][2]int
	for i := 0; i < len(s); {
		if n := m.matchAt(s[i:]); n > 0 {
			out = append(out, [2]int{i, i + n})
			i += n
			continue
		}
		_, n := utf8.DecodeRuneInString(s[i:])
		i += n
	}
	return out
}

// matchAt returns the length of the match at the start of s, 0 for none.
func (m regexMatcher) matchAt(s string) int {
	for _, re := range m.parts {
		if re == nil {
			end, count := span(s, 0, isSpace, 0)
			if count == 0 {
				continue
			}
			if end == len(s) {
				return end
			}
			if count > 1 {
				_, last := utf8.DecodeLastRuneInString(s[:end])
				return end - last
			}
			continue
		}
		if loc := re.FindStringIndex(s); loc != nil && loc[1] > 0 {
			return loc[1]
		}
	}
	return 0
}
