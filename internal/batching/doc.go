// Package batching is an iteration-level model of one inference server's
// continuous batching as SGLang runs it, in virtual time: the server model
// of actloop's virtual-time scheduling benchmark (internal/virtual). It
// does no I/O and keeps no clock: the caller forms an iteration at a time
// (Form), learns when it ends, and applies it then (Finish); Submit and
// Abort come between.
//
// What it models, with where each rule was read (SGLang v0.5.6.post2,
// python/sglang/srt/):
//
//   - One token pool of max_total_num_tokens for running requests' KV and
//     the radix cache (mem_cache/radix_cache.py). Running requests lock
//     their prefix; eviction frees unlocked leaves, least recently used
//     first, whole. A request's input is a chain of Segments, so a group's
//     shared prompt and a trajectory's growing context match as they would
//     token by token.
//   - Admission (managers/schedule_policy.py, PrefillAdder): a waiting
//     request is admitted when its uncached input plus min(max_new_tokens,
//     4096) fits in available + evictable tokens less what running
//     requests reserve, min(max_new_tokens − output, 4096) ×
//     new_token_ratio each; the adder stops at the first request refused
//     (no skipping ahead), at max_running_requests, or when the chunk
//     budget is spent.
//   - Chunked prefill: at most chunked_prefill_size tokens of prefill per
//     iteration; a longer input is prefilled in chunks by one request at a
//     time, which goes first in the next iteration. Each chunk joins the
//     cache (cache_unfinished_req). A prefill iteration runs alone: mixed
//     chunks (--enable-mixed-chunk) are off by default.
//   - Decode: every running request decodes a token per iteration; when
//     the pool (after evicting) cannot hold one more token each, requests
//     are retracted (retract_decode): fewest output tokens first, ties to
//     the longest input; their decoded KV is freed, their prefix stays
//     cached, and they go to the back of the queue to re-prefill input and
//     output so far. new_token_ratio decays from 0.7 to 0.098 over 600
//     decode steps, and after a retraction is set from the remaining
//     requests' progress.
//   - The waiting queue in arrival order (fcfs, SGLang's default
//     schedule_policy since v0.4.3.post3) or by longest cached prefix (lpm,
//     falling back to fcfs past 128 waiting).
//   - Iteration time from a Cost: a linear function of the prefill tokens,
//     the prefill attention's query-key pairs, the decode batch and the KV
//     tokens the decodes read, fitted (Fit) to Vidur's operator profiles:
//     of Llama-3-8B on an A100 80GB (A100Llama8B, DefaultConfig) and of
//     CodeLlama-34B on two H100 80GB at tensor parallel 2
//     (H100CodeLlama34BTP2, H100CodeLlama34BTP2Config; its attention
//     scaled from the A100 profile), calib/SOURCE.md.
//
// Options beside the defaults (Config.WithHiCache, Config.WithKVDtype):
//
//   - The hierarchical cache (--enable-hierarchical-cache;
//     mem_cache/hiradix_cache.py, mem_cache/memory_pool_host.py,
//     managers/cache_controller.py): a host pool of --hicache-ratio × the
//     device pool's tokens (or --hicache-size GB). A node is written there
//     when cached (write_through), once hit twice (write_through_selective)
//     or when evicted (write_back); a node evicted from the device with a
//     host copy stays in the tree in host memory only, and host memory
//     frees such nodes, least recently used first, when a write needs
//     room. A request whose prefix runs on into host memory has it loaded
//     back before its prefill (init_load_back, at least 10 tokens): the
//     tokens need device memory but no chunk budget (PrefillAdder's
//     real_input_tokens), and the iteration takes at least their bytes
//     over HostLoadGBps. A flush clears both pools.
//   - An FP8 KV cache (--kv-cache-dtype fp8_e4m3): half the bytes a token,
//     twice the tokens in the same memory.
//
// Left out: overlap scheduling (it hides CPU time, which the cost model
// does not charge), speculative decoding, paged KV with pages above one
// token, priority scheduling, and the prefill-time cap of max_prefill_tokens
// beyond its one-large-request rule.
package batching
