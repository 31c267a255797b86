package batching

import (
	"errors"
	"fmt"
)

// Waiting-queue policies (SGLang's --schedule-policy).
const (
	PolicyFCFS = "fcfs" // SGLang's default since v0.4.3.post3
	PolicyLPM  = "lpm"  // longest prefix match; fcfs past LPMQueueLimit waiting
)

// LPMQueueLimit is the queue length past which SGLang's lpm falls back to
// fcfs (schedule_policy.py: len(waiting_queue) > 128).
const LPMQueueLimit = 128

// RetractDecodeSteps is SGLANG_RETRACT_DECODE_STEPS: after a retraction
// new_token_ratio assumes each remaining request decodes this many more
// tokens.
const RetractDecodeSteps = 20

// Config is one server's limits and scheduler settings, named as SGLang
// names them. Defaults (DefaultConfig) are SGLang v0.5.6.post2's for
// Llama-3.1-8B in bf16 on one H100 80GB, tensor parallel 1.
type Config struct {
	// MaxTotalTokens is max_total_num_tokens: the token pool that running
	// requests' KV and the radix cache share.
	MaxTotalTokens int
	// MaxRunning is the effective max_running_requests.
	MaxRunning int
	// ChunkedPrefill is chunked_prefill_size: the most prefill tokens in
	// one iteration; a longer input is prefilled in chunks.
	ChunkedPrefill int
	// MaxPrefillTokens is max_prefill_tokens: an input this long is the
	// only new request of its prefill batch.
	MaxPrefillTokens int
	// ClipMaxNew is SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION: the most output
	// tokens admission reserves per request.
	ClipMaxNew int
	// InitNewTokenRatio (SGLANG_INIT_NEW_TOKEN_RATIO × schedule
	// conservativeness), MinNewTokenRatioFactor
	// (SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR) and NewTokenRatioDecaySteps
	// (SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS): the share of their remaining
	// output running requests are assumed to still need, which decays
	// from init to init × factor over the decay steps.
	InitNewTokenRatio       float64
	MinNewTokenRatioFactor  float64
	NewTokenRatioDecaySteps int
	// Policy orders the waiting queue: PolicyFCFS or PolicyLPM.
	Policy string
	// IdleTickS is how long a server with work it cannot start (every
	// waiting request refused, nothing running) waits before it looks
	// again.
	IdleTickS float64
	// Cost is the iteration time model.
	Cost Cost
}

// KVBytesPerToken of Llama-3-8B in bf16: 32 layers × 8 KV heads × 128 dims
// × 2 (K and V) × 2 bytes.
const KVBytesPerToken = 32 * 8 * 128 * 2 * 2

// DefaultConfig is SGLang v0.5.6.post2's configuration for Llama-3.1-8B
// (bf16) on one H100 80GB, tensor parallel 1, with its defaults:
//
//   - max_total_num_tokens: mem_fraction_static ≈ 0.835 on an 80 GB card
//     (server_args: (81,559 MiB − 13,440 MiB reserved) / 81,559 MiB), so
//     the pool is what is left of 0.835 × 79.65 GiB after the 14.96 GiB of
//     weights and about 0.5 GiB of activations, at 128 KiB per token
//     (KVBytesPerToken): about 418,000 tokens.
//   - max_running_requests: min(max_total_num_tokens / 2, the request pool
//     of min(max(max_total_num_tokens / context_len × 512, 2048), 4096)) =
//     2048 at a 131,072-token context.
//   - chunked_prefill_size 8192 (GPU memory under 90 GB), max_prefill_tokens
//     16384, SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION 4096, new_token_ratio
//     from 0.7 to 0.7 × 0.14 over 600 decode steps, schedule_policy fcfs.
func DefaultConfig() Config {
	return Config{
		MaxTotalTokens:          418_000,
		MaxRunning:              2048,
		ChunkedPrefill:          8192,
		MaxPrefillTokens:        16384,
		ClipMaxNew:              4096,
		InitNewTokenRatio:       0.7,
		MinNewTokenRatioFactor:  0.14,
		NewTokenRatioDecaySteps: 600,
		Policy:                  PolicyFCFS,
		IdleTickS:               0.001,
		Cost:                    A100Llama8B,
	}
}

func (c Config) initRatio() float64 { return min(c.InitNewTokenRatio, 1) }

// Validate names every setting out of range.
func (c Config) Validate() error {
	var errs []error
	check := func(ok bool, name string, v any) {
		if !ok {
			errs = append(errs, fmt.Errorf("server model: %s: out of range: %v", name, v))
		}
	}
	check(c.MaxTotalTokens > 0, "max_total_num_tokens", c.MaxTotalTokens)
	check(c.MaxRunning > 0, "max_running_requests", c.MaxRunning)
	check(c.ChunkedPrefill > 0, "chunked_prefill_size", c.ChunkedPrefill)
	check(c.MaxPrefillTokens > 0, "max_prefill_tokens", c.MaxPrefillTokens)
	check(c.ClipMaxNew > 0, "clip_max_new_tokens", c.ClipMaxNew)
	check(c.InitNewTokenRatio > 0, "init_new_token_ratio", c.InitNewTokenRatio)
	check(c.MinNewTokenRatioFactor > 0 && c.MinNewTokenRatioFactor <= 1, "min_new_token_ratio_factor", c.MinNewTokenRatioFactor)
	check(c.NewTokenRatioDecaySteps > 0, "new_token_ratio_decay_steps", c.NewTokenRatioDecaySteps)
	check(c.Policy == PolicyFCFS || c.Policy == PolicyLPM, "schedule_policy (fcfs or lpm)", c.Policy)
	check(c.IdleTickS > 0, "idle tick", c.IdleTickS)
	if err := c.Cost.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
