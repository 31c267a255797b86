package genworker

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/actloop/actloop/internal/metrics"
)

// Causes of the actloop_aborts_total label.
const (
	abortPreempt = "preempt"
	abortPause   = "pause"
	abortServer  = "server"
	abortCancel  = "cancel"
)

// genMetrics are the histograms and counters the worker updates; the rest
// are read from its tracker at each scrape.
type genMetrics struct {
	step, queueWait, pause prometheus.Histogram
	aborts                 *prometheus.CounterVec
}

func newGenMetrics(replica string) *genMetrics {
	l := prometheus.Labels{"replica": replica}
	return &genMetrics{
		step:      metrics.NewHistogram("actloop_gen_step_seconds", l),
		queueWait: metrics.NewHistogram("actloop_gen_queue_wait_seconds", l, metrics.DispatchBuckets...),
		pause:     metrics.NewHistogram("actloop_pause_seconds", l),
		aborts:    metrics.NewCounterVec("actloop_aborts_total", l, "cause", abortPreempt, abortPause, abortServer, abortCancel),
	}
}

// registerMetrics registers the worker's metrics, labelled with its
// replica, for its run; the Scope unregisters them.
func (w *Worker) registerMetrics() *metrics.Scope {
	reg := metrics.NewScope(w.d.Metrics)
	reg.MustRegister(w.m.step, w.m.queueWait, w.m.pause, w.m.aborts)
	l := prometheus.Labels{"replica": w.cfg.Replica}
	k := w.tracker
	metrics.GaugeFunc(reg, "actloop_slots", l, func() float64 { return float64(w.cfg.Slots) })
	metrics.GaugeFunc(reg, "actloop_dispatch_limit", l, func() float64 { return float64(w.limit()) })
	metrics.GaugeFunc(reg, "actloop_inflight_kv_tokens", l, func() float64 { return float64(k.inFlightKV.Load()) })
	metrics.GaugeFunc(reg, "actloop_slots_busy", l, func() float64 { return float64(k.inFlight.Load()) })
	metrics.GaugeFunc(reg, "actloop_llm_down", l, func() float64 { return metrics.Bool(w.health.isDown()) })
	metrics.GaugeFunc(reg, "actloop_scheduling_mismatch", l, func() float64 { return metrics.Bool(w.sched.err() != nil) })
	for name, v := range map[string]interface{ Load() int64 }{
		"actloop_generated_tokens_total":   &k.generated,
		"actloop_reprefilled_tokens_total": &k.reprefilled,
		"actloop_preemptions_total":        &k.preemptions,
		"actloop_resumed_tokens_total":     &k.resumedTokens,
		"actloop_wasted_tokens_total":      &k.wastedTokens,
	} {
		metrics.CounterFunc(reg, name, l, func() float64 { return float64(v.Load()) })
	}
	return reg
}
