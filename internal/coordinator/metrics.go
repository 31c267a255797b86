package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/metrics"
	"github.com/actloop/actloop/pkg/schema"
)

// coordMetrics are the coordinator's counters and histograms; its gauges
// are read at each scrape by the collector.
type coordMetrics struct {
	results    *prometheus.CounterVec
	validation *prometheus.CounterVec
	fallbacks  *prometheus.CounterVec
	duration   prometheus.Histogram
	staleness  prometheus.Histogram
	reward     prometheus.Histogram
}

// registerMetrics registers the coordinator's metrics for its run; the
// returned Scope unregisters them when the run ends (a standby exports
// none, and a new term registers them again).
func (c *Coordinator) registerMetrics() *metrics.Scope {
	reg := metrics.NewScope(c.d.Metrics)
	c.m = &coordMetrics{
		results:    metrics.CounterVec(reg, "actloop_results_total", nil, "status", schema.Statuses...),
		validation: metrics.CounterVec(reg, "actloop_validation_results_total", nil, "status", schema.Statuses...),
		fallbacks:  metrics.CounterVec(reg, "actloop_fallbacks_total", nil, "reason", metrics.FallbackReasons...),
		duration:   metrics.Histogram(reg, "actloop_trajectory_seconds", nil),
		staleness:  metrics.Histogram(reg, "actloop_staleness_versions", nil, 0, 1, 2, 3, 4, 6, 8, 12, 16, 32),
		reward:     metrics.Histogram(reg, "actloop_reward", nil, 0, 0.25, 0.5, 0.75, 1),
	}
	total := func(f func(OutcomeCounts) int64) func() float64 {
		return func() float64 { return float64(f(c.outcomes.get(c.d.Now()).Total)) }
	}
	metrics.CounterFunc(reg, "actloop_solved_total", nil, total(func(o OutcomeCounts) int64 { return o.Solved }))
	metrics.CounterFunc(reg, "actloop_result_tokens_total", nil, total(func(o OutcomeCounts) int64 { return o.GenTokens }))
	metrics.CounterFunc(reg, "actloop_result_env_steps_total", nil, total(func(o OutcomeCounts) int64 { return o.EnvSteps }))
	metrics.CounterFunc(reg, "actloop_republished_total", nil, func() float64 { return float64(c.republished.Load()) })
	metrics.CounterFunc(reg, "actloop_readmitted_total", nil, func() float64 { return float64(c.readmitted.Load()) })
	reg.MustRegister(&collector{c: c})
	return reg
}

// observeResult counts a result seen.
func (c *Coordinator) observeResult(r schema.ResultHead) {
	staleness := int64(-1)
	if schema.Trainable(r.Status) && r.Purpose != schema.PurposeValidation && r.MinVersion >= 0 {
		if v := c.controlState().WeightVersion - int64(r.MinVersion); v >= 0 {
			staleness = v
		}
	}
	c.outcomes.observe(r, staleness, c.d.Now())
	if c.m == nil {
		return
	}
	if r.Purpose == schema.PurposeValidation {
		c.m.validation.WithLabelValues(r.Status).Inc()
	} else {
		c.m.results.WithLabelValues(r.Status).Inc()
	}
	if r.Status == schema.StatusFallback || r.Status == schema.StatusFailed {
		c.m.fallbacks.WithLabelValues(metrics.FallbackReason(r.Reason)).Inc()
	}
	if !r.AdmittedAt.IsZero() && r.FinishedAt.After(r.AdmittedAt) {
		c.m.duration.Observe(r.FinishedAt.Sub(r.AdmittedAt).Seconds())
	}
	if r.Purpose != schema.PurposeValidation {
		c.m.reward.Observe(r.Reward)
	}
	if staleness >= 0 {
		c.m.staleness.Observe(float64(staleness))
	}
}

// collector reads the coordinator's state and the work queues at each
// scrape, so the gauges are one consistent picture. A gauge whose source
// cannot be read (NATS refusing or not answering) is sent as an invalid
// metric, which the handler counts and leaves out (metrics.Handler): the
// other gauges are scraped all the same.
type collector struct{ c *Coordinator }

func desc(name string) *prometheus.Desc {
	m := metrics.Names()[name]
	return prometheus.NewDesc(name, m.Help, m.Labels, nil)
}

var (
	descActive   = desc("actloop_trajectories_active")
	descLimit    = desc("actloop_admission_limit")
	descWaiting  = desc("actloop_samples_waiting")
	descUp       = desc("actloop_replica_up")
	descReplica  = desc("actloop_replica_trajectories")
	descHeld     = desc("actloop_replica_held_trajectories")
	descDepth    = desc("actloop_queue_depth")
	descAge      = desc("actloop_queue_oldest_age_seconds")
	descPaused   = desc("actloop_paused")
	descVersion  = desc("actloop_weight_version")
	descMoved    = desc("actloop_moved_total")
	descThrough  = desc("actloop_throughput_per_second")
	queueStreams = []string{schema.StreamSamples, bus.StreamGen, bus.StreamEnv}
)

func (k *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descActive, descLimit, descWaiting, descUp, descReplica, descHeld, descDepth, descAge,
		descPaused, descVersion, descMoved, descThrough} {
		ch <- d
	}
}

func (k *collector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	st, _, u := k.c.viewed(context.Background())
	gauge(descActive, float64(st.Active))
	gauge(descLimit, float64(st.MaxActive))
	if u.samples != nil { // the samples not yet taken in are unknown
		ch <- prometheus.NewInvalidMetric(descWaiting, fmt.Errorf("samples not yet taken in: %w", u.samples))
	} else {
		gauge(descWaiting, float64(st.Queued))
	}
	for _, r := range st.Replicas {
		gauge(descUp, metrics.Bool(r.Live), r.Name)
		gauge(descReplica, float64(r.Active), r.Name)
		gauge(descHeld, float64(r.Held), r.Name)
	}
	gauge(descPaused, metrics.Bool(st.Control.Paused))
	gauge(descVersion, float64(st.Control.WeightVersion))
	ch <- prometheus.MustNewConstMetric(descMoved, prometheus.CounterValue, float64(st.Moved), "replica")
	ch <- prometheus.MustNewConstMetric(descMoved, prometheus.CounterValue, float64(st.EnvMoved), "env_worker")
	o := st.Outcomes
	gauge(descThrough, o.TrajectoriesPerS, "trajectories")
	gauge(descThrough, o.TokensPerS, "tokens")
	gauge(descThrough, o.EnvStepsPerS, "env_steps")
	for _, q := range st.Queues {
		gauge(descDepth, float64(q.Depth), q.Subject)
		if !q.ageUnknown {
			gauge(descAge, q.OldestAgeS, q.Subject)
		}
	}
	if u.queues != nil { // some subjects, or some ages, are missing
		ch <- prometheus.NewInvalidMetric(descDepth, fmt.Errorf("queues: %w", u.queues))
	}
}

type queue struct {
	subject    string
	depth      int
	age        time.Duration
	ageUnknown bool // its oldest message could not be read
}

// queues reads every work consumer's backlog: messages not yet delivered
// and those delivered but not acknowledged, and the age of the oldest of
// them (the first message after the consumer's ack floor). Consumers that
// share a subject count once, with the larger backlog. What it could not
// read (a stream, its consumers, an oldest message) it leaves out, and the
// error joins why.
func (c *Coordinator) queues(ctx context.Context) ([]queue, error) {
	var out []queue
	var errs []error
	at := map[string]int{} // subject -> index in out
	for _, name := range queueStreams {
		s, err := c.d.JS.Stream(ctx, name)
		if err != nil {
			errs = append(errs, fmt.Errorf("stream %s: %w", name, err))
			continue
		}
		l := s.ListConsumers(ctx)
		for info := range l.Info() {
			subject := info.Config.FilterSubject
			if subject == "" || (name == schema.StreamSamples && info.Name != "coordinator-samples") {
				continue
			}
			q := queue{subject: subject, depth: int(info.NumPending) + info.NumAckPending}
			if q.depth > 0 {
				m, err := s.GetMsg(ctx, info.AckFloor.Stream+1, jetstream.WithGetMsgSubject(subject))
				switch {
				case err == nil:
					q.age = max(c.d.Now().Sub(m.Time), 0)
				case !errors.Is(err, jetstream.ErrMsgNotFound):
					q.ageUnknown = true
					errs = append(errs, fmt.Errorf("oldest message on %s: %w", subject, err))
				}
			}
			if i, seen := at[subject]; seen {
				if q.depth > out[i].depth {
					out[i] = q
				}
				continue
			}
			at[subject] = len(out)
			out = append(out, q)
		}
		if err := l.Err(); err != nil {
			errs = append(errs, fmt.Errorf("consumers of %s: %w", name, err))
		}
	}
	return out, errors.Join(errs...)
}
