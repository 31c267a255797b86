// Package sim is an inference-server simulator that speaks SGLang's native
// HTTP API (the same JSON field names as SGLang's GenerateReqInput,
// SamplingParams and meta_info), so actloop's SGLang client (pkg/llm) talks to
// it unchanged. It is what `actloop dev`, the benchmarks and the tests run
// instead of a GPU.
//
// Output. Token ids are those of Config.Tokenizer (default the byte-level
// tokenizer of internal/tokenize), prompts are read as ChatML. When
// sampling_params.custom_params.actloop_reply is a string, the output is that
// string's ids followed by <|im_end|>. Otherwise the reply is an unscripted
// mini-swe-agent style trajectory's: its total number of turns (1..MaxTurns,
// long-tailed: 1 + MaxTurns·u³)
// is a hash of Config.Seed and the task prefix (the conversation up to the
// end of its first user message), and turn k (the input's count of
// assistant turns) answers with a text that is a hash of the same and k
// alone: some thought text and a ```bash block running `echo step k`, the
// last turn `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`. What the
// observations say does not change the replies, so the remaining work of a
// trajectory is known in advance: POST /actloop/plan (PlanPath) answers it,
// and GET /get_model_info reports "actloop_simulator": true so a client can
// tell the simulator from a real server. After the reply's <|im_end|>
// the stream continues with <|endoftext|>. Generation stops at the first id in
// stop_token_ids (included in output_ids), at a stop string, or at
// max_new_tokens; there is no implicit end-of-sequence token. Log-probs are
// deterministic values in [-5, 0]. The same request always gets the same
// output, whatever the timing.
//
// Cost model. A request waits in a FIFO queue for one of MaxRunning slots;
// prefill then takes uncached prompt tokens / PrefillTokensPerSec and decoding
// n tokens n / DecodeTokensPerSec × (1 + BatchSlowdown × (running − 1)), with
// running measured when decoding starts. Simulated time is multiplied by
// TimeScale to get wall time (0 answers at once). The prefix cache is paged
// (16-token blocks identified by a hash chained over the blocks before them,
// as vLLM's prefix caching does), holds CacheTokens tokens and evicts least
// recently used blocks, tails first; a prompt's blocks are inserted after its
// prefill and its prompt plus output blocks when it ends.
//
// Context length. Config.ContextLength (default 1<<20) is reported as
// /v1/models' max_model_len and /get_server_info's context_length, and
// /generate and /v1/completions refuse a request that does not fit it with
// a 400 in SGLang's and vLLM's words: an input of that many tokens or more,
// or an input and max_new_tokens of more together.
//
// Tokenizer endpoints. POST /tokenize and /detokenize (and SGLang's
// /v1/tokenize and /v1/detokenize) answer as SGLang and vLLM do
// ({"tokens", "count", "max_model_len"}; {"prompt", "text"}) with
// Config.Tokenizer, so a gen-worker's start-up check compares its own
// tokenization with the simulator's exactly as with a real server.
//
// Control. /abort_request aborts by rid prefix (as SGLang's scheduler
// matches) or all; /pause_generation pauses in abort, in_place or retract mode
// until /continue_generation; /update_weight_version changes the version
// reported in meta_info.weight_version. An aborted request answers at once
// with finish_reason {"type": "abort"} and the tokens generated so far (none
// before prefill or while waiting). A request whose rid is live already is
// refused, as SGLang's TokenizerManager refuses it (400, "Duplicate request
// ID detected: <rid>"; on /v1/completions vLLM's "Request id … already
// running."), and the live one goes on; a rid that has answered serves
// again.
//
// Server model. With Config.Model the cost model above is replaced by the
// iteration-level model of SGLang's continuous batching that the
// virtual-time benchmark runs (internal/batching): one token pool for
// running requests and the prefix cache (prefixes matched in blocks of 16
// ids), admission when a request fits, chunked prefill, retraction, and an
// iteration time calibrated for a named model and GPU. Its iterations run
// on one goroutine, in simulated time scaled by TimeScale (late timers are
// made up by the following iterations), while it has work and generation
// is not paused; it ends when there is none. A retract-mode pause takes
// every request out of the model and queues it again with its output so
// far; /v1/loads reports the model's pool.
//
// The Server is safe for concurrent use. Without a server model it starts
// no goroutines of its own: each request runs on its HTTP handler's
// goroutine, and waits on timers that an abort, a pause or the client going
// away interrupt.
package sim
