package llm

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// API names an inference server's HTTP API.
type API string

// The APIs actloop speaks.
const (
	// APISGLang is SGLang's native API (/generate): the SGLang client.
	APISGLang API = "sglang"
	// APIOpenAI is the OpenAI-compatible completions API as vLLM serves it
	// (/v1/completions): the OpenAI client.
	APIOpenAI API = "openai"
)

// Valid reports whether a is one of the APIs actloop speaks.
func (a API) Valid() bool { return a == APISGLang || a == APIOpenAI }

// ServerTokenizer tokenizes with the inference server's own tokenizer, over
// POST /tokenize and POST /detokenize; vLLM and SGLang both serve them,
// with the same request fields and a differently named detokenize answer
// ("prompt" in vLLM, "text" in SGLang; both are read). It is safe for
// concurrent use.
type ServerTokenizer struct {
	httpCore
	api API
}

// NewServerTokenizer returns a tokenizer backed by the server at baseURL
// that speaks api. Calls are retried like generations; opts.Timeout bounds a
// call whose context has no deadline (default 30s here).
func NewServerTokenizer(baseURL string, api API, opts SGLangOptions) *ServerTokenizer {
	if opts.Timeout <= 0 {
		opts.Timeout = controlTimeout
	}
	return &ServerTokenizer{httpCore: newHTTPCore(baseURL, opts.HTTPClient, opts.Timeout, opts.Retries, opts.Backoff), api: api}
}

// Tokenize returns the ids of text, without the special tokens (BOS) the
// tokenizer would add to a whole prompt: add_special_tokens is false.
func (t *ServerTokenizer) Tokenize(ctx context.Context, text string) ([]int32, error) {
	body, err := json.Marshal(tokenizeRequest{Prompt: text, AddSpecialTokens: false})
	if err != nil {
		return nil, fmt.Errorf("tokenize: encode: %w", err)
	}
	ctx, cancel := withDefaultTimeout(ctx, t.timeout)
	defer cancel()
	b, err := t.call(ctx, http.MethodPost, "/tokenize", body)
	if err != nil {
		return nil, fmt.Errorf("tokenize: %w", err)
	}
	var w tokenizeResponse
	if err := unmarshalField(b, &w, ""); err != nil {
		return nil, fmt.Errorf("tokenize: %w", err)
	}
	if w.Tokens == nil {
		return nil, fmt.Errorf("tokenize: %w", badResponse("tokens: missing"))
	}
	return w.Tokens, nil
}

// Detokenize returns the text of ids, special tokens included as text.
func (t *ServerTokenizer) Detokenize(ctx context.Context, ids []int32) (string, error) {
	req := detokenizeRequest{Tokens: ids}
	if req.Tokens == nil {
		req.Tokens = []int32{}
	}
	if t.api == APISGLang {
		skip := false
		req.SkipSpecialTokens = &skip
	}
	body, err := json.Marshal(req)
	if err != nil {
		return "", fmt.Errorf("detokenize: encode: %w", err)
	}
	ctx, cancel := withDefaultTimeout(ctx, t.timeout)
	defer cancel()
	b, err := t.call(ctx, http.MethodPost, "/detokenize", body)
	if err != nil {
		return "", fmt.Errorf("detokenize: %w", err)
	}
	return decodeDetokenize(b)
}

func decodeDetokenize(b []byte) (string, error) {
	var w detokenizeResponse
	if err := unmarshalField(b, &w, ""); err != nil {
		return "", fmt.Errorf("detokenize: %w", err)
	}
	switch {
	case w.Prompt != nil:
		return *w.Prompt, nil
	case w.Text != nil:
		return *w.Text, nil
	}
	return "", fmt.Errorf("detokenize: %w", badResponse("prompt (vLLM) or text (SGLang): missing"))
}

// Bind returns a tokenizer (Encode and Decode, the shape of the
// tokenizers actloop renders chat templates with) whose calls run under ctx, each bounded
// by timeout (0: the ServerTokenizer's). Those methods return
// no error, so a failed call returns nil (Encode) or "" (Decode) and keeps
// the first error, which Err reports: check it after use.
func (t *ServerTokenizer) Bind(ctx context.Context, timeout time.Duration) *BoundTokenizer {
	if timeout <= 0 {
		timeout = t.timeout
	}
	return &BoundTokenizer{t: t, ctx: ctx, timeout: timeout}
}

// BoundTokenizer is a ServerTokenizer bound to a context (see Bind).
type BoundTokenizer struct {
	t       *ServerTokenizer
	ctx     context.Context // the caller's, bound for a tokenizer interface that takes none
	timeout time.Duration

	mu  sync.Mutex
	err error
}

// Encode returns the ids of s.
func (b *BoundTokenizer) Encode(s string) []int32 {
	ctx, cancel := context.WithTimeout(b.ctx, b.timeout)
	defer cancel()
	ids, err := b.t.Tokenize(ctx, s)
	b.keep(err)
	return ids
}

// Decode returns the text of ids.
func (b *BoundTokenizer) Decode(ids []int32) string {
	ctx, cancel := context.WithTimeout(b.ctx, b.timeout)
	defer cancel()
	s, err := b.t.Detokenize(ctx, ids)
	b.keep(err)
	return s
}

// Err returns the first error an Encode or Decode met, or nil.
func (b *BoundTokenizer) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

func (b *BoundTokenizer) keep(err error) {
	if err == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil {
		b.err = err
	}
}
