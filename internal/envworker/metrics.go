package envworker

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/actloop/actloop/internal/metrics"
	"github.com/actloop/actloop/pkg/schema"
)

// envMetrics are what the worker updates as it handles steps.
type envMetrics struct {
	busy                        atomic.Int64
	step                        *prometheus.HistogramVec // by kind
	startRetries, startFailures prometheus.Counter
}

func newEnvMetrics() *envMetrics {
	return &envMetrics{step: metrics.NewHistogramVec("actloop_env_step_seconds", "kind",
		string(schema.EnvStart), string(schema.EnvExec), string(schema.EnvFinish), string(schema.EnvClose)),
		startRetries:  metrics.NewCounter("actloop_sandbox_start_retries_total", nil),
		startFailures: metrics.NewCounter("actloop_sandbox_start_failures_total", nil)}
}

// observe counts a step of kind as running until the returned func is
// called, which records its time.
func (m *envMetrics) observe(kind schema.EnvKind) func() {
	m.busy.Add(1)
	start := time.Now()
	return func() {
		m.busy.Add(-1)
		m.step.WithLabelValues(string(kind)).Observe(time.Since(start).Seconds())
	}
}

// registerMetrics registers the worker's metrics for its run; the Scope
// unregisters them.
func (w *Worker) registerMetrics() *metrics.Scope {
	reg := metrics.NewScope(w.d.Metrics)
	reg.MustRegister(w.m.step, w.m.startRetries, w.m.startFailures)
	metrics.GaugeFunc(reg, "actloop_env_slots", nil, func() float64 { return float64(w.cfg.Slots) })
	metrics.GaugeFunc(reg, "actloop_env_slots_busy", nil, func() float64 { return float64(w.m.busy.Load()) })
	metrics.CounterFunc(reg, "actloop_sandbox_replays_total", nil, func() float64 { return float64(w.replays.Load()) })
	return reg
}
