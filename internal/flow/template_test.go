package flow

import (
	"strings"
	"testing"

	"github.com/actloop/actloop/pkg/agent"
)

func TestChatTemplateSettings(t *testing.T) {
	tests := []struct {
		name, tokenizer, template string
		wantErr                   string // "" = no error
	}{
		{"qwen chatml", "qwen", "chatml", ""},
		{"bytes chatml", "bytes", "chatml", ""},
		{"unknown template", "qwen", "jinja", "ACTLOOP_CHAT_TEMPLATE"},
		{"no tokenizer", "", "chatml", "ACTLOOP_TOKENIZER"},
		{"missing file", "/nonexistent/tokenizer.json", "chatml", "ACTLOOP_TOKENIZER"},
		{"llama3 without its tokens", "qwen", "llama3", "ACTLOOP_CHAT_TEMPLATE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl, err := ChatTemplate(tt.tokenizer, tt.template)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				// The opening ends with the generation prompt.
				_, ids, err := Opening(agent.DefaultConfig(), tmpl, "task")
				if err != nil {
					t.Fatal(err)
				}
				gp := tmpl.GenerationPrompt()
				if len(ids) <= len(gp) || tmpl.Tokenizer().Decode(ids[len(ids)-len(gp):]) != "<|im_start|>assistant\n" {
					t.Fatalf("opening %q", tmpl.Tokenizer().Decode(ids))
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one naming %s", err, tt.wantErr)
			}
		})
	}
	if err := ValidateChatTemplate("", "x"); err == nil || !strings.Contains(err.Error(), "ACTLOOP_TOKENIZER") ||
		!strings.Contains(err.Error(), "ACTLOOP_CHAT_TEMPLATE") {
		t.Fatalf("ValidateChatTemplate = %v", err)
	}
	if err := ValidateChatTemplate("qwen", "llama3"); err != nil {
		t.Fatal(err)
	}
}
