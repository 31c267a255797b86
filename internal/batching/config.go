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

	// KVBytes is the bytes of KV one token takes (--kv-cache-dtype:
	// KVBytesPerToken in bf16, half of it in fp8; WithKVDtype).
	KVBytes int
	// The hierarchical cache (--enable-hierarchical-cache; WithHiCache):
	// HostTokens is the host memory pool in tokens (0: off), WritePolicy
	// when a prefix is written there (--hicache-write-policy), and
	// HostLoadGBps the host-to-device copy rate, in GB/s, at which a
	// prefix held only there is loaded back.
	HostTokens   int
	WritePolicy  string
	HostLoadGBps float64

	// TP is the tensor parallel degree: the GPUs one server runs on (0
	// counts as 1). GPU-hours count it.
	TP int
}

// GPUs is the GPUs one server runs on.
func (c Config) GPUs() int { return max(c.TP, 1) }

// Write policies of the hierarchical cache (--hicache-write-policy; read in
// python/sglang/srt/mem_cache/hiradix_cache.py, HiRadixCache.inc_hit_count
// and evict).
const (
	// WriteThrough writes a prefix to host memory when it joins the cache
	// (write_through_threshold 1); SGLang's default.
	WriteThrough = "write_through"
	// WriteThroughSelective writes it once it has been hit SelectiveHits
	// times.
	WriteThroughSelective = "write_through_selective"
	// WriteBack writes it only when it is evicted from the device.
	WriteBack = "write_back"
)

// SelectiveHits is write_through_selective's write_through_threshold: the
// inserts through a node (inc_hit_count) before it is written to host
// memory (2 in newer versions of SGLang's hiradix_cache.py, 3 in older
// ones).
const SelectiveHits = 2

// LoadBackThreshold is HiRadixCache's load_back_threshold: a prefix held
// only in host memory shorter than this is computed again rather than
// loaded.
const LoadBackThreshold = 10

// DefaultHiCacheRatio is --hicache-ratio's default (server_args.py): the
// host pool is twice the device pool.
const DefaultHiCacheRatio = 2.0

// Host-to-device copy rates, GB/s, of a x16 link. PCIe 4.0 signals 16
// GT/s a lane and PCIe 5.0 32 GT/s, with 128b/130b encoding: 31.5 and 63
// GB/s a direction. Pinned-memory copies reach about 80 % of that; these are
// 0.8 × the link's rate, an assumption, not a measurement.
const (
	PCIeGen4GBps = 25.0 // A100 (PCIe 4.0)
	PCIeGen5GBps = 50.0 // H100 (PCIe 5.0)
)

// LoadSeconds is how long n tokens of KV take to copy from host memory to
// the device.
func (c Config) LoadSeconds(n int) float64 {
	return float64(n) * float64(c.KVBytes) / (c.HostLoadGBps * 1e9)
}

// WithHiCache is c with SGLang's hierarchical cache on: a host pool of
// ratio × the device pool's tokens (--hicache-ratio), or, when sizeGB > 0,
// of sizeGB × 10⁹ bytes at KVBytes a token (--hicache-size, which wins;
// memory_pool_host.py, HostKVCache), the write policy (--hicache-write-policy,
// "" for WriteThrough), and loads at gbps (0: PCIeGen4GBps).
func (c Config) WithHiCache(ratio, sizeGB float64, policy string, gbps float64) (Config, error) {
	c.HostTokens = int(ratio * float64(c.MaxTotalTokens))
	if sizeGB > 0 {
		c.HostTokens = int(sizeGB * 1e9 / float64(c.KVBytes))
	}
	if policy == "" {
		policy = WriteThrough
	}
	if gbps == 0 {
		gbps = PCIeGen4GBps
	}
	c.WritePolicy, c.HostLoadGBps = policy, gbps
	if c.HostTokens <= c.MaxTotalTokens {
		// SGLang asserts it (HostKVCache: "The host memory should be larger
		// than the device memory"): a host copy of every device node must fit.
		return c, fmt.Errorf("server model: hierarchical cache: host pool of %d tokens is not larger than the device pool of %d", c.HostTokens, c.MaxTotalTokens)
	}
	return c, c.Validate()
}

// KV cache dtypes (--kv-cache-dtype).
const (
	KVDtypeAuto = "auto"     // the model's dtype: bf16 here
	KVDtypeFP8  = "fp8_e4m3" // one byte an element
)

// WithKVDtype is c with its KV cache in dtype: in fp8_e4m3 (or fp8_e5m2) a
// token's KV takes half the bytes of bf16, so the same memory holds twice
// the tokens (max_total_num_tokens is the memory left for KV over the bytes
// a token takes, model_runner.py's profile_max_num_token), and the request
// pool grows with it as DefaultConfig derives it. The cost model is left
// as it is: it was fitted to bf16 profiles, so decode's reading of the KV
// is not made cheaper here.
func (c Config) WithKVDtype(dtype string) (Config, error) {
	switch dtype {
	case "", KVDtypeAuto, "bf16", "bfloat16":
		return c, nil
	case KVDtypeFP8, "fp8_e5m2":
	default:
		return c, fmt.Errorf("server model: kv-cache-dtype %q: want auto or %s", dtype, KVDtypeFP8)
	}
	c.KVBytes /= 2
	c.MaxTotalTokens *= 2
	c.MaxRunning = RequestPool(c.MaxTotalTokens, DefaultContextLen)
	return c, c.Validate()
}

// DefaultContextLen is Llama-3.1-8B's context length.
const DefaultContextLen = 131_072

// RequestPool is max_running_requests for a pool of pool tokens and a
// context length: min(pool / 2, min(max(pool / contextLen × 512, 2048),
// 4096)), as DefaultConfig explains.
func RequestPool(pool, contextLen int) int {
	return min(pool/2, min(max(pool*512/contextLen, 2048), 4096))
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
		KVBytes:                 KVBytesPerToken,
		WritePolicy:             WriteThrough,
		HostLoadGBps:            PCIeGen4GBps,
	}
}

// CodeLlama34BKVBytesPerGPU is the bytes of KV one token takes on each GPU
// of CodeLlama-34B in bf16 at tensor parallel 2: 48 layers × 4 of its 8 KV
// heads × 128 dims × 2 (K and V) × 2 bytes (196,608 bytes over both GPUs).
const CodeLlama34BKVBytesPerGPU = 48 * 4 * 128 * 2 * 2

// H100CodeLlama34BTP2Config is SGLang v0.5.6.post2's configuration for
// CodeLlama-34B (bf16) on two H100 80GB, tensor parallel 2 (--tp 2), with
// the limits DefaultConfig has, the cost model H100CodeLlama34BTP2 and a
// PCIe 5.0 host link:
//
//   - max_total_num_tokens: mem_fraction_static = round((81,559 MiB −
//     reserved) / 81,559 MiB, 3) with reserved = 512 + max(chunked_prefill_size,
//     2048) × 1.5 + cuda_graph_max_bs × 2 + tp_size × pp_size / 8 × 1024 =
//     512 + 12,288 + 512 + 256 = 13,568 MiB (server_args.py,
//     _handle_gpu_memory_settings; the 10 GiB floor does not bind;
//     cuda_graph_max_bs 256 as in DefaultConfig's 13,440 MiB at TP 1,
//     assumed the same at TP 2), so 0.834
//     of each card's 79.65 GiB, 66.43 GiB. Each GPU holds half of the
//     weights (33.74 billion parameters × 2 bytes ÷ 2 = 31.43 GiB) and about
//     0.5 GiB of activations; the 34.50 GiB left, at
//     CodeLlama34BKVBytesPerGPU (96 KiB) a token, is about 377,000 tokens.
//     Under tensor parallelism every GPU holds its heads of every token, so
//     the pool is the same tokens on each.
//   - max_running_requests as DefaultConfig derives it, at a 131,072-token
//     context: 2048. (CodeLlama's config says 16,384; the RL scenarios run
//     longer trajectories, which needs --context-length, as with RoPE θ 10⁶
//     CodeLlama was trained to extrapolate to 100k.)
//   - chunked_prefill_size, max_prefill_tokens and the new_token_ratio
//     schedule as DefaultConfig's.
func H100CodeLlama34BTP2Config() Config {
	c := DefaultConfig()
	c.MaxTotalTokens = 377_000
	c.MaxRunning = RequestPool(c.MaxTotalTokens, DefaultContextLen)
	c.Cost = H100CodeLlama34BTP2
	c.KVBytes = CodeLlama34BKVBytesPerGPU
	c.HostLoadGBps = PCIeGen5GBps
	c.TP = 2
	return c
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
	check(c.HostTokens >= 0, "hicache host tokens", c.HostTokens)
	check(c.TP >= 0, "tensor parallel degree", c.TP)
	if c.HostTokens > 0 {
		check(c.WritePolicy == WriteThrough || c.WritePolicy == WriteThroughSelective || c.WritePolicy == WriteBack,
			"hicache-write-policy (write_through, write_through_selective or write_back)", c.WritePolicy)
		check(c.HostLoadGBps > 0, "hicache host-to-device GB/s", c.HostLoadGBps)
		check(c.KVBytes > 0, "KV bytes per token", c.KVBytes)
	}
	if err := c.Cost.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
