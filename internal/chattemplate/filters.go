package chattemplate

import (
	"fmt"
	"sort"
	"strings"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// pyStr is Python's str() of a value as Jinja2 prints it; an undefined
// value is "".
func pyStr(v *exec.Value) string {
	switch {
	case v.IsNil():
		return ""
	case v.IsBool():
		if v.Bool() {
			return "True"
		}
		return "False"
	case v.IsFloat():
		return PyFloatRepr(v.Float())
	}
	return v.String()
}

// filterToJSON is transformers' tojson: json.dumps(x, ensure_ascii=False,
// indent=indent, separators=separators, sort_keys=sort_keys), not Jinja2's
// HTML-safe one.
func filterToJSON(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	opts := jsonOptions{itemSep: ", ", keySep: ": "}
	var (
		ensureASCII = exec.AsValue(false)
		indent      = exec.AsValue(nil)
		separators  = exec.AsValue(nil)
		sortKeys    = exec.AsValue(false)
	)
	args := []**exec.Value{&ensureASCII, &indent, &separators, &sortKeys}
	names := []string{"ensure_ascii", "indent", "separators", "sort_keys"}
	if len(params.Args) > len(args) {
		return exec.AsValue(fmt.Errorf("tojson takes at most %d arguments", len(args)))
	}
	for i, a := range params.Args {
		*args[i] = a
	}
	for k, v := range params.KwArgs {
		i := indexOf(names, k)
		if i < 0 {
			return exec.AsValue(fmt.Errorf("tojson: unexpected keyword argument %q", k))
		}
		*args[i] = v
	}
	opts.ensureASCII = ensureASCII.IsTrue()
	opts.sortKeys = sortKeys.IsTrue()
	switch {
	case indent.IsNil():
	case indent.IsInteger():
		s := strings.Repeat(" ", max(indent.Integer(), 0))
		opts.indent = &s
	case indent.IsString():
		s := indent.String()
		opts.indent = &s
	default:
		return exec.AsValue(fmt.Errorf("tojson: indent must be an int or a string"))
	}
	if opts.indent != nil {
		opts.itemSep = ","
	}
	if !separators.IsNil() {
		if !separators.IsList() || separators.Len() != 2 {
			return exec.AsValue(fmt.Errorf("tojson: separators must be a pair of strings"))
		}
		opts.itemSep, opts.keySep = separators.Index(0).String(), separators.Index(1).String()
	}
	out, err := pyJSON(in, opts)
	if err != nil {
		return exec.AsValue(err)
	}
	return exec.AsSafeValue(out)
}

func indexOf(list []string, s string) int {
	for i, e := range list {
		if e == s {
			return i
		}
	}
	return -1
}

// filterItems is Jinja2's items: a mapping's (key, value) pairs in its own
// order; undefined gives nothing.
func filterItems(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	if len(params.Args) > 0 || len(params.KwArgs) > 0 {
		return exec.AsValue(fmt.Errorf("items takes no arguments"))
	}
	if in.IsNil() {
		return exec.AsValue([]any{})
	}
	if !in.IsDict() {
		return exec.AsValue(fmt.Errorf("items: can only get item pairs from a mapping"))
	}
	return exec.AsValue(orderedItems(in))
}

// orderedItems returns [key, value] pairs in the mapping's order: insertion
// order for an ordered dictionary, sorted keys for a Go map.
func orderedItems(in *exec.Value) []any {
	out := []any{}
	if d, ok := dictOf(in); ok {
		for _, p := range d.Pairs {
			out = append(out, []any{p.Key.Interface(), p.Value.Interface()})
		}
		return out
	}
	for _, k := range in.Keys() {
		v, _ := in.GetItem(k.Interface())
		out = append(out, []any{k.Interface(), v.Interface()})
	}
	return out
}

func dictOf(v *exec.Value) (*exec.Dict, bool) {
	switch d := v.Interface().(type) {
	case *exec.Dict:
		return d, d != nil
	case exec.Dict:
		return &d, true
	}
	return nil, false
}

// filterTrim is Jinja2's trim: str(value).strip(chars).
func filterTrim(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	s := pyStr(in)
	if len(params.Args) > 0 && !params.Args[0].IsNil() {
		return exec.AsValue(strings.Trim(s, params.Args[0].String()))
	}
	return exec.AsValue(strings.TrimFunc(s, isPySpace))
}

// filterString is Jinja2's string: str(value).
func filterString(_ *exec.Evaluator, in *exec.Value, _ *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	if in.IsString() {
		return in
	}
	return exec.AsValue(pyStr(in))
}

// isPySpace is str.isspace for one character.
func isPySpace(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x1f, 0x85, 0xa0, 0x1680,
		0x2028, 0x2029, 0x202f, 0x205f, 0x3000:
		return true
	}
	return r >= 0x2000 && r <= 0x200a
}

// filterDictSort is Jinja2's dictsort(case_sensitive=False, by='key',
// reverse=False): the (key, value) pairs sorted.
func filterDictSort(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	if !in.IsDict() {
		return exec.AsValue(fmt.Errorf("dictsort: can only sort a mapping"))
	}
	var (
		caseSensitive = exec.AsValue(false)
		by            = exec.AsValue("key")
		reverse       = exec.AsValue(false)
	)
	args := []**exec.Value{&caseSensitive, &by, &reverse}
	names := []string{"case_sensitive", "by", "reverse"}
	if len(params.Args) > len(args) {
		return exec.AsValue(fmt.Errorf("dictsort takes at most %d arguments", len(args)))
	}
	for i, a := range params.Args {
		*args[i] = a
	}
	for k, v := range params.KwArgs {
		i := indexOf(names, k)
		if i < 0 {
			return exec.AsValue(fmt.Errorf("dictsort: unexpected keyword argument %q", k))
		}
		*args[i] = v
	}
	col := 0
	switch by.String() {
	case "key":
	case "value":
		col = 1
	default:
		return exec.AsValue(fmt.Errorf("dictsort: you can only sort by either \"key\" or \"value\""))
	}
	items := orderedItems(in)
	sortKey := func(v any) *exec.Value {
		x := exec.AsValue(v)
		if x.IsString() && !caseSensitive.IsTrue() {
			return exec.AsValue(strings.ToLower(x.String()))
		}
		return x
	}
	sort.SliceStable(items, func(i, j int) bool {
		pair := exec.ValuesList{sortKey(items[i].([]any)[col]), sortKey(items[j].([]any)[col])}
		if reverse.IsTrue() {
			return pair.Less(1, 0)
		}
		return pair.Less(0, 1)
	})
	return exec.AsValue(items)
}

// filterLength is gonja's length, except that None has none (Python raises
// TypeError where gonja would answer 0).
func filterLength(gonja exec.FilterFunction) exec.FilterFunction {
	return func(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
		if isNone(in) {
			return exec.AsValue(fmt.Errorf("object of type 'NoneType' has no len()"))
		}
		if gonja == nil {
			return exec.AsValue(in.Len())
		}
		return gonja(e, in, params)
	}
}
