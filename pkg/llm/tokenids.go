package llm

// TokenIDs encodes and decodes JSON arrays of token ids without reflection.
// A context of thousands of tokens crosses HTTP as input_ids on every
// generation step; encoding/json spends most of a step's CPU on it, element
// by element. The simulator uses the same codec.

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
)

// TokenIDs is a list of token ids that encodes as a JSON array of integers
// (nil as null) and decodes strictly: every element must be an integer in
// int32's range; null, fractions, exponents and non-numbers are errors
// naming the element.
type TokenIDs []int32

// TokenIDError is a bad element of a JSON id array.
type TokenIDError struct {
	Index  int
	Reason string
}

func (e *TokenIDError) Error() string { return fmt.Sprintf("[%d]: %s", e.Index, e.Reason) }

// MarshalJSON implements json.Marshaler.
func (ids TokenIDs) MarshalJSON() ([]byte, error) {
	if ids == nil {
		return []byte("null"), nil
	}
	return AppendTokenIDs(make([]byte, 0, 2+len(ids)*7), ids), nil
}

// Append appends ids as a JSON array to dst.
func AppendTokenIDs(dst []byte, ids []int32) []byte {
	dst = append(dst, '[')
	for i, id := range ids {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(id), 10)
	}
	return append(dst, ']')
}

// UnmarshalJSON implements json.Unmarshaler.
func (ids *TokenIDs) UnmarshalJSON(b []byte) error {
	v, err := ParseTokenIDs(b)
	if err != nil {
		return err
	}
	*ids = v
	return nil
}

// Parse decodes a JSON array of integers (null gives nil; [] an empty,
// non-nil slice). Surrounding white space is allowed, nothing else.
func ParseTokenIDs(b []byte) ([]int32, error) {
	i := idsSkipSpace(b, 0)
	if idsLit(b, i, "null") {
		if idsSkipSpace(b, i+4) != len(b) {
			return nil, idsMalformed(b, i+4)
		}
		return nil, nil
	}
	if i >= len(b) || b[i] != '[' {
		return nil, &json.UnmarshalTypeError{Value: idsKind(b, i), Type: tokenIDsType}
	}
	i = idsSkipSpace(b, i+1)
	ids := make([]int32, 0, len(b)/5+1)
	if i < len(b) && b[i] == ']' {
		if idsSkipSpace(b, i+1) != len(b) {
			return nil, idsMalformed(b, i+1)
		}
		return ids, nil
	}
	for {
		i = idsSkipSpace(b, i)
		if i >= len(b) {
			return nil, idsMalformed(b, i)
		}
		n := len(ids)
		start := i
		neg := b[i] == '-'
		if neg {
			i++
		}
		d := i
		var v int64
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			if v <= math.MaxInt32+1 {
				v = v*10 + int64(b[i]-'0')
			}
			i++
		}
		switch {
		case i == d:
			if idsLit(b, start, "null") {
				return nil, &TokenIDError{n, "null token id"}
			}
			if start < len(b) && (b[start] == '"' || b[start] == '{' || b[start] == '[' || b[start] == 't' || b[start] == 'f') {
				return nil, &TokenIDError{n, "not an integer token id (" + idsKind(b, start) + ")"}
			}
			return nil, idsMalformed(b, start)
		case b[d] == '0' && i-d > 1:
			return nil, idsMalformed(b, d+1)
		case i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E'):
			return nil, &TokenIDError{n, "not an integer token id (" + idsNumber(b, start) + ")"}
		}
		if neg {
			v = -v
		}
		if v < math.MinInt32 || v > math.MaxInt32 {
			return nil, &TokenIDError{n, "token id " + string(b[start:i]) + " out of int32 range"}
		}
		ids = append(ids, int32(v))
		i = idsSkipSpace(b, i)
		if i >= len(b) {
			return nil, idsMalformed(b, i)
		}
		switch b[i] {
		case ',':
			i++
		case ']':
			if idsSkipSpace(b, i+1) != len(b) {
				return nil, idsMalformed(b, i+1)
			}
			return ids, nil
		default:
			return nil, idsMalformed(b, i)
		}
	}
}

var tokenIDsType = reflect.TypeFor[TokenIDs]()

func idsSkipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

func idsLit(b []byte, i int, s string) bool { return i+len(s) <= len(b) && string(b[i:i+len(s)]) == s }

// number returns the number literal starting at i, for an error message.
func idsNumber(b []byte, i int) string {
	j := i
	for j < len(b) && j-i < 32 && (b[j] == '-' || b[j] == '+' || b[j] == '.' || b[j] == 'e' || b[j] == 'E' || (b[j] >= '0' && b[j] <= '9')) {
		j++
	}
	return "number " + string(b[i:j])
}

// kind names the JSON value starting at i, as json.UnmarshalTypeError does.
func idsKind(b []byte, i int) string {
	if i >= len(b) {
		return "nothing"
	}
	switch b[i] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	}
	return "number"
}

func idsMalformed(b []byte, i int) error {
	if i >= len(b) {
		return fmt.Errorf("malformed id array: unexpected end at offset %d", i)
	}
	return fmt.Errorf("malformed id array: unexpected %q at offset %d", b[i], i)
}
