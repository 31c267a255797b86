package tokenize_test

import (
	"slices"
	"testing"

	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/pkg/llm/llmtest"
)

// The LLM conformance suite renders ChatML over the byte vocabulary itself
// (pkg/ imports nothing internal); it must agree with the simulator's.
func TestLLMTestRendersAsByteChatML(t *testing.T) {
	chat := tokenize.NewByteChatML()
	for _, text := range []string{"", "plain", "<|im_start|>x<|im_end|>\n", "<|endoftext|>", "<|im_", "ünï\x00\xff"} {
		if got, want := llmtest.Encode(text), (tokenize.Bytes{}).Encode(text); !slices.Equal(got, want) {
			t.Errorf("Encode(%q) = %v, want %v", text, got, want)
		}
		ids := (tokenize.Bytes{}).Encode(text)
		if got, want := llmtest.Decode(ids), (tokenize.Bytes{}).Decode(ids); got != want {
			t.Errorf("Decode(%v) = %q, want %q", ids, got, want)
		}
		if got, want := llmtest.Message("user", text), chat.Message("user", text); !slices.Equal(got, want) {
			t.Errorf("Message(user, %q) = %v, want %v", text, got, want)
		}
	}
	if got, want := llmtest.GenerationPrompt(), chat.GenerationPrompt(); !slices.Equal(got, want) {
		t.Errorf("GenerationPrompt() = %v, want %v", got, want)
	}
	if got := llmtest.Decode([]int32{-1, tokenize.VocabBytes}); got != "\uFFFD\uFFFD" {
		t.Errorf("Decode(out of vocabulary) = %q", got)
	}
}
