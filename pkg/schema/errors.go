package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
)

// Version is the schema version this package writes and reads.
const Version = 1

// Size limits. A sample carries a task text and maybe a script; a result
// carries a whole trajectory.
const (
	MaxSampleBytes  = 512 << 10
	MaxMessageBytes = 64 << 20
)

// ErrInvalid is wrapped by every decoding and validation error.
var ErrInvalid = errors.New("invalid message")

// FieldError names the field that made a message invalid.
type FieldError struct {
	Field  string // JSON path, e.g. "env.step_timeout_ms"
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Unwrap makes every FieldError match ErrInvalid.
func (e *FieldError) Unwrap() error { return ErrInvalid }

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// problems collects validation failures so one error reports them all.
type problems []error

func (p *problems) add(field, format string, args ...any) {
	*p = append(*p, fieldErr(field, format, args...))
}

func (p problems) err() error { return errors.Join(p...) }

// decode unmarshals b into v after checking its size and version, and turns
// encoding/json's errors into FieldErrors. It reads b once: the version is
// checked in v's own V field (set to a sentinel first), and only when b does
// not decode is it read again for the version, so that a message of another
// version is reported as such rather than by a field it types differently.
func decode(b []byte, v any) error {
	if len(b) > MaxMessageBytes {
		return fieldErr("(message)", "%d bytes exceeds the limit of %d", len(b), MaxMessageBytes)
	}
	fv := reflect.ValueOf(v).Elem().FieldByName("V")
	if !fv.IsValid() || fv.Kind() != reflect.Int || !fv.CanSet() {
		if err := checkVersion(b); err != nil {
			return err
		}
		if err := json.Unmarshal(b, v); err != nil {
			return jsonErr(err)
		}
		return nil
	}
	const absent = math.MinInt64
	fv.SetInt(absent)
	if err := json.Unmarshal(b, v); err != nil {
		if verr := checkVersion(b); verr != nil {
			return verr
		}
		return jsonErr(err)
	}
	switch n := fv.Int(); {
	case n == absent:
		return fieldErr("v", "missing (schema version; this build reads %d)", Version)
	case n != Version:
		return fieldErr("v", "unsupported schema version %d (this build reads %d)", n, Version)
	}
	return nil
}

// checkVersion reads b's "v" alone.
func checkVersion(b []byte) error {
	var head struct {
		V *int `json:"v"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return jsonErr(err)
	}
	switch {
	case head.V == nil:
		return fieldErr("v", "missing (schema version; this build reads %d)", Version)
	case *head.V != Version:
		return fieldErr("v", "unsupported schema version %d (this build reads %d)", *head.V, Version)
	}
	return nil
}

func jsonErr(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			field = "(message)"
		}
		if num, ok := strings.CutPrefix(te.Value, "number "); ok && isInt(te.Type.Kind()) {
			if strings.ContainsAny(num, ".eE") {
				return fieldErr(field, "must be an integer (no fraction or exponent), got %s", clip(num))
			}
			return fieldErr(field, "out of range (%s), got %s", te.Type, clip(num))
		}
		return fieldErr(field, "has JSON type %s, want %s", te.Value, goTypeName(te.Type.String()))
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fieldErr("(message)", "malformed JSON at byte %d: %v", se.Offset, se)
	}
	return fieldErr("(message)", "%v", err)
}

func isInt(k reflect.Kind) bool {
	return k >= reflect.Int && k <= reflect.Uint64
}

func goTypeName(t string) string {
	switch {
	case strings.HasPrefix(t, "[]"):
		return "array"
	case strings.HasPrefix(t, "map["), strings.Contains(t, "."):
		return "object"
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"), strings.HasPrefix(t, "float"):
		return "number"
	default:
		return t
	}
}
