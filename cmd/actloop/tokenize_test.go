package main

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/actloop/actloop/internal/testkit"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// Committed real model files: tokenizers (internal/tokenize) and chat
// template configurations (internal/chattemplate), with their goldens from
// transformers.js.
const (
	hfrefDir      = "../../internal/tokenize/testdata/hfref"
	qwenTokenizer = "../../internal/tokenize/models/qwen3/tokenizer.json.gz"
	templateDir   = "../../internal/chattemplate/testdata"
)

// tokenizeModelDir assembles a model directory from a gzipped
// tokenizer.json and, when model is set, chattemplate's tokenizer_config.json
// of that model.
func tokenizeModelDir(t *testing.T, tokGz, model string) string {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "tokenizer.json"), testkit.Gunzip(t, tokGz))
	if model != "" {
		cfg, err := os.ReadFile(filepath.Join(templateDir, "models", model, "tokenizer_config.json"))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, "tokenizer_config.json"), cfg)
	}
	return dir
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// runTokenizeCmd runs actloop tokenize with args and decodes its output.
func runTokenizeCmd(t *testing.T, args ...string) tokenized {
	t.Helper()
	var out, errOut bytes.Buffer
	if err := run(context.Background(), append([]string{"tokenize"}, args...), &out, &errOut); err != nil {
		t.Fatalf("actloop tokenize %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	var got tokenized
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("output %q: %v", out.String(), err)
	}
	return got
}

// --text gives the ids transformers.js gives (add_special_tokens false), for
// a byte-level BPE tokenizer (DeepSeek-V3) and a byte-fallback one (Llama 2):
// the longest reference string and the one with the most non-ASCII text.
func TestTokenizeText(t *testing.T) {
	for _, family := range []string{"deepseek_v3", "llama2"} {
		t.Run(family, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(hfrefDir, family+".json"))
			if err != nil {
				t.Fatal(err)
			}
			var ref struct {
				Cases []struct {
					Text string  `json:"text"`
					IDs  []int32 `json:"ids"`
				} `json:"cases"`
			}
			if err := json.Unmarshal(data, &ref); err != nil {
				t.Fatal(err)
			}
			longest, foreign := 0, 0
			nonASCII := func(s string) int { return len(s) - utf8.RuneCountInString(s) }
			for i, c := range ref.Cases {
				if len(c.IDs) > len(ref.Cases[longest].IDs) {
					longest = i
				}
				if nonASCII(c.Text) > nonASCII(ref.Cases[foreign].Text) {
					foreign = i
				}
			}
			dir := tokenizeModelDir(t, filepath.Join(hfrefDir, "models", family+".tokenizer.json.gz"), "")
			for _, i := range []int{longest, foreign} {
				c := ref.Cases[i]
				got := runTokenizeCmd(t, "--model", dir, "--text", c.Text)
				if got.Text != c.Text || !slices.Equal(got.IDs, c.IDs) {
					t.Fatalf("--text %.60q: got %d ids, want %d\n got %v\nwant %v", c.Text, len(got.IDs), len(c.IDs), got.IDs, c.IDs)
				}
			}
		})
	}
}

// A conversation renders as transformers.js renders it with Qwen3's own
// template (internal/chattemplate/testdata/ref), with tools, without the
// generation prompt and with template kwargs; its ids are those of --text
// of the rendering.
func TestTokenizeConversation(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(templateDir, "ref", "qwen3.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Cases []struct {
			Name     string          `json:"name"`
			Messages json.RawMessage `json:"messages"`
			Tools    json.RawMessage `json:"tools"`
			GP       bool            `json:"add_generation_prompt"`
			Kwargs   json.RawMessage `json:"kwargs"`
			Output   string          `json:"output"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	dir := tokenizeModelDir(t, qwenTokenizer, "qwen3")
	checked := 0
	for _, c := range ref.Cases {
		if c.Name != "tool_call_object_args/gen=true" && c.Name != "enable_thinking_false_multi/gen=false" {
			continue
		}
		checked++
		files := t.TempDir()
		args := []string{"--model", dir, "--messages", filepath.Join(files, "messages.json")}
		writeFile(t, args[3], c.Messages)
		if string(c.Tools) != "null" {
			args = append(args, "--tools", filepath.Join(files, "tools.json"))
			writeFile(t, args[len(args)-1], c.Tools)
		}
		if !c.GP {
			args = append(args, "--no-generation-prompt")
		}
		if string(c.Kwargs) != "{}" {
			args = append(args, "--template-kwargs", string(c.Kwargs))
		}
		got := runTokenizeCmd(t, args...)
		if got.Text != c.Output {
			t.Fatalf("%s: text\n got %q\nwant %q", c.Name, got.Text, c.Output)
		}
		if want := runTokenizeCmd(t, "--model", dir, "--text", c.Output); !slices.Equal(got.IDs, want.IDs) || len(got.IDs) == 0 {
			t.Fatalf("%s: ids %v, want %v", c.Name, got.IDs, want.IDs)
		}
	}
	if checked != 2 {
		t.Fatalf("checked %d reference cases, want 2", checked)
	}
}

// Errors name the flag, the file and the item at fault; flag misuse is a
// usage error.
func TestTokenizeErrors(t *testing.T) {
	files := t.TempDir()
	notArray := filepath.Join(files, "object.json")
	writeFile(t, notArray, []byte(`{"role": "user"}`))
	noRole := filepath.Join(files, "norole.json")
	writeFile(t, noRole, []byte(`[{"role": "user", "content": "hi"}, {"content": "x"}]`))
	good := filepath.Join(files, "good.json")
	writeFile(t, good, []byte(`[{"role": "user", "content": "hi"}]`))
	tests := []struct {
		name  string
		args  []string
		usage bool
		want  []string
	}{
		{"no model", []string{"--text", "x"}, true, []string{"--model"}},
		{"nothing to tokenize", []string{"--model", files}, true, []string{"--messages", "--text"}},
		{"text and messages", []string{"--model", files, "--text", "x", "--messages", good}, true, []string{"--text", "--messages"}},
		{"missing file", []string{"--model", files, "--messages", filepath.Join(files, "none.json")}, false, []string{"--messages", "none.json"}},
		{"not an array", []string{"--model", files, "--messages", notArray}, false, []string{"--messages", "object.json", "array"}},
		{"no role", []string{"--model", files, "--messages", noRole}, false, []string{"--messages", "norole.json", "message 1", `"role"`}},
		{"tools not an array", []string{"--model", files, "--messages", good, "--tools", notArray}, false, []string{"--tools", "object.json"}},
		{"kwargs not an object", []string{"--model", files, "--messages", good, "--template-kwargs", "[1]"}, true, []string{"--template-kwargs"}},
		{"no tokenizer", []string{"--model", files, "--messages", good}, false, []string{"--model " + files, "tokenizer.json"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(context.Background(), append([]string{"tokenize"}, tt.args...), io.Discard, io.Discard)
			if err == nil {
				t.Fatal("no error")
			}
			if (exitCode(err) == 2) != tt.usage {
				t.Fatalf("exit code %d for %v", exitCode(err), err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("err = %v, want it to name %s", err, w)
				}
			}
		})
	}
}
