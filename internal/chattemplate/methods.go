package chattemplate

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/exec"
)

// gonjaStrMethods and gonjaDictMethods are the names of gonja's own methods;
// the ones not overridden below are kept as gonja implements them.
var (
	gonjaStrMethods = []string{
		"capitalize", "capwords", "casefold", "center", "count", "encode", "endswith",
		"expandtabs", "find", "format", "format_map", "isalnum", "isalpha", "isascii",
		"isdecimal", "isdigit", "islower", "isnumeric", "isprintable", "isspace",
		"istitle", "isupper", "join", "ljust", "lower", "lstrip", "partition",
		"removeprefix", "removesuffix", "replace", "rfind", "rjust", "rpartition",
		"rsplit", "rstrip", "split", "splitlines", "startswith", "strip", "swapcase",
		"title", "upper", "zfill",
	}
	gonjaDictMethods = []string{
		"keys", "values", "items", "get", "pop", "setdefault", "update", "copy", "clear",
	}
)

// methods is gonja's method table with the string and dictionary methods
// real chat templates call replaced by Python's semantics: strip() and
// split() without arguments work on whitespace runs, startswith takes a
// tuple, items()/keys()/values() keep the mapping's order.
func methods() exec.Methods {
	str := map[string]exec.Method[string]{}
	for _, name := range gonjaStrMethods {
		if m, ok := builtins.Methods.Str.Get(name); ok {
			str[name] = m
		}
	}
	for name, m := range map[string]exec.Method[string]{
		"strip":      strStrip(strings.TrimFunc, strings.Trim),
		"lstrip":     strStrip(strings.TrimLeftFunc, strings.TrimLeft),
		"rstrip":     strStrip(strings.TrimRightFunc, strings.TrimRight),
		"split":      strSplit,
		"rsplit":     strRSplit,
		"startswith": strAffix(strings.HasPrefix),
		"endswith":   strAffix(strings.HasSuffix),
		"replace":    strReplace,
		"upper":      strNoArgs(strings.ToUpper),
		"lower":      strNoArgs(strings.ToLower),
		"title":      strNoArgs(pyTitle),
		"capitalize": strNoArgs(pyCapitalize),
	} {
		str[name] = m
	}
	dict := map[string]exec.Method[map[string]any]{}
	for _, name := range gonjaDictMethods {
		if m, ok := builtins.Methods.Dict.Get(name); ok {
			dict[name] = m
		}
	}
	dict["items"] = dictItems
	dict["keys"] = dictKeys
	dict["values"] = dictValues
	dict["get"] = dictGet
	return exec.Methods{
		Bool:  builtins.Methods.Bool,
		Int:   builtins.Methods.Int,
		Float: builtins.Methods.Float,
		Str:   exec.NewMethodSet(str),
		Dict:  exec.NewMethodSet(dict),
		List:  builtins.Methods.List,
	}
}

func noArgs(name string, a *exec.VarArgs) error {
	if len(a.Args) > 0 || len(a.KwArgs) > 0 {
		return fmt.Errorf("%s() takes no arguments", name)
	}
	return nil
}

func strNoArgs(f func(string) string) exec.Method[string] {
	return func(self string, _ *exec.Value, a *exec.VarArgs) (any, error) {
		if err := noArgs("str method", a); err != nil {
			return nil, err
		}
		return f(self), nil
	}
}

// strStrip is str.strip, lstrip or rstrip: whitespace when chars is None,
// else every character in chars.
func strStrip(ws func(string, func(rune) bool) string, chars func(string, string) string) exec.Method[string] {
	return func(self string, _ *exec.Value, a *exec.VarArgs) (any, error) {
		if len(a.Args) > 1 || len(a.KwArgs) > 0 {
			return nil, errors.New("strip() takes at most 1 argument")
		}
		if len(a.Args) == 0 || a.Args[0].IsNil() {
			return ws(self, isPySpace), nil
		}
		if !a.Args[0].IsString() {
			return nil, errors.New("strip arg must be None or str")
		}
		return chars(self, a.Args[0].String()), nil
	}
}

// splitArgs reads (sep=None, maxsplit=-1).
func splitArgs(a *exec.VarArgs) (sep *string, maxsplit int, err error) {
	maxsplit = -1
	args := append([]*exec.Value{}, a.Args...)
	if v, ok := a.KwArgs["sep"]; ok {
		if len(args) > 0 {
			return nil, 0, errors.New("split() got multiple values for sep")
		}
		args = append(args, v)
	}
	if v, ok := a.KwArgs["maxsplit"]; ok {
		if len(args) == 0 {
			args = append(args, exec.AsValue(nil))
		}
		if len(args) > 1 {
			return nil, 0, errors.New("split() got multiple values for maxsplit")
		}
		args = append(args, v)
	}
	for k := range a.KwArgs {
		if k != "sep" && k != "maxsplit" {
			return nil, 0, fmt.Errorf("split() got an unexpected keyword argument %q", k)
		}
	}
	if len(args) > 2 {
		return nil, 0, errors.New("split() takes at most 2 arguments")
	}
	if len(args) > 0 && !args[0].IsNil() {
		if !args[0].IsString() {
			return nil, 0, errors.New("split() separator must be str or None")
		}
		s := args[0].String()
		if s == "" {
			return nil, 0, errors.New("empty separator")
		}
		sep = &s
	}
	if len(args) > 1 {
		if !args[1].IsInteger() {
			return nil, 0, errors.New("split() maxsplit must be an integer")
		}
		maxsplit = args[1].Integer()
	}
	return sep, maxsplit, nil
}

func strSplit(self string, _ *exec.Value, a *exec.VarArgs) (any, error) {
	sep, maxsplit, err := splitArgs(a)
	if err != nil {
		return nil, err
	}
	var parts []string
	switch {
	case sep != nil && maxsplit < 0:
		parts = strings.Split(self, *sep)
	case sep != nil:
		parts = strings.SplitN(self, *sep, maxsplit+1)
	default:
		parts = splitWhitespace(self, maxsplit)
	}
	return toAnyList(parts), nil
}

func strRSplit(self string, _ *exec.Value, a *exec.VarArgs) (any, error) {
	sep, maxsplit, err := splitArgs(a)
	if err != nil {
		return nil, err
	}
	if maxsplit < 0 {
		return strSplit(self, nil, a)
	}
	var parts []string
	if sep == nil {
		// Split the reversed string on whitespace and reverse back.
		rev := reverseRunes(self)
		for _, p := range splitWhitespace(rev, maxsplit) {
			parts = append([]string{reverseRunes(p)}, parts...)
		}
		return toAnyList(parts), nil
	}
	rest := self
	for range maxsplit {
		i := strings.LastIndex(rest, *sep)
		if i < 0 {
			break
		}
		parts = append([]string{rest[i+len(*sep):]}, parts...)
		rest = rest[:i]
	}
	return toAnyList(append([]string{rest}, parts...)), nil
}

// splitWhitespace is str.split(None, maxsplit): runs of whitespace separate,
// leading and trailing whitespace give no empty strings, and after maxsplit
// splits the rest is kept with its leading whitespace removed.
func splitWhitespace(s string, maxsplit int) []string {
	out := []string{}
	i := 0
	for {
		for i < len(s) {
			r, n := utf8.DecodeRuneInString(s[i:])
			if !isPySpace(r) {
				break
			}
			i += n
		}
		if i >= len(s) {
			return out
		}
		if maxsplit >= 0 && len(out) == maxsplit {
			return append(out, strings.TrimRightFunc(s[i:], isPySpace))
		}
		j := i
		for j < len(s) {
			r, n := utf8.DecodeRuneInString(s[j:])
			if isPySpace(r) {
				break
			}
			j += n
		}
		out = append(out, s[i:j])
		i = j
	}
}

func reverseRunes(s string) string {
	r := []rune(s)
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	return string(r)
}

func toAnyList(parts []string) []any {
	out := make([]any, len(parts))
	for i, p := range parts {
		out[i] = p
	}
	return out
}

// strAffix is str.startswith or str.endswith: a string or a tuple of
// strings, with optional start and end in characters.
func strAffix(match func(string, string) bool) exec.Method[string] {
	return func(self string, _ *exec.Value, a *exec.VarArgs) (any, error) {
		if len(a.Args) < 1 || len(a.Args) > 3 || len(a.KwArgs) > 0 {
			return nil, errors.New("startswith/endswith take 1 to 3 positional arguments")
		}
		runes := []rune(self)
		start, end := 0, len(runes)
		if len(a.Args) > 1 && !a.Args[1].IsNil() {
			start = pyIndex(a.Args[1].Integer(), len(runes))
		}
		if len(a.Args) > 2 && !a.Args[2].IsNil() {
			end = pyIndex(a.Args[2].Integer(), len(runes))
		}
		if start > end {
			return false, nil
		}
		sub := string(runes[start:end])
		affix := a.Args[0]
		switch {
		case affix.IsString():
			return match(sub, affix.String()), nil
		case affix.IsList():
			for i := range affix.Len() {
				e := affix.Index(i)
				if !e.IsString() {
					return nil, errors.New("tuple for startswith/endswith must only contain str")
				}
				if match(sub, e.String()) {
					return true, nil
				}
			}
			return false, nil
		}
		return nil, errors.New("startswith/endswith first arg must be str or a tuple of str")
	}
}

// pyIndex clamps a Python slice index into [0, n].
func pyIndex(i, n int) int {
	if i < 0 {
		i += n
	}
	return min(max(i, 0), n)
}

func strReplace(self string, _ *exec.Value, a *exec.VarArgs) (any, error) {
	if len(a.Args) < 2 || len(a.Args) > 3 || len(a.KwArgs) > 0 {
		return nil, errors.New("replace() takes 2 or 3 positional arguments")
	}
	if !a.Args[0].IsString() || !a.Args[1].IsString() {
		return nil, errors.New("replace() arguments must be str")
	}
	n := -1
	if len(a.Args) == 3 {
		n = a.Args[2].Integer()
	}
	return strings.Replace(self, a.Args[0].String(), a.Args[1].String(), n), nil
}

// pyTitle is str.title: a cased character after an uncased one is upper
// case, after a cased one lower case.
func pyTitle(s string) string {
	var b strings.Builder
	prevCased := false
	for _, r := range s {
		cased := unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r)
		switch {
		case cased && !prevCased:
			b.WriteRune(unicode.ToTitle(r))
		case cased:
			b.WriteRune(unicode.ToLower(r))
		default:
			b.WriteRune(r)
		}
		prevCased = cased
	}
	return b.String()
}

// pyCapitalize is str.capitalize: the first character title case, the rest
// lower case.
func pyCapitalize(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	if n == 0 {
		return s
	}
	return string(unicode.ToTitle(r)) + strings.ToLower(s[n:])
}

func dictItems(_ map[string]any, self *exec.Value, a *exec.VarArgs) (any, error) {
	if err := noArgs("items", a); err != nil {
		return nil, err
	}
	return orderedItems(self), nil
}

func dictKeys(_ map[string]any, self *exec.Value, a *exec.VarArgs) (any, error) {
	if err := noArgs("keys", a); err != nil {
		return nil, err
	}
	out := []any{}
	for _, kv := range orderedItems(self) {
		out = append(out, kv.([]any)[0])
	}
	return out, nil
}

func dictValues(_ map[string]any, self *exec.Value, a *exec.VarArgs) (any, error) {
	if err := noArgs("values", a); err != nil {
		return nil, err
	}
	out := []any{}
	for _, kv := range orderedItems(self) {
		out = append(out, kv.([]any)[1])
	}
	return out, nil
}

func dictGet(_ map[string]any, self *exec.Value, a *exec.VarArgs) (any, error) {
	if len(a.Args) < 1 || len(a.Args) > 2 || len(a.KwArgs) > 0 {
		return nil, errors.New("get() takes 1 or 2 positional arguments")
	}
	for _, kv := range orderedItems(self) {
		pair := kv.([]any)
		if exec.AsValue(pair[0]).EqualValueTo(a.Args[0]) {
			return pair[1], nil
		}
	}
	if len(a.Args) == 2 {
		return a.Args[1].Interface(), nil
	}
	return pyNone, nil
}
