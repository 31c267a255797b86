// Package llm is actloop's interface to inference servers: one Generator
// interface (Generate one completion from token ids, Abort one by request id)
// and its backends. SGLang is the native SGLang client; the simulator in
// internal/sim speaks the same HTTP API, so it is reached through SGLang too. The
// conformance suite in llm/llmtest runs against every backend.
//
// Semantics for callers:
//
//   - Token ids in, token ids and log-probs out: Result.OutputIDs are kept
//     exactly as the server returned them (the stop token included), with one
//     log-prob per id.
//   - A request id (RID) is 32 lower-case hex digits (NewRID). SGLang's
//     /abort_request matches rids by prefix, so fixed-length, prefix-free ids
//     are what keep an abort from hitting a neighbour. A resumed generation
//     keeps its rid.
//   - An aborted generation is not an error: Generate returns a Result whose
//     Finish.Type is FinishAbort with whatever tokens were generated, possibly
//     none (an abort that came before prefill).
//   - Errors: *HTTPError for a non-2xx answer; ErrBadResponse for an answer
//     that does not decode or is inconsistent (the message names the field);
//     ErrInvalidRequest for a request that was never sent. Temporary reports
//     whether trying again later may succeed (connection errors, 5xx,
//     deadlines), which is how a consumer picks nak over fail.
//   - Retries: SGLang retries transient failures itself (connection errors,
//     5xx; never 4xx), with exponential back-off and full jitter, under the
//     same rid. The output is taken only from the attempt that answered, so a
//     retry costs GPU time, not correctness; but a retry after a connection
//     lost mid-request can meet the first attempt still running under the
//     same rid (SGLang aborts a non-streamed request whose client went away
//     when it next checks, within seconds).
//   - Load (LoadReader, both backends) reads the server's KV capacity and
//     occupancy from its own endpoints, under the servers' metric names:
//     SGLang's /metrics (sglang:token_usage, sglang:num_running_reqs,
//     sglang:num_queue_reqs, sglang:cache_hit_rate,
//     sglang:max_total_num_tokens; the server must run with
//     --enable-metrics) and /get_server_info (max_total_num_tokens); vLLM's
//     /metrics (vllm:kv_cache_usage_perc, vllm:num_requests_running,
//     vllm:num_requests_waiting, vllm:cache_config_info). One call, no
//     retries; ErrNoMetrics when the names are missing.
//   - ContextLength (ContextLengthReader, both backends) reads the model's
//     context length: /v1/models' max_model_len (both servers), on SGLang
//     failing that /get_server_info's context_length; 0 when the server
//     does not say. A generation the server refuses because its input and
//     max_new_tokens do not fit the context returns an error that matches
//     ErrContextLength (errors.Is); it is not Temporary.
//   - Tokenize (Tokenizer, both backends and ServerTokenizer) has the server
//     tokenize text with its own tokenizer: POST /tokenize with prompt,
//     add_special_tokens (and model, when the OpenAI client names one),
//     reading tokens from the answer, as SGLang and vLLM serve it. A server
//     without the endpoint (404) answers an error that matches
//     ErrNoTokenize.
package llm
