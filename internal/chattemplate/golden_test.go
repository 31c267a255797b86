package chattemplate

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// goldenModels are the models under testdata/models with goldens under
// testdata/ref, rendered by testdata/ref/gen.mjs.
var goldenModels = []string{"qwen3", "qwen2_5", "llama3_1", "gemma3", "deepseek_v3"}

type goldenCase struct {
	Name                string            `json:"name"`
	Messages            []json.RawMessage `json:"messages"`
	Tools               []json.RawMessage `json:"tools"`
	Documents           []json.RawMessage `json:"documents"`
	AddGenerationPrompt bool              `json:"add_generation_prompt"`
	Kwargs              json.RawMessage   `json:"kwargs"`
	Output              *string           `json:"output"`
	Error               *string           `json:"error"`
}

type goldenFile struct {
	Model  string       `json:"model"`
	Source string       `json:"source"`
	Cases  []goldenCase `json:"cases"`
}

// jinja2Overrides are the cases where the reference renderer
// (@huggingface/jinja) departs from Python's Jinja2, which transformers
// uses; the value is what Jinja2 does. Key: model + "/" + case name.
var jinja2Overrides = map[string]string{
	// Jinja2's trim filter is str(value).strip(): None becomes "None";
	// @huggingface/jinja refuses to trim null.
	"llama3_1/tool_call_null_content/gen=false": "render:None<|eot_id|>",
	"llama3_1/tool_call_null_content/gen=true":  "render:None<|eot_id|>",
}

func readGolden(tb testing.TB, model string) goldenFile {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "ref", model+".json"))
	if err != nil {
		tb.Fatal(err)
	}
	var g goldenFile
	if err := json.Unmarshal(data, &g); err != nil {
		tb.Fatalf("%s: %v", model, err)
	}
	return g
}

func (c goldenCase) input(tb testing.TB) Input {
	tb.Helper()
	in := Input{AddGenerationPrompt: c.AddGenerationPrompt}
	for _, m := range c.Messages {
		in.Messages = append(in.Messages, m)
	}
	for _, m := range c.Tools {
		in.Tools = append(in.Tools, m)
	}
	for _, m := range c.Documents {
		in.Documents = append(in.Documents, m)
	}
	if len(c.Kwargs) > 0 {
		var kw map[string]json.RawMessage
		if err := json.Unmarshal(c.Kwargs, &kw); err != nil {
			tb.Fatal(err)
		}
		if len(kw) > 0 {
			in.Kwargs = map[string]any{}
			for k, v := range kw {
				in.Kwargs[k] = v
			}
		}
	}
	return in
}

// jinja2Case is one rendering by Python's Jinja2 in transformers'
// environment (testdata/ref/gen_jinja2.py).
type jinja2Case struct {
	Name   string  `json:"name"`
	Output *string `json:"output"`
	Error  *string `json:"error"`
	Raised bool    `json:"raised"`
}

func readJinja2(tb testing.TB, name string) map[string]jinja2Case {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "ref", name+".jinja2.json"))
	if err != nil {
		tb.Fatal(err)
	}
	var f struct {
		Cases []jinja2Case `json:"cases"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	out := make(map[string]jinja2Case, len(f.Cases))
	for _, c := range f.Cases {
		out[c.Name] = c
	}
	return out
}

// checkJinja2 compares a rendering with Jinja2's: the same bytes, or an
// error where Jinja2 raised one (the same message for raise_exception).
func checkJinja2(t *testing.T, name string, want jinja2Case, got string, err error) bool {
	t.Helper()
	if want.Error != nil {
		if err == nil {
			t.Errorf("%s: Jinja2 raised %q, got %q", name, *want.Error, got)
			return false
		}
		var re *RaiseError
		if want.Raised && (!errors.As(err, &re) || re.Message != *want.Error) {
			t.Errorf("%s: want raise_exception(%q), got %v", name, *want.Error, err)
			return false
		}
		return true
	}
	if err != nil {
		t.Errorf("%s: %v", name, err)
		return false
	}
	if got != *want.Output {
		t.Errorf("%s: renderings differ at byte %d\n got: %q\nwant: %q", name, firstDiff(got, *want.Output), got, *want.Output)
		return false
	}
	return true
}

// TestModelsAgainstJinja2 renders every golden case and compares it with
// Python's Jinja2 in transformers' environment, byte for byte.
func TestModelsAgainstJinja2(t *testing.T) {
	for _, model := range goldenModels {
		t.Run(model, func(t *testing.T) {
			g := readGolden(t, model)
			want := readJinja2(t, model)
			tpl := loadModel(t, model)
			same := 0
			for _, c := range g.Cases {
				w, ok := want[c.Name]
				if !ok {
					t.Fatalf("%s: no Jinja2 rendering", c.Name)
				}
				got, err := tpl.Render(c.input(t))
				if checkJinja2(t, c.Name, w, got, err) {
					same++
				}
			}
			t.Logf("%s: %d/%d cases as Jinja2", model, same, len(g.Cases))
		})
	}
}

// TestModelsAgainstTransformersJS compares the same cases with
// transformers.js's renderer (@huggingface/jinja), except where it departs
// from Jinja2 (jinja2Overrides).
func TestModelsAgainstTransformersJS(t *testing.T) {
	for _, model := range goldenModels {
		t.Run(model, func(t *testing.T) {
			g := readGolden(t, model)
			tpl := loadModel(t, model)
			for _, c := range g.Cases {
				if _, ok := jinja2Overrides[model+"/"+c.Name]; ok {
					continue
				}
				got, err := tpl.Render(c.input(t))
				switch {
				case c.Error != nil:
					if err == nil {
						t.Errorf("%s: want error %q, rendered %q", c.Name, *c.Error, got)
					}
					var re *RaiseError
					if errors.As(err, &re) && re.Message != *c.Error {
						t.Errorf("%s: raised %q, want %q", c.Name, re.Message, *c.Error)
					}
				case err != nil:
					t.Errorf("%s: %v", c.Name, err)
				case got != *c.Output:
					t.Errorf("%s: renderings differ at byte %d\n got: %q\nwant: %q", c.Name, firstDiff(got, *c.Output), got, *c.Output)
				}
			}
		})
	}
}

// TestConstructsAgainstJinja2 renders small templates, one Jinja2
// construct each (testdata/ref/constructs.json), and compares them with
// Jinja2's renderings.
func TestConstructsAgainstJinja2(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "ref", "constructs.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Name     string                     `json:"name"`
		Template string                     `json:"template"`
		Vars     map[string]json.RawMessage `json:"vars"`
	}
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	want := readJinja2(t, "constructs")
	now := func() time.Time { return time.Date(2026, 7, 26, 9, 5, 3, 0, time.UTC) }
	same := 0
	for _, c := range cases {
		got, err := New(c.Template, nil).WithClock(now).Render(Input{Kwargs: rawVars(c.Vars)})
		if checkJinja2(t, c.Name, want[c.Name], got, err) {
			same++
		}
	}
	t.Logf("constructs: %d/%d as Jinja2", same, len(cases))
}

func rawVars(vars map[string]json.RawMessage) map[string]any {
	out := make(map[string]any, len(vars))
	for k, v := range vars {
		out[k] = v
	}
	return out
}

func firstDiff(a, b string) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

func countPrefix(m map[string]string, prefix string) int {
	n := 0
	for k := range m {
		if strings.HasPrefix(k, prefix) {
			n++
		}
	}
	return n
}
