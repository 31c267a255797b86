package schema_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/actloop/actloop/pkg/schema"
	"github.com/actloop/actloop/pkg/schema/internal/schemagen"
)

// The committed JSON Schemas are the generator's output, byte for byte,
// and are what the package embeds.
func TestJSONSchemaFilesAreGenerated(t *testing.T) {
	embedded := map[string][]byte{
		"sample.schema.json": schema.SampleJSONSchema,
		"result.schema.json": schema.ResultJSONSchema,
	}
	if len(embedded) != len(schemagen.Files) {
		t.Fatalf("the generator writes %d files, the package embeds %d", len(schemagen.Files), len(embedded))
	}
	for name, gen := range schemagen.Files {
		want, err := gen()
		if err != nil {
			t.Fatalf("generating %s: %v", name, err)
		}
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from a fresh generation (first at line %d); run: go generate ./pkg/schema",
				name, firstDiffLine(got, want))
		}
		if !bytes.Equal(embedded[name], got) {
			t.Errorf("the embedded %s is not the file", name)
		}
	}
}

func firstDiffLine(a, b []byte) int {
	line := 1
	for i := 0; i < len(a) && i < len(b) && a[i] == b[i]; i++ {
		if a[i] == '\n' {
			line++
		}
	}
	return line
}
