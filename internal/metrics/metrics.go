// Package metrics defines the Prometheus metrics the services export on
// /metrics. Every name is in Catalogue, with the service that exports it, so
// the Grafana dashboard under deploy/grafana can be checked against it.
// Each service has its own registry (service.Deps.Metrics); the label
// values of every vector are known when it is made, so every series shows
// from the first scrape, at 0.
package metrics

import (
	"net/http"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/actloop/actloop/pkg/schema"
)

// Metric describes one exported metric.
type Metric struct {
	Name, Help string
	Type       string   // counter, gauge or histogram
	Services   []string // the services exporting it; "all" for every one
	Labels     []string
}

// Services of the catalogue.
const (
	All         = "all"
	Coordinator = "coordinator"
	GenWorker   = "gen-worker"
	EnvWorker   = "env-worker"
	Gateway     = "gateway"
)

// Catalogue is every metric actloop exports besides Go's, the process's and
// the handler's count of failed scrapes (Handler).
var Catalogue = []Metric{
	{"actloop_dlq_total", "Messages sent to the dead-letter subject.", "counter", []string{All}, nil},

	{"actloop_trajectories_active", "Trajectories admitted and not yet finished.", "gauge", []string{Coordinator}, nil},
	{"actloop_admission_limit", "The adaptive admission limit (trajectories active at once).", "gauge", []string{Coordinator}, nil},
	{"actloop_samples_waiting", "Samples published and not yet admitted.", "gauge", []string{Coordinator}, nil},
	{"actloop_replica_up", "1 while the replica's gen-workers heartbeat, else 0.", "gauge", []string{Coordinator}, []string{"replica"}},
	{"actloop_replica_trajectories", "Active trajectories assigned to the replica.", "gauge", []string{Coordinator}, []string{"replica"}},
	{"actloop_queue_depth", "Messages waiting on a work subject: not yet delivered, or delivered and not acknowledged.", "gauge", []string{Coordinator}, []string{"subject"}},
	{"actloop_queue_oldest_age_seconds", "Age of the oldest unacknowledged message on a work subject; 0 when none.", "gauge", []string{Coordinator}, []string{"subject"}},
	{"actloop_results_total", "Results of training samples seen, by status (" + strings.Join(schema.Statuses, ", ") + ").", "counter", []string{Coordinator}, []string{"status"}},
	{"actloop_validation_results_total", "Results of validation samples (purpose validation) seen, by status.", "counter", []string{Coordinator}, []string{"status"}},
	{"actloop_fallbacks_total", "Results with status failed or fallback, by reason (" + strings.Join(FallbackReasons, ", ") + ").", "counter", []string{Coordinator}, []string{"reason"}},
	{"actloop_trajectory_seconds", "Time from admission to result.", "histogram", []string{Coordinator}, nil},
	{"actloop_staleness_versions", "Weight versions between a completed trajectory's oldest generated token and the version current at its result.", "histogram", []string{Coordinator}, nil},
	{"actloop_moved_total", "Trajectories moved off replicas or env-workers that went away.", "counter", []string{Coordinator}, []string{"from"}},
	{"actloop_republished_total", "Work messages published again for lack of progress.", "counter", []string{Coordinator}, nil},
	{"actloop_readmitted_total", "Trajectories started again from their sample after their Redis state was lost.", "counter", []string{Coordinator}, nil},
	{"actloop_paused", "1 while generation is paused for a weight sync.", "gauge", []string{Coordinator}, nil},
	{"actloop_weight_version", "The weight version in the control state.", "gauge", []string{Coordinator}, nil},

	{"actloop_slots", "Generation slots of the replica on this gen-worker.", "gauge", []string{GenWorker}, []string{"replica"}},
	{"actloop_slots_busy", "Generations running now.", "gauge", []string{GenWorker}, []string{"replica"}},
	{"actloop_dispatch_limit", "Generations the worker may run now: its slots, or more while they fit in ACTLOOP_KV_BUDGET of the server's pool.", "gauge", []string{GenWorker}, []string{"replica"}},
	{"actloop_inflight_kv_tokens", "The running generations' inputs and output reserves, in tokens.", "gauge", []string{GenWorker}, []string{"replica"}},
	{"actloop_gen_step_seconds", "Time of one generation call on the inference server.", "histogram", []string{GenWorker}, []string{"replica"}},
	{"actloop_gen_queue_wait_seconds", "Time from a gen step's publish to its generation's start.", "histogram", []string{GenWorker}, []string{"replica"}},
	{"actloop_generated_tokens_total", "Tokens generated.", "counter", []string{GenWorker}, []string{"replica"}},
	{"actloop_reprefilled_tokens_total", "Prompt tokens the server prefilled again (evicted from its prefix cache).", "counter", []string{GenWorker}, []string{"replica"}},
	{"actloop_preemptions_total", "Low-priority generations preempted for high-priority ones.", "counter", []string{GenWorker}, []string{"replica"}},
	{"actloop_aborts_total", "Generations aborted, by cause (preempt, pause, server, cancel).", "counter", []string{GenWorker}, []string{"replica", "cause"}},
	{"actloop_resumed_tokens_total", "Partial output kept across a preemption or pause and continued.", "counter", []string{GenWorker}, []string{"replica"}},
	{"actloop_wasted_tokens_total", "Generated tokens thrown away (generations the server aborted on its own).", "counter", []string{GenWorker}, []string{"replica"}},
	{"actloop_pause_seconds", "Time from a pause to every generation of this worker having returned.", "histogram", []string{GenWorker}, []string{"replica"}},
	{"actloop_llm_down", "1 while the inference server is marked down.", "gauge", []string{GenWorker}, []string{"replica"}},

	{"actloop_env_slots", "Environment-step slots of this env-worker.", "gauge", []string{EnvWorker}, nil},
	{"actloop_env_slots_busy", "Environment steps running now.", "gauge", []string{EnvWorker}, nil},
	{"actloop_env_step_seconds", "Time of one environment step, by kind (start, exec, finish, close).", "histogram", []string{EnvWorker}, []string{"kind"}},
	{"actloop_sandbox_replays_total", "Lost sandboxes rebuilt by replaying their commands.", "counter", []string{EnvWorker}, nil},
	{"actloop_sandbox_start_retries_total", "Sandbox creations tried again after a failure a retry may fix.", "counter", []string{EnvWorker}, nil},
	{"actloop_sandbox_start_failures_total", "Sandbox creations given up on (the trajectory ends with a fallback).", "counter", []string{EnvWorker}, nil},

	{"actloop_gateway_requests_total", "HTTP trainer API requests answered, by route (method and path) and status code.", "counter", []string{Gateway}, []string{"route", "code"}},
	{"actloop_gateway_request_seconds", "Time to answer an HTTP trainer API request, by route (a read of results or groups waits up to its wait_ms).", "histogram", []string{Gateway}, []string{"route"}},
}

// FallbackReasons are the reason label values of actloop_fallbacks_total.
var FallbackReasons = []string{"rejected", "step_failed", "stalled", "lost", "other"}

// FallbackReason classifies a fallback result's reason text.
func FallbackReason(reason string) string {
	switch {
	case strings.HasPrefix(reason, "rejected:"):
		return "rejected"
	case strings.HasPrefix(reason, "step "):
		return "step_failed"
	case strings.HasPrefix(reason, "stalled:"):
		return "stalled"
	case strings.HasPrefix(reason, "lost:"):
		return "lost"
	}
	return "other"
}

// Names returns the catalogue's metric names.
func Names() map[string]Metric {
	m := make(map[string]Metric, len(Catalogue))
	for _, c := range Catalogue {
		m[c.Name] = c
	}
	return m
}

// NewRegistry returns a registry with Go's and the process's collectors.
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// Handler serves reg in Prometheus's text format; nil serves nothing but
// an empty page. A collector that fails (one that sends an invalid metric,
// such as a gauge whose source could not be read) does not fail the
// scrape: the metrics gathered are served all the same, and the failure is
// counted in promhttp_metric_handler_errors_total{cause="gathering"}, which
// the handler registers on reg.
func Handler(reg *prometheus.Registry) http.Handler {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, Registry: reg})
}

// Buckets of the latency histograms, in seconds: 5 ms to about 20 minutes.
var Buckets = prometheus.ExponentialBuckets(0.005, 2.5, 14)

// DispatchBuckets are finer, for a latency measured in milliseconds
// (a gen step's wait for its generation to start): 0.25 ms to about 30
// minutes, each bucket 1.5 times the last, so HistogramQuantile is within
// about a quarter of the truth.
var DispatchBuckets = prometheus.ExponentialBuckets(0.00025, 1.5, 40)

// HistogramQuantile estimates the q-quantile of what h observed, as
// Prometheus's histogram_quantile does: linearly within the bucket that
// holds it (the first bucket from 0; past the last bound, that bound).
// 0 before any observation.
func HistogramQuantile(h prometheus.Histogram, q float64) float64 {
	var m dto.Metric
	if h.Write(&m) != nil || m.Histogram == nil || m.Histogram.GetSampleCount() == 0 {
		return 0
	}
	hist := m.Histogram
	rank := q * float64(hist.GetSampleCount())
	lower, below := 0.0, uint64(0)
	for _, b := range hist.GetBucket() {
		upper, count := b.GetUpperBound(), b.GetCumulativeCount()
		if float64(count) >= rank {
			if count == below {
				return upper
			}
			return lower + (upper-lower)*(rank-float64(below))/float64(count-below)
		}
		lower, below = upper, count
	}
	return lower
}

func lookup(name string) Metric {
	for _, c := range Catalogue {
		if c.Name == name {
			return c
		}
	}
	panic("metrics: " + name + " is not in the catalogue")
}

// NewCounter makes the catalogue's counter name.
func NewCounter(name string, constLabels prometheus.Labels) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: lookup(name).Help, ConstLabels: constLabels})
}

// NewCounterVec makes the catalogue's counter vector name, with a series
// for each of values (of its one variable label) at 0.
func NewCounterVec(name string, constLabels prometheus.Labels, label string, values ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: lookup(name).Help, ConstLabels: constLabels}, []string{label})
	for _, v := range values {
		c.WithLabelValues(v)
	}
	return c
}

// CounterVec is NewCounterVec, registered on reg.
func CounterVec(reg prometheus.Registerer, name string, constLabels prometheus.Labels, label string, values ...string) *prometheus.CounterVec {
	c := NewCounterVec(name, constLabels, label, values...)
	reg.MustRegister(c)
	return c
}

// CounterFunc registers the counter name read from f at each scrape.
func CounterFunc(reg prometheus.Registerer, name string, constLabels prometheus.Labels, f func() float64) {
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: lookup(name).Help, ConstLabels: constLabels}, f))
}

// GaugeFunc registers the gauge name read from f at each scrape.
func GaugeFunc(reg prometheus.Registerer, name string, constLabels prometheus.Labels, f func() float64) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: lookup(name).Help, ConstLabels: constLabels}, f))
}

// NewHistogram makes the catalogue's histogram name with Buckets, or
// buckets when given.
func NewHistogram(name string, constLabels prometheus.Labels, buckets ...float64) prometheus.Histogram {
	if buckets == nil {
		buckets = Buckets
	}
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: lookup(name).Help, ConstLabels: constLabels, Buckets: buckets})
}

// Histogram is NewHistogram, registered on reg.
func Histogram(reg prometheus.Registerer, name string, constLabels prometheus.Labels, buckets ...float64) prometheus.Histogram {
	h := NewHistogram(name, constLabels, buckets...)
	reg.MustRegister(h)
	return h
}

// NewHistogramVec makes the histogram vector name, with a series for each
// of values.
func NewHistogramVec(name string, label string, values ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: lookup(name).Help, Buckets: Buckets}, []string{label})
	for _, v := range values {
		h.WithLabelValues(v)
	}
	return h
}

// Bool is 1 for true, 0 for false.
func Bool(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Scope registers collectors on a registry and unregisters them all at
// once: for what lives shorter than the process, such as a coordinator's
// term as leader.
type Scope struct {
	prometheus.Registerer
	mu sync.Mutex
	cs []prometheus.Collector
}

// NewScope returns a Scope over reg.
func NewScope(reg prometheus.Registerer) *Scope { return &Scope{Registerer: reg} }

// Register implements prometheus.Registerer.
func (s *Scope) Register(c prometheus.Collector) error {
	if err := s.Registerer.Register(c); err != nil {
		return err
	}
	s.mu.Lock()
	s.cs = append(s.cs, c)
	s.mu.Unlock()
	return nil
}

// MustRegister implements prometheus.Registerer.
func (s *Scope) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := s.Register(c); err != nil {
			panic(err)
		}
	}
}

// Close unregisters everything registered through s.
func (s *Scope) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.cs {
		s.Registerer.Unregister(c)
	}
	s.cs = nil
}
