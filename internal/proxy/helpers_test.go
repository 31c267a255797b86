package proxy

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/pkg/llm"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// generate is a scripted model: text as tmpl's tokenizer encodes it,
// followed by the turn's stop token, finished by it.
func generate(tmpl tokenize.ChatTemplate, text string) llm.Result {
	stop := tmpl.StopTokenIDs()[0]
	ids := append(tmpl.Tokenizer().Encode(text), stop)
	lps := make([]float32, len(ids))
	for i := range lps {
		lps[i] = -0.25 * float32(i%4)
	}
	return llm.Result{OutputIDs: ids, Logprobs: lps, Finish: llm.Finish{Type: llm.FinishStop, Matched: stop}}
}

// golden compares got with testdata/golden/name, or writes it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file:\ngot:\n%s\nwant:\n%s", name, got, want)
	}
}

// indentJSON is v as WriteJSON writes it, indented for reading.
func indentJSON(t testing.TB, v any) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := WriteJSON(&b, v); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b.Bytes(), "", "  "); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}
