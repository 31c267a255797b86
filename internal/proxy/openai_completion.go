package proxy

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
)

// The request side of POST /v1/completions (OpenAI's legacy completions,
// platform.openai.com/docs/api-reference/completions/create; vLLM's
// CompletionRequest in vllm/entrypoints/openai/protocol.py). Unknown fields
// are ignored, as for chat requests.

// CompletionRequest is a decoded POST /v1/completions body: one prompt,
// as text or as token ids.
type CompletionRequest struct {
	Model string
	// Prompt is the prompt's text, when given as a string; PromptIDs the
	// prompt's token ids, when given as a list of integers. Exactly one is
	// set (a non-empty Prompt, or a non-nil PromptIDs).
	Prompt    string
	PromptIDs []int32
	SamplingFields
	Stream, IncludeUsage bool
	// Logprobs is logprobs: nil (none) or 0 (the sampled tokens'
	// log-probabilities); vLLM's logprobs N > 0 adds the N most likely
	// alternatives, which are not served.
	Logprobs *int
}

type completionWire struct {
	Model      *string         `json:"model"`
	Prompt     json.RawMessage `json:"prompt"`
	Logprobs   *int            `json:"logprobs"`
	Echo       *bool           `json:"echo"`
	Suffix     *string         `json:"suffix"`
	BestOf     *int            `json:"best_of"`
	commonWire                 // max_tokens, temperature…
}

// DecodeCompletionRequest decodes and checks a text completion request
// body. An error is a *RequestError naming the field. max_tokens absent is
// not vLLM's default of 16 but the trajectory's (SamplingFields.Params).
func DecodeCompletionRequest(body []byte) (*CompletionRequest, error) {
	var w completionWire
	if err := decodeBody(body, &w); err != nil {
		return nil, err
	}
	r := &CompletionRequest{}
	if w.Model != nil {
		r.Model = *w.Model
	}
	if err := r.decodePrompt(w.Prompt); err != nil {
		return nil, err
	}
	var err error
	if r.SamplingFields, r.Stream, r.IncludeUsage, err = w.common(); err != nil {
		return nil, err
	}
	switch {
	case w.Echo != nil && *w.Echo:
		return nil, unsupported("echo", "true is not supported")
	case w.Suffix != nil && *w.Suffix != "":
		return nil, unsupported("suffix", "not supported")
	case w.BestOf != nil && *w.BestOf != 1:
		return nil, unsupported("best_of", "%d is not supported: only 1", *w.BestOf)
	}
	if v := w.Logprobs; v != nil {
		switch {
		case *v < 0:
			return nil, invalid("logprobs", "must be at least 0, got %d", *v)
		case *v > 0:
			return nil, unsupported("logprobs", "%d is not supported: only 0 (the sampled tokens' log-probabilities)", *v)
		}
		r.Logprobs = v
	}
	return r, nil
}

// decodePrompt reads prompt: a non-empty string or a non-empty list of
// token ids. vLLM also takes a list of prompts (strings, or lists of ids);
// one request here is one step of one trajectory, so those are refused.
func (r *CompletionRequest) decodePrompt(raw json.RawMessage) error {
	if isNull(raw) {
		return invalid("prompt", "missing")
	}
	t := bytes.TrimSpace(raw)
	switch t[0] {
	case '"':
		if err := json.Unmarshal(t, &r.Prompt); err != nil {
			return invalid("prompt", "malformed string")
		}
		if r.Prompt == "" {
			return invalid("prompt", "must not be empty")
		}
		return nil
	case '[':
	default:
		return invalid("prompt", "must be a string or a list of token ids")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(t, &items); err != nil {
		return invalid("prompt", "must be a string or a list of token ids")
	}
	switch n := len(items); {
	case n == 0:
		return invalid("prompt", "must not be empty")
	case n > MaxPromptTokens:
		return invalid("prompt", "lists %d token ids, more than the limit of %d (MaxPromptTokens)", n, MaxPromptTokens)
	}
	r.PromptIDs = make([]int32, len(items))
	for i, it := range items {
		it = bytes.TrimSpace(it)
		if len(it) > 0 && (it[0] == '"' || it[0] == '[') {
			return unsupported("prompt", "a list of prompts is not supported: send one prompt, a string or a list of token ids")
		}
		id, err := strconv.ParseInt(string(it), 10, 64)
		if err != nil || id < 0 || id > math.MaxInt32 {
			return invalid("prompt["+strconv.Itoa(i)+"]", "must be a token id (an integer in [0, %d]), got %s", math.MaxInt32, clip(string(it)))
		}
		r.PromptIDs[i] = int32(id)
	}
	return nil
}
