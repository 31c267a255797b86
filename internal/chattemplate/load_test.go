package chattemplate

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// modelDir writes files into a fresh model directory.
func modelDir(tb testing.TB, files map[string]string) string {
	tb.Helper()
	dir := tb.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	return dir
}

const namedConfig = `{
  "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false},
  "eos_token": "</s>",
  "pad_token": null,
  "chat_template": [
    {"name": "default", "template": "D{{ messages | length }}"},
    {"name": "tool_use", "template": "T{{ tools | length }}"},
    {"name": "rag", "template": "R{{ documents | length }}"}
  ]
}`

func TestLoad(t *testing.T) {
	user := Input{Messages: []any{msg("user", "hi")}}
	withTools := Input{Messages: []any{msg("user", "hi")}, Tools: []any{map[string]any{"type": "function"}}}
	withDocs := Input{Messages: []any{msg("user", "hi")}, Documents: []any{map[string]any{"text": "d"}}}
	tests := []struct {
		name    string
		files   map[string]string
		tmpl    string
		in      Input
		want    string
		special map[string]string
		wantErr error
	}{
		{
			name:    "string template",
			files:   map[string]string{ConfigFile: `{"chat_template": "{{ bos_token }}{{ messages[0].content }}", "bos_token": "<s>"}`},
			in:      user,
			want:    "<s>hi",
			special: map[string]string{"bos_token": "<s>"},
		},
		{
			name:    "named: default",
			files:   map[string]string{ConfigFile: namedConfig},
			in:      user,
			want:    "D1",
			special: map[string]string{"bos_token": "<s>", "eos_token": "</s>"},
		},
		{
			name:    "named: tool_use when tools are given",
			files:   map[string]string{ConfigFile: namedConfig},
			in:      withTools,
			want:    "T1",
			special: map[string]string{"bos_token": "<s>", "eos_token": "</s>"},
		},
		{
			name:    "named: asked for",
			files:   map[string]string{ConfigFile: namedConfig},
			tmpl:    "rag",
			in:      withDocs,
			want:    "R1",
			special: map[string]string{"bos_token": "<s>", "eos_token": "</s>"},
		},
		{
			name:    "named: unknown name",
			files:   map[string]string{ConfigFile: namedConfig},
			tmpl:    "nope",
			wantErr: ErrNoTemplate,
		},
		{
			name:    "chat_template.jinja wins",
			files:   map[string]string{ConfigFile: `{"chat_template": "config", "eos_token": "<e>"}`, TemplateFile: "file{{ eos_token }}\n"},
			in:      user,
			want:    "file<e>",
			special: map[string]string{"eos_token": "<e>"},
		},
		{
			name:    "chat_template.jinja alone",
			files:   map[string]string{TemplateFile: "only"},
			in:      user,
			want:    "only",
			special: map[string]string{},
		},
		{
			name:    "config without a template",
			files:   map[string]string{ConfigFile: `{"eos_token": "</s>"}`},
			wantErr: ErrNoTemplate,
		},
		{
			name:    "empty directory",
			files:   map[string]string{},
			wantErr: ErrNoTemplate,
		},
		{
			name:    "single template, name asked",
			files:   map[string]string{ConfigFile: `{"chat_template": "x"}`},
			tmpl:    "tool_use",
			wantErr: ErrNoTemplate,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tpl, err := Load(modelDir(t, tt.files), tt.tmpl)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Load error = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := tpl.Render(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("Render = %q, want %q", got, tt.want)
			}
			if s := tpl.SpecialTokens(); !reflect.DeepEqual(s, tt.special) {
				t.Errorf("SpecialTokens = %v, want %v", s, tt.special)
			}
		})
	}
}

func TestLoadAdditionalTemplates(t *testing.T) {
	dir := modelDir(t, map[string]string{
		ConfigFile:   `{"chat_template": "ignored", "eos_token": "</s>"}`,
		TemplateFile: "D{{ eos_token }}",
	})
	extra := filepath.Join(dir, AdditionalTemplatesDir)
	if err := os.Mkdir(extra, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"tool_use.jinja": "T", "rag.jinja": "R", "notes.txt": "x"} {
		if err := os.WriteFile(filepath.Join(extra, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tpl, err := Load(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := tpl.Names(); !reflect.DeepEqual(got, []string{"default", "rag", "tool_use"}) {
		t.Errorf("Names = %v", got)
	}
	for _, tt := range []struct {
		in   Input
		want string
	}{
		{Input{}, "D</s>"},
		{Input{Tools: []any{map[string]any{"type": "function"}}}, "T"},
	} {
		if got, err := tpl.Render(tt.in); err != nil || got != tt.want {
			t.Errorf("Render = %q, %v; want %q", got, err, tt.want)
		}
	}
	rag, err := Load(dir, "rag")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := rag.Render(Input{}); err != nil || got != "R" {
		t.Errorf("rag Render = %q, %v", got, err)
	}
}

func TestLoadNamedWithoutDefault(t *testing.T) {
	dir := modelDir(t, map[string]string{ConfigFile: `{"chat_template": [{"name": "a", "template": "A"}, {"name": "b", "template": "B"}]}`})
	tpl, err := Load(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := tpl.Names(); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("Names = %v", got)
	}
	if _, err := tpl.Render(Input{}); !errors.Is(err, ErrNoTemplate) {
		t.Errorf("Render error = %v, want ErrNoTemplate", err)
	}
}

func TestParseConfigRejects(t *testing.T) {
	tests := []struct {
		name, config, wantInError string
	}{
		{"not JSON", `{`, "parse"},
		{"template of the wrong type", `{"chat_template": 3}`, "neither a string nor a list"},
		{"list entry without template", `{"chat_template": [{"name": "default"}]}`, "chat_template[0]"},
		{"token of the wrong type", `{"chat_template": "x", "eos_token": 3}`, "eos_token"},
		{"AddedToken without content", `{"chat_template": "x", "bos_token": {"lstrip": true}}`, "bos_token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tt.config), "")
			if err == nil || !strings.Contains(err.Error(), tt.wantInError) {
				t.Errorf("ParseConfig error = %v, want one mentioning %q", err, tt.wantInError)
			}
		})
	}
}

// TestLoadRealModels checks the special tokens read from the committed
// tokenizer_config.json files.
func TestLoadRealModels(t *testing.T) {
	tests := []struct {
		model    string
		bos, eos string
	}{
		{"qwen3", "", "<|im_end|>"},
		{"qwen2_5", "", "<|im_end|>"},
		{"llama3_1", "<|begin_of_text|>", "<|eot_id|>"},
		{"gemma3", "<bos>", "<end_of_turn>"},
		{"deepseek_v3", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"},
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			tpl := loadModel(t, tt.model)
			if tpl.BOS() != tt.bos || tpl.EOS() != tt.eos {
				t.Errorf("BOS, EOS = %q, %q; want %q, %q", tpl.BOS(), tpl.EOS(), tt.bos, tt.eos)
			}
		})
	}
}
