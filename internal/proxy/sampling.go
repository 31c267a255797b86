package proxy

import (
	"slices"

	"github.com/actloop/actloop/pkg/llm"
	"github.com/actloop/actloop/pkg/schema"
)

// SamplingFields are the sampling fields of a chat or text completion
// request, nil where the request leaves them out. top_k and min_p are
// vLLM's extensions (its chat-completion-sampling-params).
//
// Its JSON (the names of the request's fields) is how a proxy-flow
// trajectory keeps a call's fields for its generation step.
type SamplingFields struct {
	Temperature *float64 `json:"temperature,omitempty"`
	TopP        *float64 `json:"top_p,omitempty"`
	MinP        *float64 `json:"min_p,omitempty"`
	TopK        *int     `json:"top_k,omitempty"`
	// MaxTokens is max_completion_tokens, else max_tokens.
	MaxTokens *int     `json:"max_tokens,omitempty"`
	Stop      []string `json:"stop,omitempty"`
	// Seed is accepted and not applied: llm.SamplingParams carries no seed
	// (actloop's generations are sampled by the server's own generator),
	// so a request with a seed is served unseeded.
	Seed *int64 `json:"seed,omitempty"`
}

// check bounds the fields as vLLM's SamplingParams does, within the
// bounds of a sample's sampling (schema.MaxTemperature, schema.MaxTopK).
func (s SamplingFields) check() error {
	if v := s.Temperature; v != nil && !(*v >= 0 && *v <= schema.MaxTemperature) {
		return invalid("temperature", "must be in [0, %d], got %v", schema.MaxTemperature, *v)
	}
	if v := s.TopP; v != nil && !(*v > 0 && *v <= 1) {
		return invalid("top_p", "must be in (0, 1], got %v", *v)
	}
	if v := s.MinP; v != nil && !(*v >= 0 && *v <= 1) {
		return invalid("min_p", "must be in [0, 1], got %v", *v)
	}
	if v := s.TopK; v != nil && (*v < -1 || *v > schema.MaxTopK) {
		return invalid("top_k", "must be -1 or 0 (no cut) or in [1, %d], got %d", schema.MaxTopK, *v)
	}
	if v := s.MaxTokens; v != nil && *v < 1 {
		return invalid("max_tokens", "must be at least 1, got %d", *v)
	}
	return nil
}

// Params maps the fields onto base, the trajectory's own sampling
// parameters: a field the request sets replaces base's, one it leaves out
// keeps base's. room is what the trajectory has left for this generation
// (the context length less the prompt, and its token budget): max tokens
// is the request's, else base's MaxNewTokens, else room, and never more
// than room. A request asking for more than room gets room, where vLLM
// would answer 400: an agent cannot know how much of the trajectory's
// budget is left, and a length finish tells it. room < 1 is ErrNoRoom.
func (s SamplingFields) Params(base llm.SamplingParams, room int) (llm.SamplingParams, error) {
	if room < 1 {
		return llm.SamplingParams{}, ErrNoRoom
	}
	p := base
	p.Stop = slices.Clone(base.Stop)
	p.StopTokenIDs = slices.Clone(base.StopTokenIDs)
	switch {
	case s.MaxTokens != nil:
		p.MaxNewTokens = *s.MaxTokens
	case p.MaxNewTokens < 1:
		p.MaxNewTokens = room
	}
	p.MaxNewTokens = min(p.MaxNewTokens, room)
	if v := s.Temperature; v != nil {
		p.Temperature = *v
	}
	if v := s.TopP; v != nil {
		p.TopP = *v
	}
	if v := s.MinP; v != nil {
		p.MinP = *v
	}
	if v := s.TopK; v != nil {
		p.TopK = max(*v, 0) // -1 and 0 both mean the whole vocabulary; llm reads 0 so
	}
	if s.Stop != nil {
		p.Stop = slices.Clone(s.Stop)
	}
	return p, nil
}

// Sampling returns the request's sampling parameters over base, with room
// left for the generation (see SamplingFields.Params).
func (r *ChatRequest) Sampling(base llm.SamplingParams, room int) (llm.SamplingParams, error) {
	return r.SamplingFields.Params(base, room)
}

// Sampling returns the request's sampling parameters over base, with room
// left for the generation (see SamplingFields.Params).
func (r *CompletionRequest) Sampling(base llm.SamplingParams, room int) (llm.SamplingParams, error) {
	return r.SamplingFields.Params(base, room)
}
