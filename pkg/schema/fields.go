package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// checkFields reports, by JSON path under path, every key of the JSON
// object b that names no field of the struct type t, and every key given
// twice, then does the same in each nested object of a struct field. Keys
// match exactly: encoding/json would take "Task" for "task" and the last of
// two "task"s, and ignore the rest. b has decoded into a t already, so it
// is well-formed and its values have the right JSON types. The keys in
// also are known at b's top level as well (an API request's optional "v").
func checkFields(p *problems, b []byte, t reflect.Type, path string, also ...string) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return // null
	}
	fields := jsonFields(t)
	seen := make(map[string]bool, len(fields))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return
		}
		at := key
		if path != "" {
			at = path + "." + key
		}
		ft, ok := fields[key]
		switch {
		case !ok && slices.Contains(also, key):
			if seen[key] {
				p.add(at, "given twice")
			}
			seen[key] = true
		case !ok:
			p.add(at, "unknown field%s", hint(key, fields, path))
		case seen[key]:
			p.add(at, "given twice")
		default:
			seen[key] = true
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct && ft.PkgPath() == t.PkgPath() {
				checkFields(p, raw, ft, at)
			}
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
