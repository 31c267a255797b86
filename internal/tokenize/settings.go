package tokenize

import (
	"errors"
	"fmt"
	"slices"
)

// Chat names the model's tokenizer and chat template. The gen-workers,
// env-workers and predictor-gw of a deployment read the same two settings
// and must agree on both, and with the model.
type Chat struct {
	// Tokenizer is the model's tokenizer: qwen (the Qwen3 tokenizer built
	// in; also Qwen2/2.5's vocabulary), bytes (one token per byte; tests and
	// benchmarks), or the path of a Hugging Face tokenizer.json (.gz
	// allowed) with a BPE model: byte-level (Qwen, Llama 3, DeepSeek,
	// GPT-OSS) or SentencePiece-style with byte fallback (Llama 2, Mistral,
	// Gemma); any other model type is refused at start, naming it.
	Tokenizer string `envconfig:"TOKENIZER" default:"qwen"`
	// ChatTemplate is chatml (Qwen2.5), llama3, qwen3 (Qwen3's own template
	// in thinking mode) or qwen3-nothink (Qwen3's with enable_thinking=false:
	// every generation prompt ends with an empty think block); the tokenizer
	// must have the template's special tokens.
	ChatTemplate string `envconfig:"CHAT_TEMPLATE" default:"chatml"`
}

// Validate checks the names without loading a tokenizer file.
func (s Chat) Validate() error {
	var errs []error
	if s.Tokenizer == "" {
		errs = append(errs, errors.New("ACTLOOP_TOKENIZER: missing (want bytes, qwen or the path of a tokenizer.json)"))
	}
	if !slices.Contains(TemplateNames, s.ChatTemplate) {
		errs = append(errs, fmt.Errorf("ACTLOOP_CHAT_TEMPLATE: %q: %w", s.ChatTemplate, ErrUnknownTemplate))
	}
	return errors.Join(errs...)
}

// Template loads the tokenizer and builds the chat template over it; an
// error names the setting at fault.
func (s Chat) Template() (ChatTemplate, error) {
	tok, err := OpenTokenizer(s.Tokenizer)
	if err != nil {
		return nil, fmt.Errorf("ACTLOOP_TOKENIZER: %w", err)
	}
	tmpl, err := NewTemplate(s.ChatTemplate, tok)
	if err != nil {
		return nil, fmt.Errorf("ACTLOOP_CHAT_TEMPLATE: %w", err)
	}
	return tmpl, nil
}
