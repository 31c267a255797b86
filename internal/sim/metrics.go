package sim

import (
	"fmt"
	"net/http"
	"strings"
)

// serverInfo answers GET /get_server_info (and /server_info) in the shape
// of SGLang's: its server arguments merged with the scheduler's info
// (python/sglang/srt/entrypoints/http_server.py, get_server_info), the
// fields a client reads: max_total_num_tokens (the KV pool),
// max_running_requests, chunked_prefill_size, schedule_policy, page_size,
// context_length (as a server started with --context-length reports it;
// null there without it), served_model_name and version.
func (s *Server) handleServerInfo(w http.ResponseWriter, _ *http.Request) {
	l := s.load()
	writeJSON(w, http.StatusOK, map[string]any{
		"context_length":       s.cfg.ContextLength,
		"model_path":           modelName,
		"served_model_name":    modelName,
		"max_total_num_tokens": l.pool,
		"max_running_requests": l.maxRunning,
		"chunked_prefill_size": l.chunk,
		"schedule_policy":      l.policy,
		"page_size":            1,
		"version":              modelName,
		"internal_states":      []map[string]any{{"pp_max_micro_batch_size": l.maxRunning}},
	})
}

// handleMetrics answers GET /metrics in the Prometheus text format with the
// scheduler gauges an SGLang server exports with --enable-metrics
// (python/sglang/srt/metrics/collector.py, SchedulerMetricsCollector:
// sglang:num_running_reqs, sglang:num_queue_reqs, sglang:num_used_tokens,
// sglang:token_usage, sglang:cache_hit_rate, sglang:max_total_num_tokens,
// labelled model_name, engine_type, tp_rank and pp_rank) and, since the
// simulator also speaks vLLM's OpenAI API, vLLM's (vllm/v1/metrics/
// loggers.py: vllm:num_requests_running, vllm:num_requests_waiting,
// vllm:kv_cache_usage_perc, vllm:cache_config_info, labelled model_name and
// engine). The cache hit rate is over every prefill so far (SGLang's is
// over its last prefill batch).
func (s *Server) handleMetrics(w http.ResponseWriter, _ *http.Request) {
	g := s.load()
	usage := g.usage()
	sgl := fmt.Sprintf(`model_name=%q,engine_type="unified",tp_rank="0",pp_rank="0"`, modelName)
	vl := fmt.Sprintf(`model_name=%q,engine="0"`, modelName)
	var b strings.Builder
	gauge := func(name, help, labels string, v float64) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s gauge\n%s{%s} %g\n", name, help, name, name, labels, v)
	}
	gauge("sglang:num_running_reqs", "The number of running requests.", sgl, float64(g.running))
	gauge("sglang:num_used_tokens", "The number of used tokens.", sgl, float64(g.used))
	gauge("sglang:token_usage", "The token usage.", sgl, usage)
	gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", sgl, float64(g.waiting))
	gauge("sglang:cache_hit_rate", "The prefix cache hit rate.", sgl, g.hitRate)
	gauge("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.", sgl, float64(g.pool))
	gauge("vllm:num_requests_running", "Number of requests in model execution batches.", vl, float64(g.running))
	gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", vl, float64(g.waiting))
	gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", vl, usage)
	gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
		fmt.Sprintf(`%s,block_size="%d",num_gpu_blocks="%d"`, vl, blockSize, g.pool/blockSize), 1)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write([]byte(b.String()))
}
