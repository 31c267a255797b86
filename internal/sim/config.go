package sim

import (
	"github.com/actloop/actloop/internal/batching"
	"github.com/actloop/actloop/internal/tokenize"
)

// Config configures a simulated inference server. Zero values take the
// defaults.
type Config struct {
	// PrefillTokensPerSec is the prefill rate. Default 20000.
	PrefillTokensPerSec float64
	// DecodeTokensPerSec is the per-stream decode rate at batch size 1.
	// Default 50.
	DecodeTokensPerSec float64
	// BatchSlowdown multiplies the per-token decode time by
	// (1 + BatchSlowdown·(running−1)). Default 0.02; negative means none.
	BatchSlowdown float64
	// MaxRunning is how many requests hold a slot (prefill or decode) at
	// once; more wait in a FIFO queue. Default 64.
	MaxRunning int
	// CacheTokens is the prefix cache's capacity in tokens (16-token
	// blocks). Default 1<<20; negative means no cache.
	CacheTokens int
	// TimeScale is wall time per simulated second; 0 answers at once.
	TimeScale float64
	// Seed varies the unscripted replies.
	Seed int64
	// MaxTurns bounds the turns of an unscripted trajectory. Default 8.
	MaxTurns int
	// Tokenizer turns prompts into text and replies into ids; it must have
	// ChatML's <|im_start|>, <|im_end|> and <|endoftext|> tokens (see
	// CheckTokenizer; without them /generate answers 500). Default
	// tokenize.Bytes.
	Tokenizer tokenize.Tokenizer
	// ContextLength is the simulated model's context length: /generate
	// and /v1/completions refuse (400, in SGLang's and vLLM's words) an
	// input of that many tokens or more, or an input and max_new_tokens of
	// more together; /v1/models reports it as max_model_len and
	// /get_server_info as context_length. Default 1<<20.
	ContextLength int
	// WeightVersion is reported in meta_info.weight_version until
	// /update_weight_version changes it. Default "0".
	WeightVersion string
	// Model, when set, replaces the cost model above (PrefillTokensPerSec,
	// DecodeTokensPerSec, BatchSlowdown, MaxRunning, CacheTokens) with the
	// iteration-level model of SGLang's continuous batching that the
	// virtual-time benchmark runs (internal/batching): one token pool for
	// running requests and the prefix cache, admission when a request
	// fits, chunked prefill, retraction, an iteration time calibrated for a
	// named model and GPU. Prefixes are matched in blocks of 16 token ids.
	Model *batching.Config
}

// Defaults of Config.
const (
	DefaultPrefillTokensPerSec = 20000
	DefaultDecodeTokensPerSec  = 50
	DefaultBatchSlowdown       = 0.02
	DefaultMaxRunning          = 64
	DefaultCacheTokens         = 1 << 20
	DefaultMaxTurns            = 8
	DefaultContextLength       = 1 << 20
	DefaultWeightVersion       = "0"
)

func (c Config) withDefaults() Config {
	if c.PrefillTokensPerSec <= 0 {
		c.PrefillTokensPerSec = DefaultPrefillTokensPerSec
	}
	if c.DecodeTokensPerSec <= 0 {
		c.DecodeTokensPerSec = DefaultDecodeTokensPerSec
	}
	switch {
	case c.BatchSlowdown == 0:
		c.BatchSlowdown = DefaultBatchSlowdown
	case c.BatchSlowdown < 0:
		c.BatchSlowdown = 0
	}
	if c.MaxRunning <= 0 {
		c.MaxRunning = DefaultMaxRunning
	}
	switch {
	case c.CacheTokens == 0:
		c.CacheTokens = DefaultCacheTokens
	case c.CacheTokens < 0:
		c.CacheTokens = 0
	}
	if c.TimeScale < 0 {
		c.TimeScale = 0
	}
	if c.MaxTurns <= 0 {
		c.MaxTurns = DefaultMaxTurns
	}
	if c.ContextLength <= 0 {
		c.ContextLength = DefaultContextLength
	}
	if c.WeightVersion == "" {
		c.WeightVersion = DefaultWeightVersion
	}
	return c
}

// Stats are counters and gauges of a Server, for tests and benchmarks.
type Stats struct {
	// Requests counts accepted /generate requests.
	Requests int64
	// Duplicates counts requests refused because a request with their rid
	// was live (errDuplicateRID).
	Duplicates int64
	// Running is how many requests hold a slot now; Waiting how many wait
	// for one (in the queue, or because generation is paused).
	Running, Waiting int
	// Aborted counts requests that ended aborted (including clients that
	// went away).
	Aborted int64
	// PromptTokens and CachedTokens sum every prefill's context length and
	// the part of it served from the prefix cache; a retracted request
	// prefills again. PromptTokens − CachedTokens is the prefill work done.
	PromptTokens, CachedTokens int64
	// GeneratedTokens counts output tokens returned, partial ones included.
	GeneratedTokens int64
}

// Phase is where a live request is.
type Phase int

// Phases of a live request; 0 is unset.
const (
	PhaseWaiting Phase = iota + 1 // waiting for a slot
	PhasePrefill                  // holds a slot, prefilling
	PhaseDecode                   // holds a slot, decoding
)

// String returns the name of p.
func (p Phase) String() string {
	switch p {
	case PhaseWaiting:
		return "waiting"
	case PhasePrefill:
		return "prefill"
	case PhaseDecode:
		return "decode"
	}
	return "unknown"
}

// RequestInfo describes a live request.
type RequestInfo struct {
	Phase Phase
	// Generated is how many output tokens it has generated so far.
	Generated int
}
