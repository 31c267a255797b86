package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
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

// Tokenizer is a client whose server tokenizes text with its own
// tokenizer: POST /tokenize.
type Tokenizer interface {
	// Tokenize returns the server's ids of text; with addSpecial the
	// special tokens its tokenizer adds to a whole prompt (a BOS) are
	// added. A server that has no /tokenize (404: SGLang before it had
	// one, a proxy that does not route it) answers an error that matches
	// ErrNoTokenize.
	Tokenize(ctx context.Context, text string, addSpecial bool) ([]int32, error)
}

var (
	_ Tokenizer = (*ServerTokenizer)(nil)
	_ Tokenizer = (*SGLang)(nil)
	_ Tokenizer = (*OpenAI)(nil)
)

// ErrNoTokenize matches (errors.Is) the error of a Tokenize call whose
// server has no /tokenize endpoint (it answered 404).
var ErrNoTokenize = errors.New("the server has no /tokenize endpoint")

// Tokenize implements Tokenizer with POST /tokenize. SGLang serves it
// (python/sglang/srt/entrypoints/http_server.py, openai_v1_tokenize, at
// /v1/tokenize and /tokenize) as vLLM does (vllm/entrypoints/openai/
// api_server.py, tokenize, at /tokenize only), so the path is /tokenize.
func (c *SGLang) Tokenize(ctx context.Context, text string, addSpecial bool) ([]int32, error) {
	return c.tokenize(ctx, controlTimeout, "", text, addSpecial)
}

// Tokenize implements Tokenizer with POST /tokenize (vLLM's
// vllm/entrypoints/openai/api_server.py, since moved to
// vllm/entrypoints/serve/tokenize/api_router.py), naming the client's
// model when it has one (TokenizeCompletionRequest.model in
// .../serve/tokenize/protocol.py; vLLM checks it against its served models,
// answering 404 for another, and takes its own when it is absent).
func (c *OpenAI) Tokenize(ctx context.Context, text string, addSpecial bool) ([]int32, error) {
	return c.tokenize(ctx, controlTimeout, c.model, text, addSpecial)
}

// tokenize sends one POST /tokenize for model ("": the server's own),
// bounded by timeout when ctx has no deadline.
func (c *httpCore) tokenize(ctx context.Context, timeout time.Duration, model, text string, addSpecial bool) ([]int32, error) {
	body, err := json.Marshal(tokenizeRequest{Model: model, Prompt: text, AddSpecialTokens: addSpecial})
	if err != nil {
		return nil, fmt.Errorf("tokenize: encode: %w", err)
	}
	ctx, cancel := withDefaultTimeout(ctx, timeout)
	defer cancel()
	b, err := c.call(ctx, http.MethodPost, "/tokenize", body)
	if noTokenize(err) {
		return nil, fmt.Errorf("tokenize: %w (%w)", ErrNoTokenize, err)
	}
	if err != nil {
		return nil, fmt.Errorf("tokenize: %w", err)
	}
	ids, err := decodeTokenize(b)
	if err != nil {
		return nil, fmt.Errorf("tokenize: %w", err)
	}
	return ids, nil
}

// decodeTokenize reads a TokenizeResponse's tokens; ErrBadResponse when
// they are missing or one is not a token id.
func decodeTokenize(b []byte) ([]int32, error) {
	var w tokenizeResponse
	if err := unmarshalField(b, &w, ""); err != nil {
		return nil, err
	}
	if w.Tokens == nil {
		return nil, badResponse("tokens: missing")
	}
	for i, id := range w.Tokens {
		if id < 0 {
			return nil, badResponse("tokens[%d]: %d is not a token id", i, id)
		}
	}
	return w.Tokens, nil
}

// noTokenize reports whether err is a 404 for the path, not vLLM's 404 for
// a model it does not serve ("The model `x` does not exist.",
// OpenAIServing._check_model), which is an answer of the endpoint.
func noTokenize(err error) bool {
	var he *HTTPError
	return errors.As(err, &he) && he.Status == http.StatusNotFound &&
		!strings.Contains(he.Body, "does not exist")
}

// ServerTokenizer tokenizes with the inference server's own tokenizer, over
// POST /tokenize and POST /detokenize; vLLM and SGLang both serve them,
// with the same request fields and a differently named detokenize answer
// ("prompt" in vLLM, "text" in SGLang; both are read). It is safe for
// concurrent use.
//
// The SGLang and OpenAI clients implement Tokenizer too, over the same
// call, for a check against the server they generate on.
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

// Tokenize implements Tokenizer. actloop tokenizes parts of a
// conversation, so its own calls pass addSpecial false.
func (t *ServerTokenizer) Tokenize(ctx context.Context, text string, addSpecial bool) ([]int32, error) {
	return t.tokenize(ctx, t.timeout, "", text, addSpecial)
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
	ids, err := b.t.Tokenize(ctx, s, false)
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
