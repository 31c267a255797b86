package schema

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxMetadataDepth bounds the nesting of a sample's metadata: arrays and
// objects inside one another (`{}` and `[]` are 1 deep, `{"a":[1]}` 2).
// encoding/json reads 10,000 levels, but a result carries the metadata
// back inside its poll answer (a few levels more), and CPython's json,
// which recurses once per level, raises RecursionError well before its
// default recursion limit of 1,000 is reached by a message that deep; a
// client that cannot decode a batch never acknowledges it and is handed it
// again forever. Trainers' metadata runs a handful of levels deep.
const MaxMetadataDepth = 128

// jsonDepth is how deeply b's arrays and objects nest; it stops counting
// past limit. b has decoded already, so it is well-formed JSON.
func jsonDepth(b []byte, limit int) int {
	depth, deepest := 0, 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			sc := scanner{b: b, i: i}
			sc.str()
			i = sc.i - 1
		case '{', '[':
			depth++
			if depth > deepest {
				deepest = depth
				if deepest > limit {
					return deepest
				}
			}
		case '}', ']':
			depth--
		}
	}
	return deepest
}

// checkUTF8 refuses a message whose JSON text holds invalid UTF-8, naming
// the field by its JSON path and the byte: encoding/json would replace each
// bad byte with U+FFFD without a word, so a task or command would run other
// than as sent.
func checkUTF8(b []byte) error {
	if utf8.Valid(b) {
		return nil
	}
	at := invalidAt(b)
	field := pathAt(b, at)
	if field == "" {
		field = "(message)"
	}
	return fieldErr(field, "invalid UTF-8 at byte %d of the message (encode text as UTF-8)", at)
}

// invalidAt is the offset of b's first byte that is not valid UTF-8.
func invalidAt(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// pathAt is the JSON path ("env.setup[2]", "metadata.k") of the string
// (a value, or a key) that holds byte off of the JSON text b, "" when off
// is outside every string. One pass, without recursion: b may be a deep
// or malformed message.
func pathAt(b []byte, off int) string {
	type frame struct {
		array bool
		n     int    // an array's element index
		key   string // an object's current key
	}
	const maxFrames = 32 // the path names no deeper level: "…"
	var stack []frame
	depth := 0
	wantKey := false
	path := func() string {
		var sb strings.Builder
		for i, f := range stack {
			switch {
			case f.array:
				sb.WriteString("[" + strconv.Itoa(f.n) + "]")
			case i > 0:
				sb.WriteString("." + f.key)
			default:
				sb.WriteString(f.key)
			}
		}
		if depth > len(stack) {
			sb.WriteString("…")
		}
		return sb.String()
	}
	for i := 0; i < len(b) && i <= off; i++ {
		var top *frame // the innermost array or object, if the stack holds it
		if depth > 0 && depth == len(stack) {
			top = &stack[depth-1]
		}
		switch b[i] {
		case '"':
			sc := scanner{b: b, i: i}
			raw := sc.str()
			if wantKey && top != nil && !top.array {
				key := string(raw)
				if bytes.IndexByte(raw, '\\') >= 0 && json.Unmarshal(b[i:sc.i], &key) != nil {
					key = string(raw)
				}
				top.key = strings.ToValidUTF8(clip(key), "\uFFFD")
			}
			wantKey = false
			if off < sc.i {
				return path()
			}
			i = sc.i - 1
		case '{', '[':
			depth++
			if len(stack) < maxFrames {
				stack = append(stack, frame{array: b[i] == '['})
			}
			wantKey = b[i] == '{'
		case '}', ']':
			if top != nil {
				stack = stack[:depth-1]
			}
			depth = max(depth-1, 0)
		case ',':
			if top != nil && top.array {
				top.n++
			} else {
				wantKey = true // in an array past maxFrames too: no key is kept there
			}
		}
	}
	return ""
}

// metadataDepth checks a free-form JSON field's nesting.
func metadataDepth(p *problems, field string, raw []byte) {
	if len(raw) == 0 {
		return
	}
	if d := jsonDepth(raw, MaxMetadataDepth); d > MaxMetadataDepth {
		p.add(field, "nested more than %d levels deep (schema.MaxMetadataDepth; every client's JSON decoder must read it back)", MaxMetadataDepth)
	}
}
