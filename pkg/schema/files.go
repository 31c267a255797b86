package schema

import _ "embed"

// The JSON Schemas are generated from the Go types; a test fails while
// they differ from a fresh generation.
//go:generate go run ./internal/genschema

// SampleJSONSchema is sample.schema.json: the JSON Schema of a Sample.
//
//go:embed sample.schema.json
var SampleJSONSchema []byte

// ResultJSONSchema is result.schema.json: the JSON Schema of a Result.
//
//go:embed result.schema.json
var ResultJSONSchema []byte
