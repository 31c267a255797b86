package chattemplate

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

func loadModel(tb testing.TB, model string) *Template {
	tb.Helper()
	tpl, err := Load(filepath.Join("testdata", "models", model), "")
	if err != nil {
		tb.Fatal(err)
	}
	return tpl
}

func msg(role, content string) any {
	return map[string]any{"role": role, "content": content}
}

func raw(s string) any { return json.RawMessage(s) }

var (
	sysMsg    = msg("system", "You are a careful assistant.")
	userMsg1  = msg("user", "What is 2 + 2?")
	userMsg2  = msg("user", "And times three?")
	replyText = "2 + 2 = 4."
)

// endOfTurn is the token each model stops its reply on.
var endOfTurn = map[string]string{
	"qwen3":       "<|im_end|>",
	"qwen2_5":     "<|im_end|>",
	"llama3_1":    "<|eot_id|>",
	"gemma3":      "<end_of_turn>",
	"deepseek_v3": "<｜end▁of▁sentence｜>",
}

func TestExtendPlainTurns(t *testing.T) {
	tests := []struct {
		model string
		want  string
	}{
		{"qwen3", "\n<|im_start|>user\nAnd times three?<|im_end|>\n<|im_start|>assistant\n"},
		{"qwen2_5", "\n<|im_start|>user\nAnd times three?<|im_end|>\n<|im_start|>assistant\n"},
		{"llama3_1", "<|start_header_id|>user<|end_header_id|>\n\nAnd times three?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
		{"gemma3", "\n<start_of_turn>user\nAnd times three?<end_of_turn>\n<start_of_turn>model\n"},
		{"deepseek_v3", "<｜User｜>And times three?<｜Assistant｜>"},
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			tpl := loadModel(t, tt.model)
			prev := Input{Messages: []any{sysMsg, userMsg1}, AddGenerationPrompt: true}
			next := Input{Messages: []any{sysMsg, userMsg1, msg("assistant", replyText), userMsg2}, AddGenerationPrompt: true}
			got, err := tpl.Extend(prev, replyText+endOfTurn[tt.model], next)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("Extend = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestExtendToolRound(t *testing.T) {
	tpl := loadModel(t, "qwen2_5")
	tools := []any{raw(`{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}`)}
	q := msg("user", "Weather in Paris?")
	prev := Input{Messages: []any{q}, Tools: tools, AddGenerationPrompt: true}
	completion := "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>"
	call := raw(`{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}`)
	next := Input{Messages: []any{q, call, msg("tool", "18C")}, Tools: tools, AddGenerationPrompt: true}
	got, err := tpl.Extend(prev, completion, next)
	if err != nil {
		t.Fatal(err)
	}
	want := "\n<|im_start|>user\n<tool_response>\n18C\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
	if got != want {
		t.Errorf("Extend = %q, want %q", got, want)
	}
}

func TestDeltaWithoutGenerationPrompt(t *testing.T) {
	tpl := loadModel(t, "qwen2_5")
	got, err := tpl.Delta(Input{Messages: []any{sysMsg, userMsg1}}, Input{Messages: []any{sysMsg, userMsg1, msg("assistant", replyText)}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "<|im_start|>assistant\n2 + 2 = 4.<|im_end|>\n"; got != want {
		t.Errorf("Delta = %q, want %q", got, want)
	}
}

// TestExtendBreaksPrefix covers templates that rewrite earlier turns: the
// error names the byte where the renderings part.
func TestExtendBreaksPrefix(t *testing.T) {
	thought := "<think>\nThe user wants 2+2.\n</think>\n\n"
	tests := []struct {
		name       string
		model      string
		prev       Input
		completion string
		next       Input
		// offset is where the renderings part, given the prompt.
		offset func(prompt string) int
	}{
		{
			// Qwen3 keeps the reasoning of the turns after the last user
			// message only, so the next user turn drops it.
			name:       "qwen3 drops earlier reasoning",
			model:      "qwen3",
			prev:       Input{Messages: []any{userMsg1}, AddGenerationPrompt: true},
			completion: thought + replyText + "<|im_end|>",
			next:       Input{Messages: []any{userMsg1, msg("assistant", thought+replyText), userMsg2}, AddGenerationPrompt: true},
			offset:     func(p string) int { return len(p) },
		},
		{
			// With enable_thinking=false the prompt ends in an empty think
			// block that the rendering of the reply does not repeat.
			name:       "qwen3 empty think block",
			model:      "qwen3",
			prev:       Input{Messages: []any{userMsg1}, AddGenerationPrompt: true, Kwargs: map[string]any{"enable_thinking": false}},
			completion: replyText + "<|im_end|>",
			next:       Input{Messages: []any{userMsg1, msg("assistant", replyText), userMsg2}, AddGenerationPrompt: true, Kwargs: map[string]any{"enable_thinking": false}},
			offset:     func(p string) int { return len(p) - len("<think>\n\n</think>\n\n") },
		},
		{
			// Llama 3.1 trims message content, so a reply ending in a
			// newline is rendered without it.
			name:       "llama3_1 trims the reply",
			model:      "llama3_1",
			prev:       Input{Messages: []any{userMsg1}, AddGenerationPrompt: true},
			completion: replyText + "\n<|eot_id|>",
			next:       Input{Messages: []any{userMsg1, msg("assistant", replyText+"\n"), userMsg2}, AddGenerationPrompt: true},
			offset:     func(p string) int { return len(p) + len(replyText) },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tpl := loadModel(t, tt.model)
			prompt, err := tpl.Render(tt.prev)
			if err != nil {
				t.Fatal(err)
			}
			_, err = tpl.Extend(tt.prev, tt.completion, tt.next)
			var pe *PrefixError
			if !errors.As(err, &pe) {
				t.Fatalf("Extend error = %v, want a *PrefixError", err)
			}
			if want := tt.offset(prompt); pe.Offset != want {
				t.Errorf("Offset = %d, want %d (%v)", pe.Offset, want, err)
			}
			if pe.Prev == "" || pe.Next == "" || !strings.Contains(err.Error(), "diverge at byte") {
				t.Errorf("error %q lacks excerpts", err)
			}
		})
	}
}

func TestSuffix(t *testing.T) {
	tests := []struct {
		name       string
		have, full string
		want       string
		wantOffset int // -1: no error
	}{
		{"append", "abc", "abcdef", "def", -1},
		{"equal", "abc", "abc", "", -1},
		{"empty have", "", "abc", "abc", -1},
		{"diverge", "abcX", "abcdef", "", 3},
		{"shorter full", "abcdef", "abc", "", 3},
		{"multibyte", "名前は太郎", "名前は花子", "", len("名前は")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Suffix(tt.have, tt.full)
			if tt.wantOffset < 0 {
				if err != nil || got != tt.want {
					t.Fatalf("Suffix = %q, %v; want %q", got, err, tt.want)
				}
				return
			}
			var pe *PrefixError
			if !errors.As(err, &pe) {
				t.Fatalf("Suffix error = %v, want *PrefixError", err)
			}
			if pe.Offset != tt.wantOffset {
				t.Errorf("Offset = %d, want %d", pe.Offset, tt.wantOffset)
			}
		})
	}
}

func TestExcerptCutsOnCharacters(t *testing.T) {
	s := strings.Repeat("日本", 40)
	for off := 0; off <= len(s); off++ {
		e := excerpt(s, off)
		if !strings.Contains(s, strings.Trim(e, "…")) {
			t.Fatalf("excerpt(%d) = %q is not a piece of the text", off, e)
		}
	}
}
