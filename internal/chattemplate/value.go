package chattemplate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"sort"
	"strconv"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// noneValue is Python's None where the engine can tell it apart from an
// undefined value: a JSON null in the input, tools and documents when not
// given (transformers passes None), and the template's `none`. gonja has a
// single nil for both; Jinja2 prints None as "None" and an undefined value
// as "", and `is defined` is true only for None. It is an empty slice so
// that it is false in a condition and an error in `+`.
type noneValue []struct{}

// String is how Jinja2 prints None.
func (noneValue) String() string { return "None" }

// pyNone is the None value.
var pyNone = noneValue{}

func isNone(v *exec.Value) bool {
	_, ok := v.Interface().(noneValue)
	return ok
}

// maxDepth bounds the nesting of input values, as Python's json module bounds
// its recursion, so a hostile input cannot exhaust the stack.
const maxDepth = 200

// toTemplateValue converts one input value into what the template engine
// sees. JSON objects become ordered dictionaries so that tojson, items() and
// loops keep the caller's key order, as Python dicts do.
//
// Accepted: nil, bool, every Go integer and float type, string,
// json.Number, json.RawMessage (decoded keeping key order), []any,
// []map[string]any, map[string]any (a Go map has no order, so its keys are
// sorted) and *exec.Dict.
func toTemplateValue(v any) (any, error) {
	return convert(v, 0)
}

func convert(v any, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("value nested deeper than %d levels", maxDepth)
	}
	switch x := v.(type) {
	case nil, noneValue:
		return pyNone, nil
	case bool, string, float64:
		return x, nil
	case int:
		return x, nil
	case int8, int16, int32, int64, uint8, uint16, uint32:
		return int(reflect.ValueOf(x).Convert(reflect.TypeFor[int64]()).Int()), nil
	case uint, uint64:
		u := reflect.ValueOf(x).Uint()
		if u > math.MaxInt64 {
			return float64(u), nil
		}
		return int(u), nil
	case float32:
		return float64(x), nil
	case json.Number:
		return numberValue(string(x))
	case json.RawMessage:
		return decodeOrdered(x)
	case []byte:
		return string(x), nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			c, err := convert(e, depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	case []map[string]any:
		out := make([]any, len(x))
		for i, e := range x {
			c, err := convert(e, depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	case []string:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = e
		}
		return out, nil
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := &exec.Dict{Pairs: make([]*exec.Pair, 0, len(keys))}
		for _, k := range keys {
			c, err := convert(x[k], depth+1)
			if err != nil {
				return nil, err
			}
			d.Pairs = append(d.Pairs, &exec.Pair{Key: exec.AsValue(k), Value: exec.AsValue(c)})
		}
		return d, nil
	case *exec.Dict:
		return x, nil
	default:
		return nil, fmt.Errorf("unsupported value of type %T", v)
	}
}

// numberValue keeps a JSON number's Python type: an integer literal is an
// int, anything with a fraction or exponent a float, as json.loads does.
func numberValue(s string) (any, error) {
	if !bytes.ContainsAny([]byte(s), ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return int(i), nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return nil, fmt.Errorf("number %q: %w", s, err)
	}
	return f, nil
}

// decodeOrdered decodes one JSON value, objects as ordered dictionaries.
func decodeOrdered(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data after JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("JSON nested deeper than %d levels", maxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			d := &exec.Dict{Pairs: []*exec.Pair{}}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, ok := kt.(string)
				if !ok {
					return nil, fmt.Errorf("object key %v is not a string", kt)
				}
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				// A repeated key keeps its first position and last value,
				// as json.loads into a dict does.
				if i := slices.IndexFunc(d.Pairs, func(p *exec.Pair) bool { return p.Key.String() == k }); i >= 0 {
					d.Pairs[i].Value = exec.AsValue(v)
					continue
				}
				d.Pairs = append(d.Pairs, &exec.Pair{Key: exec.AsValue(k), Value: exec.AsValue(v)})
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return d, nil
		case '[':
			list := []any{}
			for dec.More() {
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return list, nil
		default:
			return nil, fmt.Errorf("unexpected JSON delimiter %q", t)
		}
	case json.Number:
		return numberValue(string(t))
	case nil:
		return pyNone, nil
	default:
		return t, nil // bool, string
	}
}
