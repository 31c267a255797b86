package chattemplate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// PyDumps returns the JSON value raw as Python writes it with
// json.dumps(json.loads(raw), ensure_ascii=False): as transformers' tojson
// filter writes a tool's JSON into a chat template, and as vLLM's tool
// parsers write a call's arguments. That is ", " and ": " between items,
// keys in the order given, non-ASCII characters as they are, integers as
// written and other numbers as Python's repr of a float. A key repeated in one object is
// an error (Python would keep the first key's place and the last value).
func PyDumps(raw []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var b strings.Builder
	if err := writePyValue(&b, dec); err != nil {
		return "", err
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", errors.New("JSON: data after the value")
	}
	return b.String(), nil
}

func writePyValue(b *strings.Builder, dec *json.Decoder) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("JSON: %w", err)
	}
	switch v := tok.(type) {
	case json.Delim:
		switch v {
		case '{':
			b.WriteByte('{')
			seen := map[string]bool{}
			for i := 0; dec.More(); i++ {
				k, err := dec.Token()
				if err != nil {
					return fmt.Errorf("JSON: %w", err)
				}
				key := k.(string) // dec.Token yields only strings as keys
				if seen[key] {
					return fmt.Errorf("JSON: key %q repeated in an object", key)
				}
				seen[key] = true
				if i > 0 {
					b.WriteString(", ")
				}
				WriteJSONString(b, key, false)
				b.WriteString(": ")
				if err := writePyValue(b, dec); err != nil {
					return err
				}
			}
			b.WriteByte('}')
		case '[':
			b.WriteByte('[')
			for i := 0; dec.More(); i++ {
				if i > 0 {
					b.WriteString(", ")
				}
				if err := writePyValue(b, dec); err != nil {
					return err
				}
			}
			b.WriteByte(']')
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return fmt.Errorf("JSON: %w", err)
		}
	case string:
		WriteJSONString(b, v, false)
	case json.Number:
		b.WriteString(pyNumber(string(v)))
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case nil:
		b.WriteString("null")
	}
	return nil
}

// pyNumber writes a JSON number as Python reads and writes it: an int when
// it has no fraction or exponent, else a float in repr's shortest form (out
// of range: the infinity Python's float() reads it as).
func pyNumber(s string) string {
	if !strings.ContainsAny(s, ".eE") {
		if s == "-0" {
			return "0"
		}
		return s
	}
	f, _ := strconv.ParseFloat(s, 64)
	return pyFloatJSON(f)
}
