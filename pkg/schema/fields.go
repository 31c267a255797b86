package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// checkFields reports, by JSON path under path, every key of the JSON
// object b that names no field of the struct type t, and every key given
// twice, then does the same in each nested object of a struct field. Keys
// match exactly: encoding/json would take "Task" for "task" and the last of
// two "task"s, and ignore the rest. b has decoded into a t already, so it
// is well-formed and its values have the right JSON types. The keys in
// also are known at b's top level as well (an API request's optional "v").
// It reports at most maxUnknown keys of one object.
func checkFields(p *problems, b []byte, t reflect.Type, path string, also ...string) {
	sc := scanner{b: b}
	if !sc.open() {
		return // null
	}
	fields := jsonFields(t)
	seen := make(map[string]bool, len(fields))
	reported := 0
	for {
		key, raw, ok := sc.member()
		if !ok {
			return
		}
		at := clip(key)
		if path != "" {
			at = path + "." + at
		}
		if reported == maxUnknown {
			p.add(path+".*", "more unknown or repeated fields, not listed")
			return
		}
		ft, known := fields[key]
		switch {
		case seen[key]:
			p.add(at, "given twice")
			reported++
		case !known && slices.Contains(also, key):
		case !known:
			p.add(at, "unknown field%s", hint(key, fields, path))
			reported++
		default:
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct && ft.PkgPath() == t.PkgPath() {
				checkFields(p, raw, ft, at)
			}
			if et := ft; et.Kind() == reflect.Slice && et.Elem().Kind() == reflect.Struct && et.Elem().PkgPath() == t.PkgPath() {
				for i, el := range elements(raw) {
					checkFields(p, el, et.Elem(), at+"["+strconv.Itoa(i)+"]")
				}
			}
		}
		seen[key] = true
	}
}

const maxUnknown = 16

// scanner walks the members of a JSON object that encoding/json has
// accepted, without decoding the values: a sample's task runs to hundreds
// of KiB, which json.Decoder would copy and scan again.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

// open consumes the object's '{'; false when b is not an object (null).
func (s *scanner) open() bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '{' {
		s.i++
		return true
	}
	return false
}

// member reads the next key and its value's JSON text; false at the end.
func (s *scanner) member() (key string, value []byte, ok bool) {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == ',' {
		s.i++
		s.ws()
	}
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return "", nil, false // '}'
	}
	k0 := s.i
	raw := s.str()
	key = string(raw)
	if bytes.IndexByte(raw, '\\') >= 0 && json.Unmarshal(s.b[k0:s.i], &key) != nil {
		return "", nil, false
	}
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != ':' {
		return "", nil, false
	}
	s.i++
	s.ws()
	v0 := s.i
	s.skip()
	return key, s.b[v0:s.i], true
}

// elements returns the JSON text of each element of the array b (none
// when b is null).
func elements(b []byte) [][]byte {
	s := scanner{b: b}
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '[' {
		return nil
	}
	s.i++
	var out [][]byte
	for {
		s.ws()
		if s.i < len(s.b) && s.b[s.i] == ',' {
			s.i++
			s.ws()
		}
		if s.i >= len(s.b) || s.b[s.i] == ']' {
			return out
		}
		v0 := s.i
		s.skip()
		if s.i == v0 {
			return out
		}
		out = append(out, s.b[v0:s.i])
	}
}

// str consumes a string and returns its text between the quotes, escapes
// as they are.
func (s *scanner) str() []byte {
	start := s.i + 1
	for i := start; ; {
		j := bytes.IndexByte(s.b[i:], '"')
		if j < 0 {
			s.i = len(s.b)
			return s.b[start:]
		}
		i += j
		n := 0 // backslashes before the quote: an odd number escape it
		for k := i - 1; k >= start && s.b[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			s.i = i + 1
			return s.b[start:i]
		}
		i++
	}
}

// skip consumes one value.
func (s *scanner) skip() {
	if s.i >= len(s.b) {
		return
	}
	switch s.b[s.i] {
	case '"':
		s.str()
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				s.str()
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					return
				}
			}
			s.i++
		}
	default: // a number, true, false or null
		for s.i < len(s.b) && !endsLiteral(s.b[s.i]) {
			s.i++
		}
	}
}

// jsonFields maps the JSON names of t's fields to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	m := make(map[string]reflect.Type)
	for _, f := range reflect.VisibleFields(t) {
		if f.Anonymous || !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		m[name] = f.Type
	}
	return m
}

// hint suggests the field a misspelt key meant, or where a trainer's own
// data goes.
func hint(key string, fields map[string]reflect.Type, path string) string {
	best, bestD := "", 3 // at most 2 edits away
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if strings.EqualFold(name, key) {
			return fmt.Sprintf(" (did you mean %q? field names are case-sensitive)", name)
		}
		if d := editDistance(key, name); d < bestD {
			best, bestD = name, d
		}
	}
	_, meta := fields["metadata"]
	switch {
	case best != "":
		return fmt.Sprintf(" (did you mean %q?)", best)
	case path == "" && meta:
		return ` (not in schema v1; a trainer's own data goes in "metadata")`
	case path == "":
		return fmt.Sprintf(" (known: %s)", strings.Join(names, ", "))
	default:
		return fmt.Sprintf(" (%s has %s)", path, strings.Join(names, ", "))
	}
}

// editDistance is the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return max(len(a), len(b)) // not a typo of a field name
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := prev[j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			cur[j] = min(sub, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func endsLiteral(c byte) bool {
	switch c {
	case ',', '}', ']', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}
