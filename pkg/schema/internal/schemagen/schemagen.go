// Package schemagen writes pkg/schema's JSON Schemas (sample.schema.json,
// result.schema.json) from the Go types, with github.com/invopop/jsonschema.
//
// The reflector gives the properties, their JSON types and which are
// required; one extension function per Go type (what a JSONSchemaExtend
// method would do) adds the bounds, patterns and enums from pkg/schema's
// named constants, and the descriptions and defaults a trainer reads. The
// extensions live here rather than as methods on the wire types so that
// importing pkg/schema does not import the generator and its dependencies.
package schemagen

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"unicode"

	"github.com/invopop/jsonschema"

	"github.com/actloop/actloop/pkg/schema"
)

// Files maps each generated file's name (in pkg/schema) to its generator.
var Files = map[string]func() ([]byte, error){
	"sample.schema.json": Sample,
	"result.schema.json": Result,
}

// Sample is sample.schema.json. A sample is decoded strictly, so every
// object is closed (additionalProperties false) but metadata; a field is
// required when DecodeSample refuses its absence (a `jsonschema:"required"`
// tag), and an optional one may be null, which encoding/json reads as
// absent.
func Sample() ([]byte, error) {
	r := &jsonschema.Reflector{
		Anonymous:                  true,
		DoNotReference:             true,
		RequiredFromJSONSchemaTags: true,
	}
	s := r.Reflect(schema.Sample{})
	if err := apply(s, reflect.TypeFor[schema.Sample](), sampleExtensions); err != nil {
		return nil, err
	}
	nullOptional(s)
	return encode(s)
}

// Result is result.schema.json. Results are read leniently (a field this
// release does not know is ignored), so no object is closed; every field
// without omitempty is always written, so it is required.
func Result() ([]byte, error) {
	r := &jsonschema.Reflector{
		Anonymous:                 true,
		DoNotReference:            true,
		AllowAdditionalProperties: true,
	}
	s := r.Reflect(schema.Result{})
	if err := apply(s, reflect.TypeFor[schema.Result](), resultExtensions); err != nil {
		return nil, err
	}
	return encode(s)
}

// extension adds to the schema reflected from one Go type what its
// fields' types and tags cannot say.
type extension func(s *jsonschema.Schema) error

// apply walks the schema reflected from t alongside t and calls the
// extension of every Go type it meets, innermost first (a field's type's
// extension runs before its struct's, which may then say more about the
// field).
func apply(s *jsonschema.Schema, t reflect.Type, ext map[reflect.Type]extension) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		if s.Properties != nil {
			for _, f := range reflect.VisibleFields(t) {
				if f.Anonymous || !f.IsExported() {
					continue
				}
				p, ok := s.Properties.Get(jsonName(f))
				if !ok {
					continue
				}
				if err := apply(p, f.Type, ext); err != nil {
					return fmt.Errorf("%s.%s: %w", t.Name(), f.Name, err)
				}
			}
		}
	case reflect.Slice:
		if s.Items != nil {
			if err := apply(s.Items, t.Elem(), ext); err != nil {
				return err
			}
		}
	}
	if e := ext[t]; e != nil {
		return e(s)
	}
	return nil
}

func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if name == "" {
		return f.Name
	}
	return name
}

// prop is s's property name; it fails when the type has no such field, so
// an extension cannot describe a field that is gone.
func prop(s *jsonschema.Schema, name string) (*jsonschema.Schema, error) {
	if s.Properties != nil {
		if p, ok := s.Properties.Get(name); ok {
			return p, nil
		}
	}
	return nil, fmt.Errorf("no property %q", name)
}

// props calls set on each named property.
func props(s *jsonschema.Schema, set map[string]func(p *jsonschema.Schema)) error {
	for name, f := range set {
		p, err := prop(s, name)
		if err != nil {
			return err
		}
		f(p)
	}
	return nil
}

// nullOptional lets every optional property of s and its objects be null
// (encoding/json reads null as absent, and absent is its default), but an
// enum's: there null is not listed, as "" is not (see the agreement test).
func nullOptional(s *jsonschema.Schema) {
	if s.Properties == nil {
		return
	}
	for name, c := range s.Properties.FromOldest() {
		nullOptional(c)
		if c.Items != nil {
			nullOptional(c.Items)
		}
		if isRequired(s, name) || c.Enum != nil {
			continue
		}
		nullable(c)
	}
}

func isRequired(s *jsonschema.Schema, name string) bool {
	return slices.Contains(s.Required, name)
}

// nullable adds null to the schema's type.
func nullable(s *jsonschema.Schema) {
	if s.Type == "" {
		return
	}
	if s.Extras == nil {
		s.Extras = map[string]any{}
	}
	s.Extras["type"] = []string{s.Type, "null"}
	s.Type = ""
}

// encode writes s indented, with <, > and & as themselves (encoding/json
// escapes them for HTML, which a schema is not read as).
func encode(s *jsonschema.Schema) ([]byte, error) {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, err
	}
	out := escapeSpaces(htmlUnescape.Replace(string(b))) + "\n"
	var before, after any
	if json.Unmarshal(b, &before) != nil || json.Unmarshal([]byte(out), &after) != nil || !reflect.DeepEqual(before, after) {
		return nil, fmt.Errorf("unescaping <, > and & changed the schema")
	}
	return []byte(out), nil
}

// escapeSpaces writes the non-ASCII white space in s's strings (a pattern's)
// as JSON escapes, so that a reader sees them.
func escapeSpaces(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r > unicode.MaxASCII && unicode.IsSpace(r) {
			fmt.Fprintf(&b, `\u%04x`, r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

var htmlUnescape = strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&")

func num[T int | int64 | float64](v T) json.Number { return json.Number(fmt.Sprint(v)) }

func size(n int) *uint64 {
	u := uint64(n)
	return &u
}

func anys[T any](vs ...T) []any {
	out := make([]any, len(vs))
	for i, v := range vs {
		out[i] = v
	}
	return out
}
