package tokenize_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/actloop/actloop/internal/agent"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/pkg/schema"
)

func TestChatTemplateSettings(t *testing.T) {
	tests := []struct {
		name, tokenizer, template string
		wantErr                   string // "" = no error
		wantPrompt                string // the end of the opening
	}{
		{"qwen chatml", "qwen", "chatml", "", "<|im_start|>assistant\n"},
		{"bytes chatml", "bytes", "chatml", "", "<|im_start|>assistant\n"},
		{"qwen3", "qwen", "qwen3", "", "<|im_start|>assistant\n"},
		{"qwen3 without thinking", "qwen", "qwen3-nothink", "", "<|im_start|>assistant\n<think>\n\n</think>\n\n"},
		{"unknown template", "qwen", "jinja", "ACTLOOP_CHAT_TEMPLATE", ""},
		{"defaults", "", "", "", "<|im_start|>assistant\n"},
		{"missing file", "/nonexistent/tokenizer.json", "chatml", "ACTLOOP_TOKENIZER", ""},
		{"llama3 without its tokens", "qwen", "llama3", "ACTLOOP_CHAT_TEMPLATE", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl, err := tokenize.Chat{Tokenizer: tt.tokenizer, ChatTemplate: tt.template}.Template()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				// The opening ends with the generation prompt.
				_, ids, err := agent.Opening(agent.DefaultConfig(), tmpl, "task")
				if err != nil {
					t.Fatal(err)
				}
				gp := tmpl.GenerationPrompt()
				if len(ids) <= len(gp) || tmpl.Tokenizer().Decode(ids[len(ids)-len(gp):]) != tt.wantPrompt {
					t.Fatalf("opening %q", tmpl.Tokenizer().Decode(ids))
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one naming %s", err, tt.wantErr)
			}
		})
	}
	if err := (tokenize.Chat{ModelDir: "m", Tokenizer: "t.json", ChatTemplate: "x"}).Validate(); err == nil ||
		!strings.Contains(err.Error(), "ACTLOOP_TOKENIZER") || !strings.Contains(err.Error(), "ACTLOOP_MODEL_DIR") ||
		!strings.Contains(err.Error(), "ACTLOOP_CHAT_TEMPLATE") {
		t.Fatalf("Validate = %v", err)
	}
	for _, name := range tokenize.TemplateNames {
		if err := (tokenize.Chat{Tokenizer: "qwen", ChatTemplate: name}).Validate(); err != nil {
			t.Fatal(err)
		}
	}
}

// Both flows run on a model's own template (Qwen2.5's, with the tokenizer
// its vocabulary shares with Qwen3): their turns join into the template's
// rendering of the whole conversation, tools included.
func TestModelDirFlows(t *testing.T) {
	dir := t.TempDir()
	data := testkit.Gunzip(t, "models/qwen3/tokenizer.json.gz")
	cfg, err := os.ReadFile("../chattemplate/testdata/models/qwen2_5/tokenizer_config.json")
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"tokenizer.json": data, "tokenizer_config.json": cfg} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tmpl, err := tokenize.Chat{ModelDir: dir}.Template()
	if err != nil {
		t.Fatal(err)
	}
	tok := tmpl.Tokenizer()
	for _, flow := range []agent.Flow{agent.BashFlow{}, agent.ToolCallFlow{}} {
		t.Run(flow.Name(), func(t *testing.T) {
			c := agent.DefaultConfigFor(flow.Name())
			msgs, ids, err := flow.Opening(c, tmpl, "fix the bug")
			if err != nil {
				t.Fatal(err)
			}
			conv := make([]tokenize.Msg, len(msgs))
			for i, m := range msgs {
				conv[i] = tokenize.Msg{Role: m.Role, Content: m.Content}
			}
			reply := tokenize.Msg{Role: "assistant", Content: "Let me look.\n\n```bash\nls\n```"}
			if flow.Name() == schema.FlowToolCall {
				reply = tokenize.Msg{Role: "assistant", Content: "Let me look.",
					ToolCalls: []tokenize.ToolCall{{Name: "bash", Arguments: `{"command": "ls"}`}}}
			}
			// The reply as the model generates it: the template's text for it,
			// up to its end-of-turn token.
			withReply, err := tmpl.(tokenize.CheckedRenderer).RenderText(append(conv, reply), false)
			if err != nil {
				t.Fatal(err)
			}
			if tt, ok := tmpl.(tokenize.ToolTemplate); ok && flow.Name() == schema.FlowToolCall {
				if withReply, err = tt.RenderTools(append(conv, reply), agent.Tools, false); err != nil {
					t.Fatal(err)
				}
			}
			text := tok.Decode(ids)
			generated, _, _ := strings.Cut(strings.TrimPrefix(withReply, text), "<|im_end|>")
			if generated == "" || strings.Contains(generated, "<|im_start|>") {
				t.Fatalf("the opening %q does not start the rendering with the reply %q", text, withReply)
			}
			gen := append(tok.Encode(generated), tmpl.StopTokenIDs()[0])
			ids = append(append(ids, gen...), tmpl.CloseTurn(gen)...)
			action, err := flow.Action(c, generated)
			if err != nil {
				t.Fatal(err)
			}
			obs, oids, err := flow.Outcome(c, tmpl, action, "main.go\n", 0, false)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, oids...)
			conv = append(conv, reply, tokenize.Msg{Role: obs.Role, Content: obs.Content})
			want, err := tmpl.(tokenize.CheckedRenderer).RenderText(conv, true)
			if flow.Name() == schema.FlowToolCall {
				want, err = tmpl.(tokenize.ToolTemplate).RenderTools(conv, agent.Tools, true)
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ids, tok.Encode(want)) {
				t.Fatalf("turn by turn:\n%q\nwhole:\n%q", tok.Decode(ids), want)
			}
		})
	}
}
