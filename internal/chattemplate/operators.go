package chattemplate

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// inOperand checks the right operand of `in` as Python does: a string, a
// list or a mapping, or undefined (empty in Jinja2).
func inOperand(_ *exec.Evaluator, args *exec.VarArgs) *exec.Value {
	if len(args.Args) != 1 {
		return exec.AsValue(fmt.Errorf("in: want one operand"))
	}
	v := args.Args[0]
	switch {
	case v.IsNil():
		return exec.AsValue([]any{})
	case isNone(v):
		return exec.AsValue(fmt.Errorf("argument of type 'NoneType' is not iterable"))
	case v.IsString() || v.IsList() || v.IsDict():
		return v
	}
	return exec.AsValue(fmt.Errorf("argument of type %T is not iterable", v.Interface()))
}

// itemFunction is Jinja2's subscript obj[key]: a list or string index
// counting from the end when negative (a string by character), a mapping
// key, else gonja's item or attribute lookup; undefined when missing.
func itemFunction(_ *exec.Evaluator, args *exec.VarArgs) *exec.Value {
	if len(args.Args) != 2 {
		return exec.AsValue(fmt.Errorf("subscript: want an object and a key"))
	}
	obj, key := args.Args[0], args.Args[1]
	switch {
	case obj.IsNil() || isNone(obj):
		return exec.AsValue(nil)
	case obj.IsString():
		if !key.IsInteger() || key.IsBool() {
			return exec.AsValue(nil)
		}
		runes := []rune(obj.String())
		i := key.Integer()
		if i < 0 {
			i += len(runes)
		}
		if i < 0 || i >= len(runes) {
			return exec.AsValue(nil)
		}
		return exec.AsValue(string(runes[i]))
	case obj.IsList():
		if !key.IsInteger() || key.IsBool() {
			return exec.AsValue(nil)
		}
		i := key.Integer()
		if i < 0 {
			i += obj.Len()
		}
		if i < 0 || i >= obj.Len() {
			return exec.AsValue(nil)
		}
		return obj.Index(i)
	}
	if d, ok := dictOf(obj); ok {
		for _, p := range d.Pairs {
			if p.Key.EqualValueTo(key) {
				return p.Value
			}
		}
		return exec.AsValue(nil)
	}
	var k any = key.Interface()
	if key.IsString() {
		k = key.String()
	} else if key.IsInteger() {
		k = key.Integer()
	}
	if v, ok := obj.GetItem(k); ok {
		return v
	}
	if key.IsString() {
		if v, ok := obj.GetAttribute(key.String()); ok {
			return v
		}
	}
	return exec.AsValue(nil)
}

// modFunction is Python's %: printf-style formatting when the left
// operand is a string, else modulo with the sign of the divisor.
func modFunction(e *exec.Evaluator, args *exec.VarArgs) *exec.Value {
	if len(args.Args) != 2 {
		return exec.AsValue(fmt.Errorf("%%: want two operands"))
	}
	l, r := args.Args[0], args.Args[1]
	switch {
	case l.IsString():
		s, err := pyFormat(l.String(), r)
		if err != nil {
			return fail(e, err)
		}
		return exec.AsValue(s)
	case l.IsInteger() && r.IsInteger():
		a, b := l.Integer(), r.Integer()
		if b == 0 {
			return exec.AsValue(fmt.Errorf("integer modulo by zero"))
		}
		m := a % b
		if m != 0 && (m < 0) != (b < 0) {
			m += b
		}
		return exec.AsValue(m)
	case l.IsNumber() && r.IsNumber():
		a, b := l.Float(), r.Float()
		if b == 0 {
			return exec.AsValue(fmt.Errorf("float modulo"))
		}
		m := math.Mod(a, b)
		if m != 0 && (m < 0) != (b < 0) {
			m += b
		}
		return exec.AsValue(m)
	}
	return exec.AsValue(fmt.Errorf("unsupported operand types for %%: %T and %T", l.Interface(), r.Interface()))
}

// powFunction is Python's **: an int for ints with a non-negative
// exponent, else a float.
func powFunction(e *exec.Evaluator, args *exec.VarArgs) *exec.Value {
	if len(args.Args) != 2 {
		return exec.AsValue(fmt.Errorf("**: want two operands"))
	}
	l, r := args.Args[0], args.Args[1]
	if !l.IsNumber() || !r.IsNumber() {
		return exec.AsValue(fmt.Errorf("unsupported operand types for **: %T and %T", l.Interface(), r.Interface()))
	}
	if l.IsInteger() && r.IsInteger() && r.Integer() >= 0 {
		base, exp, out := l.Integer(), r.Integer(), 1
		for ; exp > 0; exp-- {
			next := out * base
			if base != 0 && next/base != out {
				return fail(e, fmt.Errorf("integer power overflows 64 bits: %w", ErrUnsupported))
			}
			out = next
		}
		return exec.AsValue(out)
	}
	return exec.AsValue(math.Pow(l.Float(), r.Float()))
}

// pyFormat is Python's printf-style "fmt % args": args a tuple (list) for
// several conversions, a mapping for %(name)s, else one value.
func pyFormat(format string, args *exec.Value) (string, error) {
	var list []*exec.Value
	mapping, isMapping := dictOf(args)
	switch {
	case args.IsList() && !isNone(args):
		for i := range args.Len() {
			list = append(list, args.Index(i))
		}
	case isMapping:
	default:
		list = []*exec.Value{args}
	}
	var b strings.Builder
	next := 0
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(format) {
			return "", fmt.Errorf("incomplete format")
		}
		var arg *exec.Value
		if format[i] == '(' {
			end := strings.IndexByte(format[i:], ')')
			if end < 0 || !isMapping {
				return "", fmt.Errorf("format requires a mapping")
			}
			key := format[i+1 : i+end]
			arg = exec.AsValue(nil)
			for _, p := range mapping.Pairs {
				if p.Key.IsString() && p.Key.String() == key {
					arg = p.Value
				}
			}
			if arg.IsNil() {
				return "", fmt.Errorf("format key %q not found", key)
			}
			i += end + 1
		}
		spec := "%"
		for i < len(format) && strings.IndexByte("-+ 0#", format[i]) >= 0 {
			spec += string(format[i])
			i++
		}
		for i < len(format) && (format[i] >= '0' && format[i] <= '9' || format[i] == '.') {
			spec += string(format[i])
			i++
		}
		if i >= len(format) {
			return "", fmt.Errorf("incomplete format")
		}
		conv := format[i]
		if conv == '%' {
			b.WriteByte('%')
			continue
		}
		if arg == nil {
			if next >= len(list) {
				return "", fmt.Errorf("not enough arguments for format string")
			}
			arg = list[next]
			next++
		}
		switch conv {
		case 's', 'r', 'a':
			fmt.Fprintf(&b, spec+"s", pyStr(arg))
		case 'd', 'i', 'u':
			if !arg.IsNumber() && !arg.IsBool() {
				return "", fmt.Errorf("%%%c format: a real number is required", conv)
			}
			fmt.Fprintf(&b, spec+"d", int(arg.Float()))
		case 'f', 'F', 'e', 'E', 'g', 'G':
			if !arg.IsNumber() {
				return "", fmt.Errorf("%%%c format: a real number is required", conv)
			}
			if !strings.Contains(spec, ".") {
				spec += ".6"
			}
			fmt.Fprintf(&b, spec+string(conv), arg.Float())
		case 'x', 'X', 'o':
			if !arg.IsInteger() {
				return "", fmt.Errorf("%%%c format: an integer is required", conv)
			}
			fmt.Fprintf(&b, spec+string(conv), arg.Integer())
		case 'c':
			if arg.IsInteger() {
				b.WriteRune(rune(arg.Integer()))
			} else {
				b.WriteString(arg.String())
			}
		default:
			return "", fmt.Errorf("unsupported format character %q: %w", conv, ErrUnsupported)
		}
	}
	if !isMapping && next < len(list) {
		return "", fmt.Errorf("not all arguments converted during string formatting")
	}
	return b.String(), nil
}

// fail returns err as the error value gonja expects, and records it for
// Render when it is ErrUnsupported, which gonja's wrapping would flatten.
func fail(e *exec.Evaluator, err error) *exec.Value {
	if errors.Is(err, ErrUnsupported) {
		if st, ok := stateOf(e.Environment.Context); ok && st.failure == nil {
			st.failure = err
		}
	}
	return exec.AsValue(err)
}
