package tokenize

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/actloop/actloop/internal/chattemplate"
)

// modelConfigs is where chattemplate keeps real models' tokenizer_config.json.
const modelConfigs = "../chattemplate/testdata/models"

func loadOwn(t testing.TB, model string) *chattemplate.Template {
	t.Helper()
	tmpl, err := chattemplate.Load(filepath.Join(modelConfigs, model), "")
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// gunzipTo writes the gzipped file src to dst.
func gunzipTo(t testing.TB, src, dst string) {
	t.Helper()
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// specialBytes is Bytes with other special tokens, for templates whose
// tokenizer is not committed: each special is one id past the bytes.
type specialBytes []string

func (s specialBytes) Encode(text string) []int32 {
	var ids []int32
	for i := 0; i < len(text); {
		k := slices.IndexFunc(s, func(sp string) bool { return strings.HasPrefix(text[i:], sp) })
		if k >= 0 {
			ids = append(ids, int32(256+k))
			i += len(s[k])
			continue
		}
		ids = append(ids, int32(text[i]))
		i++
	}
	return ids
}

func (s specialBytes) Decode(ids []int32) string {
	var b strings.Builder
	for _, id := range ids {
		if id < 256 {
			b.WriteByte(byte(id))
		} else {
			b.WriteString(s[id-256])
		}
	}
	return b.String()
}

var (
	llamaSpecials = specialBytes{"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}
	gemmaSpecials = specialBytes{"<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>", "<pad>", "<unk>"}
)

// The built-in templates render the flows' conversations byte for byte as
// the models' own templates do (the real tokenizer_config.json files of
// chattemplate's testdata), or not, as agent.md says.
func TestBuiltinTemplatesAgree(t *testing.T) {
	tests := []struct {
		builtin string
		tmpl    ChatTemplate
		model   string
		agree   bool
	}{
		{TemplateQwen3, Qwen3{ChatML: ChatML{Tok: Bytes{}}, Thinking: true}, "qwen3", true},
		{TemplateQwen3NoThink, Qwen3{ChatML: ChatML{Tok: Bytes{}}}, "qwen3", true},
		{TemplateChatML, ChatML{Tok: Bytes{}}, "qwen2_5", true},
		{TemplateLlama3, Llama3{Tok: Bytes{}}, "llama3_1", true},
		{TemplateChatML, ChatML{Tok: Bytes{}}, "qwen3", false},                                 // Qwen3 drops earlier reasoning
		{TemplateQwen3, Qwen3{ChatML: ChatML{Tok: Bytes{}}, Thinking: true}, "qwen2_5", false}, // no think blocks
		{TemplateChatML, ChatML{Tok: Bytes{}}, "deepseek_v3", false},
		{TemplateLlama3, Llama3{Tok: Bytes{}}, "gemma3", false},
	}
	for _, tt := range tests {
		t.Run(tt.builtin+"/"+tt.model, func(t *testing.T) {
			err := Agree(tt.tmpl, loadOwn(t, tt.model), builtinKwargs[tt.builtin])
			if tt.agree && err != nil {
				t.Fatal(err)
			}
			var pe *chattemplate.PrefixError
			if !tt.agree && !errors.As(err, &pe) {
				t.Fatalf("err = %v, want a *chattemplate.PrefixError", err)
			}
		})
	}

	// Where they differ outside the probes, as agent.md says: Qwen2.5's
	// template adds a default system prompt when there is none, and Llama 3's
	// trims a reply, which the built-in keeps as generated.
	m := &Model{tmpl: loadOwn(t, "qwen2_5")}
	noSystem := []Msg{{Role: "user", Content: "hi"}}
	if own, _ := m.RenderText(noSystem, true); own == (ChatML{Tok: Bytes{}}).Render(noSystem, true) ||
		!strings.HasPrefix(own, "<|im_start|>system\nYou are Qwen") {
		t.Fatalf("qwen2_5 without a system message renders %q", own)
	}
	m = &Model{tmpl: loadOwn(t, "llama3_1")}
	spaced := []Msg{{Role: "system", Content: "s"}, {Role: "user", Content: "u"}, {Role: "assistant", Content: "reply\n"}}
	if own, _ := m.RenderText(spaced, false); own == (Llama3{Tok: Bytes{}}).Render(spaced, false) {
		t.Fatalf("llama3_1 renders a reply ending in a newline as the built-in does: %q", own)
	}
}

// joinFlow is what the bash flow appends for msgs (system, user, then
// assistant and user turns), the assistant turns as generated ids ending
// with the stop token.
func joinFlow(tmpl ChatTemplate, msgs []Msg, generationPrompt bool) []int32 {
	tok := tmpl.Tokenizer()
	ids := tmpl.Begin()
	for i, m := range msgs {
		if m.Role == "assistant" {
			gen := append(tok.Encode(m.Content), tmpl.StopTokenIDs()[0])
			ids = append(append(ids, gen...), tmpl.CloseTurn(gen)...)
			continue
		}
		ids = append(ids, tmpl.Message(m.Role, m.Content)...)
		if i+1 < len(msgs) && msgs[i+1].Role == "assistant" && i > 0 {
			ids = append(ids, tmpl.GenerationPrompt()...)
		}
	}
	if generationPrompt {
		ids = append(ids, tmpl.GenerationPrompt()...)
	}
	return ids
}

// A model's own template, turn by turn: the pieces of a conversation join
// into the ids of the template's whole rendering, or the template is
// refused naming the offset where its renderings diverge.
func TestModelTemplate(t *testing.T) {
	qwen, err := Qwen()
	if err != nil {
		t.Fatal(err)
	}
	deepseek, err := LoadHF("testdata/hfref/models/deepseek_v3.tokenizer.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		model     string
		tok       Tokenizer
		wantTools bool
		wantErr   string // "" = accepted; else in the error
		prefix    bool   // the error holds a *chattemplate.PrefixError
	}{
		{"qwen2_5", qwen, true, "", false},
		{"deepseek_v3", deepseek, false, "", false},
		{"llama3_1", llamaSpecials, false, "", false},
		{"qwen3", qwen, false, "a user message after a reply: earlier rendering is not a prefix: renderings diverge at byte 129", true},
		{"gemma3", gemmaSpecials, false, "a system message: the content does not appear once", false}, // folded into the first user turn
		{"gemma3", llamaSpecials, false, `its special tokens: bos_token "<bos>" is 5 tokens of the tokenizer`, false},
	}
	conv := []Msg{
		{Role: "system", Content: "You are a coding agent."},
		{Role: "user", Content: "Fix the bug in main.go, please."},
		{Role: "assistant", Content: "Let me look.\n\n```bash\ncat main.go\n```"},
		{Role: "user", Content: "<returncode>0</returncode>\n<output>\npackage main\n</output>"},
		{Role: "assistant", Content: "Done.\n\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"},
		{Role: "user", Content: "Submitted."},
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			tmpl, err := NewModel(tt.model, loadOwn(t, tt.model), tt.tok, nil)
			if tt.wantErr != "" {
				var te *TemplateError
				var pe *chattemplate.PrefixError
				if !errors.As(err, &te) || errors.As(err, &pe) != tt.prefix || !strings.Contains(err.Error(), tt.wantErr) ||
					!strings.Contains(err.Error(), "chat template of "+tt.model) {
					t.Fatalf("err = %v, want a TemplateError naming %s (a PrefixError: %t): %s", err, tt.model, tt.prefix, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := tmpl.(ToolTemplate); ok != tt.wantTools {
				t.Fatalf("%T: renders tools %t, want %t", tmpl, ok, tt.wantTools)
			}
			m := tmpl.(CheckedRenderer)
			for n := 2; n <= len(conv); n += 2 {
				for _, gp := range []bool{false, true} {
					text, err := m.RenderText(conv[:n], gp)
					if err != nil {
						t.Fatal(err)
					}
					if got, want := joinFlow(tmpl, conv[:n], gp), tt.tok.Encode(text); !slices.Equal(got, want) {
						t.Fatalf("%d messages, generation prompt %t:\n got %q\nwant %q", n, gp,
							tt.tok.Decode(got), text)
					}
				}
			}
		})
	}
}

// A model's template that renders tools gives the tool-call flow's turns:
// the system message with tools, tool results, as its whole rendering.
func TestModelTemplateTools(t *testing.T) {
	qwen, err := Qwen()
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := NewModel("qwen2_5", loadOwn(t, "qwen2_5"), qwen, nil)
	if err != nil {
		t.Fatal(err)
	}
	tt := tmpl.(ToolTemplate)
	tools := []json.RawMessage{probeTool}
	sys, err := tt.SystemTools("You are a coding agent.", tools)
	if err != nil {
		t.Fatal(err)
	}
	call := `<tool_call>` + "\n" + `{"name": "actloop_probe_tool", "arguments": {"command": "ls"}}` + "\n" + `</tool_call>`
	gen := append(qwen.Encode(call), tmpl.StopTokenIDs()[0])
	ids := append(append(tmpl.Begin(), sys...), tmpl.Message("user", "Fix it.")...)
	ids = append(append(append(ids, tmpl.GenerationPrompt()...), gen...), tmpl.CloseTurn(gen)...)
	ids = append(append(ids, tt.ToolResults("main.go")...), tmpl.GenerationPrompt()...)
	msgs := []Msg{{Role: "system", Content: "You are a coding agent."}, {Role: "user", Content: "Fix it."},
		{Role: "assistant", ToolCalls: []ToolCall{{Name: "actloop_probe_tool", Arguments: `{"command": "ls"}`}}},
		{Role: "tool", Content: "main.go"}}
	text, err := tt.RenderTools(msgs, tools, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := qwen.Encode(text); !slices.Equal(ids, want) {
		t.Fatalf("got %q\nwant %q", qwen.Decode(ids), text)
	}
}

// modelDir assembles a model directory: the tokenizer.json of tokGz and
// the tokenizer_config.json of chattemplate's testdata model.
func modelDir(t testing.TB, tokGz, model string) string {
	t.Helper()
	dir := t.TempDir()
	gunzipTo(t, tokGz, filepath.Join(dir, TokenizerFile))
	cfg, err := os.ReadFile(filepath.Join(modelConfigs, model, chattemplate.ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, chattemplate.ConfigFile), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// ACTLOOP_MODEL_DIR: the model's own template, or a built-in one that
// renders as it does; conflicting settings are refused naming both.
func TestChatModelDir(t *testing.T) {
	qwen25 := modelDir(t, "models/qwen3/tokenizer.json.gz", "qwen2_5")
	qwen3 := modelDir(t, "models/qwen3/tokenizer.json.gz", "qwen3")
	tests := []struct {
		name     string
		chat     Chat
		wantType string
		wantErr  []string
	}{
		{"own template", Chat{ModelDir: qwen25}, "tokenize.ModelTools", nil},
		{"tokenizer named as the model's", Chat{ModelDir: qwen25, Tokenizer: qwen25 + "/./tokenizer.json"}, "tokenize.ModelTools", nil},
		{"built-in that agrees", Chat{ModelDir: qwen25, ChatTemplate: TemplateChatML}, "tokenize.ChatML", nil},
		{"qwen3 built-in", Chat{ModelDir: qwen3, ChatTemplate: TemplateQwen3}, "tokenize.Qwen3", nil},
		{"qwen3 without thinking", Chat{ModelDir: qwen3, ChatTemplate: TemplateQwen3NoThink}, "tokenize.Qwen3", nil},
		{"qwen3's own breaks the prefix rule", Chat{ModelDir: qwen3}, "",
			[]string{"ACTLOOP_MODEL_DIR", "chat template of " + qwen3, "diverge at byte 129"}},
		{"built-in that does not agree", Chat{ModelDir: qwen3, ChatTemplate: TemplateChatML}, "",
			[]string{"ACTLOOP_CHAT_TEMPLATE chatml", "ACTLOOP_MODEL_DIR " + qwen3, "diverge at byte"}},
		{"built-in without its tokens", Chat{ModelDir: qwen25, ChatTemplate: TemplateLlama3}, "",
			[]string{"ACTLOOP_CHAT_TEMPLATE", "ACTLOOP_MODEL_DIR", "<|begin_of_text|>"}},
		{"another tokenizer", Chat{ModelDir: qwen25, Tokenizer: TokenizerQwen}, "",
			[]string{"ACTLOOP_TOKENIZER", "ACTLOOP_MODEL_DIR"}},
		{"no such directory", Chat{ModelDir: filepath.Join(qwen25, "missing")}, "", []string{"ACTLOOP_MODEL_DIR", "missing"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl, err := tt.chat.Template()
			if tt.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				if got := typeName(tmpl); got != tt.wantType {
					t.Fatalf("template %s, want %s", got, tt.wantType)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want one naming %q", tt.wantErr)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("err = %v, want it to name %q", err, w)
				}
			}
		})
	}
}

func typeName(v any) string { return strings.TrimPrefix(fmt.Sprintf("%T", v), "*") }
