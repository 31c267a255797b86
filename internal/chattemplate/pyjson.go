package chattemplate

import (
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// jsonOptions are the arguments of Python's json.dumps that transformers'
// tojson filter passes on.
type jsonOptions struct {
	ensureASCII bool
	indent      *string // nil: no newlines
	itemSep     string
	keySep      string
	sortKeys    bool
}

// pyJSON encodes v as Python's json.dumps does with opts: key order kept,
// floats in Python's repr, and with ensure_ascii=False only '"', '\\' and
// control characters below U+0020 escaped.
func pyJSON(v any, opts jsonOptions) (string, error) {
	var b strings.Builder
	if err := encodeJSON(&b, v, opts, 0); err != nil {
		return "", err
	}
	return b.String(), nil
}

func encodeJSON(b *strings.Builder, v any, opts jsonOptions, level int) error {
	if level > maxDepth {
		return fmt.Errorf("tojson: value nested deeper than %d levels", maxDepth)
	}
	switch x := v.(type) {
	case nil, noneValue:
		b.WriteString("null")
		return nil
	case *exec.Value:
		if x == nil || x.IsNil() {
			b.WriteString("null")
			return nil
		}
		return encodeJSON(b, x.Interface(), opts, level)
	case exec.Dict:
		return encodeJSON(b, &x, opts, level)
	case *exec.Dict:
		if x == nil {
			b.WriteString("null")
			return nil
		}
		keys := make([]string, len(x.Pairs))
		vals := make([]any, len(x.Pairs))
		for i, p := range x.Pairs {
			k, err := jsonKey(p.Key)
			if err != nil {
				return err
			}
			keys[i], vals[i] = k, p.Value
		}
		return encodeObject(b, keys, vals, opts, level)
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		vals := make([]any, len(keys))
		for i, k := range keys {
			vals[i] = x[k]
		}
		return encodeObject(b, keys, vals, opts, level)
	case string:
		WriteJSONString(b, x, opts.ensureASCII)
		return nil
	case bool:
		if x {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
		return nil
	case int:
		b.WriteString(strconv.Itoa(x))
		return nil
	case float64:
		b.WriteString(pyFloatJSON(x))
		return nil
	case error:
		return x
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		vals := make([]any, rv.Len())
		for i := range vals {
			vals[i] = rv.Index(i).Interface()
		}
		return encodeArray(b, vals, opts, level)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		b.WriteString(strconv.FormatInt(rv.Int(), 10))
		return nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		b.WriteString(strconv.FormatUint(rv.Uint(), 10))
		return nil
	case reflect.Float32:
		b.WriteString(pyFloatJSON(rv.Float()))
		return nil
	case reflect.Map:
		// namespace() objects and other engine maps: keys sorted, as
		// their order is not recorded.
		keys := make([]string, 0, rv.Len())
		vals := map[string]any{}
		for _, k := range rv.MapKeys() {
			ks, err := jsonKey(exec.ToValue(k))
			if err != nil {
				return err
			}
			keys = append(keys, ks)
			vals[ks] = rv.MapIndex(k).Interface()
		}
		sort.Strings(keys)
		ordered := make([]any, len(keys))
		for i, k := range keys {
			ordered[i] = vals[k]
		}
		return encodeObject(b, keys, ordered, opts, level)
	case reflect.Func:
		return fmt.Errorf("tojson: object of type function is not JSON serializable")
	}
	return fmt.Errorf("tojson: object of type %T is not JSON serializable", v)
}

func jsonKey(k *exec.Value) (string, error) {
	switch {
	case k.IsString():
		return k.String(), nil
	case k.IsBool():
		if k.Bool() {
			return "true", nil
		}
		return "false", nil
	case k.IsInteger():
		return strconv.Itoa(k.Integer()), nil
	case k.IsFloat():
		return pyFloatJSON(k.Float()), nil
	case k.IsNil():
		return "null", nil
	}
	return "", fmt.Errorf("tojson: keys must be str, int, float, bool or None, not %T", k.Interface())
}

func (o jsonOptions) newline(b *strings.Builder, level int) {
	if o.indent == nil {
		return
	}
	b.WriteByte('\n')
	for range level {
		b.WriteString(*o.indent)
	}
}

func encodeObject(b *strings.Builder, keys []string, vals []any, opts jsonOptions, level int) error {
	if len(keys) == 0 {
		b.WriteString("{}")
		return nil
	}
	idx := make([]int, len(keys))
	for i := range idx {
		idx[i] = i
	}
	if opts.sortKeys {
		sort.SliceStable(idx, func(i, j int) bool { return keys[idx[i]] < keys[idx[j]] })
	}
	b.WriteByte('{')
	for n, i := range idx {
		if n > 0 {
			b.WriteString(opts.itemSep)
		}
		opts.newline(b, level+1)
		WriteJSONString(b, keys[i], opts.ensureASCII)
		b.WriteString(opts.keySep)
		if err := encodeJSON(b, vals[i], opts, level+1); err != nil {
			return err
		}
	}
	opts.newline(b, level)
	b.WriteByte('}')
	return nil
}

func encodeArray(b *strings.Builder, vals []any, opts jsonOptions, level int) error {
	if len(vals) == 0 {
		b.WriteString("[]")
		return nil
	}
	b.WriteByte('[')
	for i, v := range vals {
		if i > 0 {
			b.WriteString(opts.itemSep)
		}
		opts.newline(b, level+1)
		if err := encodeJSON(b, v, opts, level+1); err != nil {
			return err
		}
	}
	opts.newline(b, level)
	b.WriteByte(']')
	return nil
}

// WriteJSONString is Python's json string encoder (ensure_ascii as given).
// Invalid UTF-8 bytes, which a Python str cannot hold, are written as
// U+FFFD.
func WriteJSONString(b *strings.Builder, s string, ensureASCII bool) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20:
				fmt.Fprintf(b, `\u%04x`, r)
			case ensureASCII && r > 0x7e:
				if r >= 0x10000 {
					r -= 0x10000
					fmt.Fprintf(b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
				} else {
					fmt.Fprintf(b, `\u%04x`, r)
				}
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

// pyFloatJSON is float.__repr__ as json.dumps writes it, with NaN and the
// infinities spelled as Python's json module spells them.
func pyFloatJSON(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return PyFloatRepr(f)
}

// PyFloatRepr is Python's repr(float): the shortest digits that round-trip,
// in positional notation when the decimal exponent is in [-4, 16), else in
// scientific notation with at least two exponent digits.
func PyFloatRepr(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // e.g. -1.2345e+06
	mant, expStr, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expStr)
	neg := strings.HasPrefix(mant, "-")
	mant = strings.TrimPrefix(mant, "-")
	digits := strings.Replace(mant, ".", "", 1)
	sign := ""
	if neg {
		sign = "-"
	}
	if exp < -4 || exp >= 16 {
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		es := "+"
		if exp < 0 {
			es = "-"
			exp = -exp
		}
		return fmt.Sprintf("%s%se%s%02d", sign, m, es, exp)
	}
	if exp < 0 {
		return sign + "0." + strings.Repeat("0", -exp-1) + digits
	}
	if len(digits) <= exp+1 {
		return sign + digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
	}
	return sign + digits[:exp+1] + "." + digits[exp+1:]
}
