package tokenize_test

import (
	"strings"
	"testing"

	"github.com/actloop/actloop/internal/agent"
	"github.com/actloop/actloop/internal/tokenize"
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
		{"no tokenizer", "", "chatml", "ACTLOOP_TOKENIZER", ""},
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
	if err := (tokenize.Chat{ChatTemplate: "x"}).Validate(); err == nil || !strings.Contains(err.Error(), "ACTLOOP_TOKENIZER") ||
		!strings.Contains(err.Error(), "ACTLOOP_CHAT_TEMPLATE") {
		t.Fatalf("Validate = %v", err)
	}
	for _, name := range tokenize.TemplateNames {
		if err := (tokenize.Chat{Tokenizer: "qwen", ChatTemplate: name}).Validate(); err != nil {
			t.Fatal(err)
		}
	}
}
