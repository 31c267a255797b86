package agent

import (
	"fmt"
	"maps"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/actloop/actloop/internal/chattemplate"
)

// Jinja2 prints {{ x }} as Python's str(x): a float as 0.0, None as None, a
// list or dict as its repr, strings inside it quoted and escaped. gonja
// prints a Go value its own way (nil as "", a list's strings quoted but not
// escaped, a map's keys sorted), so the values a template can print whole
// are held in these types, whose String is Python's. Their kinds stay those
// of the Go values they wrap, so indexing, length, iteration and arithmetic
// work on them as before.

// pyNone is Python's None, as PyYAML loads null, ~ and an empty value. A
// zero-length array, so that it is false in {% if %}; the none test is true
// for it (jinjaEnvironment).
type pyNone [0]struct{}

func (pyNone) String() string { return "None" }

// pyFloat is a Python float: it prints as repr(float) (0.0, 1e+16, nan, inf).
type pyFloat float64

func (f pyFloat) String() string { return chattemplate.PyFloatRepr(float64(f)) }

// pyList is a Python list: it prints as its repr.
type pyList []any

func (l pyList) String() string { return pyRepr(l) }

// pyDict is a Python dict with string keys: it prints as its repr, keys in
// sorted order. Python keeps the order the keys were inserted in; gonja
// keeps none (it iterates a map in sorted order too), so only a dict whose
// keys were written sorted prints exactly as Jinja2 prints it.
type pyDict map[string]any

func (d pyDict) String() string { return pyRepr(d) }

// outputDict is the dict a command's execution gives the observation
// template as output. mini-swe-agent (v1.17.5, agents/default.py,
// execute_action) builds it as the environment's {"output", "returncode"}
// with "action" added, and prints it in that order.
type outputDict map[string]any

var outputKeys = []string{"output", "returncode", "action"}

func (d outputDict) String() string { return pyRepr(d) }

// pyRepr returns Python's repr of v.
func pyRepr(v any) string {
	var b strings.Builder
	writeRepr(&b, v)
	return b.String()
}

func writeRepr(b *strings.Builder, v any) {
	switch x := v.(type) {
	case nil, pyNone:
		b.WriteString("None")
	case string:
		writeStringRepr(b, x)
	case bool:
		if x {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case int:
		b.WriteString(strconv.Itoa(x))
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case *big.Int:
		b.WriteString(x.String())
	case float64:
		b.WriteString(chattemplate.PyFloatRepr(x))
	case pyFloat:
		b.WriteString(chattemplate.PyFloatRepr(float64(x)))
	case pyList:
		writeListRepr(b, x)
	case []any:
		writeListRepr(b, x)
	case pyDict:
		writeDictRepr(b, x, slices.Sorted(maps.Keys(x)))
	case map[string]any:
		writeDictRepr(b, x, slices.Sorted(maps.Keys(x)))
	case outputDict:
		keys := slices.Clone(outputKeys)
		for _, k := range slices.Sorted(maps.Keys(x)) {
			if !slices.Contains(outputKeys, k) {
				keys = append(keys, k)
			}
		}
		writeDictRepr(b, x, keys)
	default:
		fmt.Fprint(b, v)
	}
}

func writeListRepr(b *strings.Builder, l []any) {
	b.WriteByte('[')
	for i, e := range l {
		if i > 0 {
			b.WriteString(", ")
		}
		writeRepr(b, e)
	}
	b.WriteByte(']')
}

func writeDictRepr(b *strings.Builder, m map[string]any, keys []string) {
	b.WriteByte('{')
	first := true
	for _, k := range keys {
		v, ok := m[k]
		if !ok {
			continue
		}
		if !first {
			b.WriteString(", ")
		}
		first = false
		writeStringRepr(b, k)
		b.WriteString(": ")
		writeRepr(b, v)
	}
	b.WriteByte('}')
}

// writeStringRepr writes Python 3's repr of s (CPython unicode_repr): single
// quotes, or double quotes when s holds a ' and no "; \\, the quote, \t, \n
// and \r escaped; other control characters as \xhh; other characters that
// are not printable (str.isprintable: separators and the Cc, Cf, Cs, Co and
// Cn categories, which unicode.IsPrint also excludes) as \xhh, \uhhhh or
// \Uhhhhhhhh. An invalid byte prints as U+FFFD, as Python's decoding of a
// command's output with errors="replace" leaves it.
func writeStringRepr(b *strings.Builder, s string) {
	quote := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		quote = '"'
	}
	b.WriteByte(quote)
	for _, r := range s {
		switch {
		case r == rune(quote) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < ' ' || r == 0x7f:
			fmt.Fprintf(b, `\x%02x`, r)
		case r < 0x7f || unicode.IsPrint(r):
			b.WriteRune(r)
		case r <= 0xff:
			fmt.Fprintf(b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(b, `\u%04x`, r)
		default:
			fmt.Fprintf(b, `\U%08x`, r)
		}
	}
	b.WriteByte(quote)
}
