package tokenize

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/actloop/actloop/internal/chattemplate"
)

// Chat names the model's tokenizer and chat template. The gen-workers,
// env-workers and predictor-gw of a deployment read the same settings and
// must agree on them, and with the model.
type Chat struct {
	// ModelDir is a model directory: a Hugging Face snapshot, or any folder
	// holding tokenizer.json and tokenizer_config.json (and optionally
	// chat_template.jinja). When set, the tokenizer is its tokenizer.json and
	// the chat template is the model's own, with the special tokens of its
	// configuration, checked at start to render turn by turn (see
	// agent.md). ACTLOOP_TOKENIZER must then be unset or name
	// DIR/tokenizer.json; ACTLOOP_CHAT_TEMPLATE unset means the model's own
	// template, or names a built-in one that is used instead only if it
	// renders the probe conversations byte for byte as the model's own
	// does. Conflicting settings are refused at start, naming both.
	ModelDir string `envconfig:"MODEL_DIR"`
	// Tokenizer is the model's tokenizer: qwen (the Qwen3 tokenizer built
	// in; also Qwen2/2.5's vocabulary), bytes (one token per byte; tests and
	// benchmarks), or the path of a Hugging Face tokenizer.json (.gz
	// allowed) with a BPE model: byte-level (Qwen, Llama 3, DeepSeek,
	// GPT-OSS) or SentencePiece-style with byte fallback (Llama 2, Mistral,
	// Gemma); any other model type is refused at start, naming it. Unset:
	// qwen, or the tokenizer.json of ACTLOOP_MODEL_DIR.
	Tokenizer string `envconfig:"TOKENIZER"`
	// ChatTemplate is chatml (Qwen2.5), llama3, qwen3 (Qwen3's own template
	// in thinking mode) or qwen3-nothink (Qwen3's with enable_thinking=false:
	// every generation prompt ends with an empty think block); the tokenizer
	// must have the template's special tokens. Unset: chatml, or the model's
	// own template of ACTLOOP_MODEL_DIR.
	ChatTemplate string `envconfig:"CHAT_TEMPLATE"`
}

// Defaults without ACTLOOP_MODEL_DIR.
const (
	DefaultTokenizer = TokenizerQwen
	DefaultTemplate  = TemplateChatML
)

// Validate checks the names and that the settings agree, without loading
// a tokenizer file.
func (s Chat) Validate() error {
	var errs []error
	if s.ChatTemplate != "" && !slices.Contains(TemplateNames, s.ChatTemplate) {
		errs = append(errs, fmt.Errorf("ACTLOOP_CHAT_TEMPLATE: %q: %w", s.ChatTemplate, ErrUnknownTemplate))
	}
	if s.ModelDir != "" && s.Tokenizer != "" && filepath.Clean(s.Tokenizer) != filepath.Join(s.ModelDir, TokenizerFile) {
		errs = append(errs, fmt.Errorf("ACTLOOP_TOKENIZER %q conflicts with ACTLOOP_MODEL_DIR %q, whose tokenizer is %s: "+
			"leave ACTLOOP_TOKENIZER unset", s.Tokenizer, s.ModelDir, filepath.Join(s.ModelDir, TokenizerFile)))
	}
	return errors.Join(errs...)
}

// Template loads the tokenizer and builds the chat template over it; an
// error names the setting at fault.
func (s Chat) Template() (ChatTemplate, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if s.ModelDir != "" {
		return s.modelTemplate()
	}
	name, path := s.ChatTemplate, s.Tokenizer
	if name == "" {
		name = DefaultTemplate
	}
	if path == "" {
		path = DefaultTokenizer
	}
	tok, err := OpenTokenizer(path)
	if err != nil {
		return nil, fmt.Errorf("ACTLOOP_TOKENIZER: %w", err)
	}
	tmpl, err := NewTemplate(name, tok)
	if err != nil {
		return nil, fmt.Errorf("ACTLOOP_CHAT_TEMPLATE: %w", err)
	}
	return tmpl, nil
}

// modelTemplate is Template with ACTLOOP_MODEL_DIR.
func (s Chat) modelTemplate() (ChatTemplate, error) {
	tok, err := LoadHF(filepath.Join(s.ModelDir, TokenizerFile))
	if err != nil {
		return nil, fmt.Errorf("ACTLOOP_MODEL_DIR: %w", err)
	}
	own, err := chattemplate.Load(s.ModelDir, "")
	if err != nil {
		return nil, fmt.Errorf("ACTLOOP_MODEL_DIR: %w", err)
	}
	if s.ChatTemplate == "" {
		tmpl, err := NewModel(s.ModelDir, own, tok, nil)
		if err != nil {
			return nil, fmt.Errorf("ACTLOOP_MODEL_DIR: %w", err)
		}
		return tmpl, nil
	}
	builtin, err := NewTemplate(s.ChatTemplate, tok)
	if err != nil {
		return nil, fmt.Errorf("ACTLOOP_CHAT_TEMPLATE with the tokenizer of ACTLOOP_MODEL_DIR: %w", err)
	}
	if err := Agree(builtin, own, builtinKwargs[s.ChatTemplate]); err != nil {
		return nil, fmt.Errorf("ACTLOOP_CHAT_TEMPLATE %s does not render as the chat template of ACTLOOP_MODEL_DIR %s: %w",
			s.ChatTemplate, s.ModelDir, err)
	}
	return builtin, nil
}
