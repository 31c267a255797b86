package llm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// SamplingParams are the sampling parameters of one generation. Field names
// follow SGLang's SamplingParams (python/sglang/srt/sampling/sampling_params.py).
type SamplingParams struct {
	// MaxNewTokens caps the generated tokens; it must be positive (a resumed
	// generation that has nothing left to generate is the caller's to finish).
	MaxNewTokens int
	// Temperature 0 is greedy decoding.
	Temperature float64
	// TopP 0 means 1 (no nucleus cut), since SGLang rejects top_p = 0.
	TopP float64
	// TopK 0 means -1 (the whole vocabulary), since SGLang rejects top_k = 0.
	TopK int
	MinP float64
	// Stop strings end generation when the output text ends with one.
	Stop []string
	// StopTokenIDs end generation at the first of them generated; the stop
	// token is part of the output.
	StopTokenIDs []int32
	// SkipSpecialTokens is sent only when set (SGLang's default is true); it
	// affects only the text SGLang returns, which actloop does not use.
	SkipSpecialTokens *bool
	// NoStopTrim keeps a matched stop string in SGLang's text output.
	NoStopTrim bool
}

// Request is one generation.
type Request struct {
	// RID is the request id: 32 lower-case hex digits (NewRID), so that it is
	// fixed-length and prefix-free; SGLang's /abort_request matches by prefix.
	RID      string
	InputIDs []int32
	Sampling SamplingParams
	// Reply scripts the simulator's answer (internal/sim): the output is Reply's
	// bytes followed by <|im_end|>. It travels as
	// sampling_params.custom_params {"actloop_reply": Reply}, only when
	// non-empty; a real SGLang server ignores custom_params unless a custom
	// logit processor reads them.
	Reply string
}

// Validate reports what makes r unfit to send, as ErrInvalidRequest.
func (r Request) Validate() error {
	switch {
	case !ValidRID(r.RID):
		return fmt.Errorf("%w: rid %q is not 32 lower-case hex digits", ErrInvalidRequest, r.RID)
	case len(r.InputIDs) == 0:
		return fmt.Errorf("%w: input_ids is empty", ErrInvalidRequest)
	case r.Sampling.MaxNewTokens <= 0:
		return fmt.Errorf("%w: max_new_tokens %d is not positive", ErrInvalidRequest, r.Sampling.MaxNewTokens)
	}
	return nil
}

// FinishType says why a generation ended.
type FinishType int

// Finish types; 0 is unset.
const (
	FinishStop   FinishType = iota + 1 // a stop token or stop string was generated
	FinishLength                       // max_new_tokens was reached
	FinishAbort                        // aborted (by rid, abort-all, or a pause in abort mode)
)

// String returns the SGLang name of t ("stop", "length", "abort").
func (t FinishType) String() string {
	switch t {
	case FinishStop:
		return "stop"
	case FinishLength:
		return "length"
	case FinishAbort:
		return "abort"
	}
	return fmt.Sprintf("FinishType(%d)", int(t))
}

// Finish is SGLang's meta_info.finish_reason.
type Finish struct {
	Type FinishType
	// Matched is the stop token id that ended a FinishStop, or -1.
	Matched int32
	// MatchedText is the stop string that ended a FinishStop, if one did.
	MatchedText string
	// Length is max_new_tokens for a FinishLength.
	Length int
	// Message is the server's reason for a FinishAbort, e.g. "Abort before
	// prefill" (no tokens) or "Abort in waiting queue".
	Message string
}

// Result is one finished (or aborted) generation.
type Result struct {
	// OutputIDs are the generated ids, the stop token included.
	OutputIDs []int32
	// Logprobs holds one log-probability per output id.
	Logprobs []float32
	Finish   Finish
	// PromptTokens, CompletionTokens and CachedTokens are the server's counts;
	// CachedTokens is the prompt prefix served from the prefix cache. An
	// aborted request may report zeros.
	PromptTokens, CompletionTokens, CachedTokens int
	// WeightVersion is the server's weight version when it answered; empty if
	// the server did not report one.
	WeightVersion string
}

// Generator runs generations on an inference server.
type Generator interface {
	// Generate runs req to completion. An abort is a Result with
	// Finish.Type == FinishAbort, not an error.
	Generate(ctx context.Context, req Request) (Result, error)
	// Abort aborts the generation with request id rid; aborting an unknown
	// or finished rid is harmless.
	Abort(ctx context.Context, rid string) error
}

// VersionSetter is a Generator that can be told the weight version its
// server now holds, so the server reports it with each answer.
type VersionSetter interface {
	// SetWeightVersion records version on the server without aborting
	// anything in flight.
	SetWeightVersion(ctx context.Context, version string) error
}

// PrefixAborter is a Generator whose server aborts every request whose id
// starts with a prefix in one call (SGLang matches /abort_request rids by
// prefix): a worker that starts its request ids with its own prefix aborts
// all of them at once.
type PrefixAborter interface {
	// AbortPrefix aborts every generation whose rid starts with prefix
	// (RIDPrefixLen lower-case hex digits).
	AbortPrefix(ctx context.Context, prefix string) error
}

// HealthChecker is a Generator whose server answers a health check.
type HealthChecker interface {
	// Health asks the server once whether it serves; nil means it does.
	Health(ctx context.Context) error
}

// RIDPrefixLen is the length of a request id prefix (see NewRIDPrefix).
const RIDPrefixLen = 8

// NewRID returns a random request id: 32 lower-case hex digits.
func NewRID() string { return NewRIDWithPrefix(NewRIDPrefix()) }

// NewRIDPrefix returns a random prefix of RIDPrefixLen hex digits.
func NewRIDPrefix() string {
	var b [RIDPrefixLen / 2]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand documents it)
	return hex.EncodeToString(b[:])
}

// NewRIDWithPrefix returns a request id that starts with prefix (from
// NewRIDPrefix) and ends in random digits: still 32 hex digits, so request
// ids stay fixed-length and prefix-free.
func NewRIDWithPrefix(prefix string) string {
	var b [(32 - RIDPrefixLen) / 2]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// ValidRID reports whether rid is 32 lower-case hex digits.
func ValidRID(rid string) bool { return len(rid) == 32 && isHex(rid) }

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
