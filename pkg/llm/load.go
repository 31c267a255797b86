package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Load is what an inference server reports of its KV capacity and
// occupancy, from its own endpoints.
type Load struct {
	// CapacityTokens is the KV token pool (SGLang's max_total_num_tokens;
	// vLLM's num_gpu_blocks × block_size); 0 when the server does not say.
	CapacityTokens int
	// Usage is the share of the pool held by running requests
	// (sglang:token_usage, vllm:kv_cache_usage_perc), in [0, 1].
	Usage float64
	// Running and Waiting are the requests running and queued
	// (sglang:num_running_reqs and sglang:num_queue_reqs;
	// vllm:num_requests_running and vllm:num_requests_waiting), summed over
	// the server's data-parallel ranks.
	Running, Waiting int
	// CacheHitRate is the prefix cache's hit rate (sglang:cache_hit_rate;
	// vLLM: prefix-cache hits over queries), -1 when not reported.
	CacheHitRate float64
}

// LoadReader is a Generator whose server reports its load.
type LoadReader interface {
	// Load reads the server's capacity and occupancy now.
	Load(ctx context.Context) (Load, error)
}

var (
	_ LoadReader = (*SGLang)(nil)
	_ LoadReader = (*OpenAI)(nil)
)

// ErrNoMetrics: the server's /metrics lacks the metrics Load needs (an
// SGLang server started without --enable-metrics answers 404).
var ErrNoMetrics = errors.New("the server's /metrics reports no load")

// SGLang's metric names (python/sglang/srt/metrics/collector.py,
// SchedulerMetricsCollector, v0.5.6.post2) and vLLM's (vllm/v1/metrics/
// loggers.py, PrometheusStatLogger).
const (
	MetricSGLangTokenUsage   = "sglang:token_usage"
	MetricSGLangRunning      = "sglang:num_running_reqs"
	MetricSGLangQueued       = "sglang:num_queue_reqs"
	MetricSGLangCacheHitRate = "sglang:cache_hit_rate"
	MetricSGLangMaxTokens    = "sglang:max_total_num_tokens"

	MetricVLLMKVUsage     = "vllm:kv_cache_usage_perc"
	MetricVLLMRunning     = "vllm:num_requests_running"
	MetricVLLMWaiting     = "vllm:num_requests_waiting"
	MetricVLLMCacheConfig = "vllm:cache_config_info"
	MetricVLLMPrefixHits  = "vllm:prefix_cache_hits_total"
	MetricVLLMPrefixQuery = "vllm:prefix_cache_queries_total"
)

// Load implements LoadReader with GET /metrics (SGLang's scheduler gauges)
// and, when they lack the pool's size (servers before
// sglang:max_total_num_tokens), GET /get_server_info once.
func (c *SGLang) Load(ctx context.Context) (Load, error) {
	fams, err := c.metrics(ctx)
	if err != nil {
		return Load{}, err
	}
	if fams[MetricSGLangTokenUsage] == nil && fams[MetricSGLangRunning] == nil {
		return Load{}, fmt.Errorf("load: %w: no %s or %s", ErrNoMetrics, MetricSGLangTokenUsage, MetricSGLangRunning)
	}
	l := Load{Usage: gaugeMax(fams[MetricSGLangTokenUsage]), Running: int(gaugeSum(fams[MetricSGLangRunning])),
		Waiting: int(gaugeSum(fams[MetricSGLangQueued])), CacheHitRate: -1,
		CapacityTokens: int(gaugeSum(fams[MetricSGLangMaxTokens]))}
	if f := fams[MetricSGLangCacheHitRate]; f != nil {
		l.CacheHitRate = gaugeMax(f)
	}
	if l.CapacityTokens == 0 {
		if l.CapacityTokens, err = c.serverCapacity(ctx); err != nil {
			return Load{}, err
		}
	}
	return l, nil
}

// serverCapacity is max_total_num_tokens from GET /get_server_info, read
// once: the pool is sized when the server starts (0 when it does not say).
func (c *SGLang) serverCapacity(ctx context.Context) (int, error) {
	if n := c.capacity.Load(); n > 0 {
		return int(n), nil
	}
	b, err := c.get(ctx, "/get_server_info")
	if err != nil {
		return 0, fmt.Errorf("load: %w", err)
	}
	var info struct {
		MaxTotalNumTokens *float64 `json:"max_total_num_tokens"`
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return 0, fmt.Errorf("load: /get_server_info: %w", err)
	}
	if info.MaxTotalNumTokens == nil || *info.MaxTotalNumTokens <= 0 {
		return 0, nil
	}
	c.capacity.Store(int64(*info.MaxTotalNumTokens))
	return int(*info.MaxTotalNumTokens), nil
}

// Load implements LoadReader with GET /metrics (vLLM's gauges; the pool's
// size from vllm:cache_config_info's num_gpu_blocks and block_size labels).
func (c *OpenAI) Load(ctx context.Context) (Load, error) {
	fams, err := c.metrics(ctx)
	if err != nil {
		return Load{}, err
	}
	if fams[MetricVLLMKVUsage] == nil && fams[MetricVLLMRunning] == nil {
		return Load{}, fmt.Errorf("load: %w: no %s or %s", ErrNoMetrics, MetricVLLMKVUsage, MetricVLLMRunning)
	}
	l := Load{Usage: gaugeMax(fams[MetricVLLMKVUsage]), Running: int(gaugeSum(fams[MetricVLLMRunning])),
		Waiting: int(gaugeSum(fams[MetricVLLMWaiting])), CacheHitRate: -1}
	if f := fams[MetricVLLMCacheConfig]; f != nil && len(f.Metric) > 0 {
		labels := map[string]string{}
		for _, lp := range f.Metric[0].Label {
			labels[lp.GetName()] = lp.GetValue()
		}
		blocks, err1 := strconv.Atoi(labels["num_gpu_blocks"])
		size, err2 := strconv.Atoi(labels["block_size"])
		if err1 == nil && err2 == nil && blocks > 0 && size > 0 {
			l.CapacityTokens = blocks * size
		}
	}
	if hits, queries := counterSum(fams[MetricVLLMPrefixHits]), counterSum(fams[MetricVLLMPrefixQuery]); queries > 0 {
		l.CacheHitRate = hits / queries
	}
	return l, nil
}

// metrics reads and parses GET /metrics (the Prometheus text format).
func (c *httpCore) metrics(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	b, err := c.get(ctx, "/metrics")
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	fams, err := ParseMetrics(b)
	if err != nil {
		return nil, fmt.Errorf("load: /metrics: %w", err)
	}
	return fams, nil
}

// get is GET path once, under the control timeout.
func (c *httpCore) get(ctx context.Context, path string) ([]byte, error) {
	ctx, cancel := withDefaultTimeout(ctx, controlTimeout)
	defer cancel()
	return c.once(ctx, http.MethodGet, path, nil)
}

// ParseMetrics parses Prometheus text exposition (what /metrics serves),
// metric names as the legacy scheme allows them (with colons, as SGLang's
// and vLLM's are).
func ParseMetrics(b []byte) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.LegacyValidation)
	return p.TextToMetricFamilies(bytes.NewReader(b))
}

// gaugeSum is the sum of a gauge family's finite values (0 for nil).
func gaugeSum(f *dto.MetricFamily) float64 {
	s := 0.0
	for _, m := range metricsOf(f) {
		if v := m.GetGauge().GetValue(); finite(v) {
			s += v
		}
	}
	return s
}

// gaugeMax is the largest finite value of a gauge family (0 for nil).
func gaugeMax(f *dto.MetricFamily) float64 {
	best := 0.0
	for _, m := range metricsOf(f) {
		if v := m.GetGauge().GetValue(); finite(v) {
			best = max(best, v)
		}
	}
	return best
}

// counterSum is the sum of a counter family's finite values (0 for nil).
func counterSum(f *dto.MetricFamily) float64 {
	s := 0.0
	for _, m := range metricsOf(f) {
		if v := m.GetCounter().GetValue(); finite(v) {
			s += v
		}
	}
	return s
}

func metricsOf(f *dto.MetricFamily) []*dto.Metric {
	if f == nil {
		return nil
	}
	return f.Metric
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
