package schema

import _ "embed"

// SampleJSONSchema is sample.schema.json: the JSON Schema of a Sample.
//
//go:embed sample.schema.json
var SampleJSONSchema []byte

// ResultJSONSchema is result.schema.json: the JSON Schema of a Result.
//
//go:embed result.schema.json
var ResultJSONSchema []byte
