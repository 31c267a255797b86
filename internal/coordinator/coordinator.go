// Package coordinator admits samples in policy order, assigns replicas,
// ranks active trajectories into per-replica priority snapshots, ends
// trajectories that cannot finish with a fallback result, repairs ends whose
// result was lost, announces complete groups, owns the control state of
// weight synchronisation (pause, resume, staleness), and serves the status
// and trainer APIs.
//
// Consumers and their acks: samples (taken in to the waiting set while it has
// room; undecodable, an id an earlier run holds, a member at odds with its
// group → dead letter and term; taken in, or a redelivery of one → ack); results
// (forget the trajectory, count it towards its group, announce the group
// when complete → ack); events (a failed step → fallback or repair
// → ack); predictions (update the live view → ack). The coordinator's work
// fails only transiently, so it retries without limit. Every effect is
// idempotent: a redelivered sample finds its entry or trajectory and goes
// on from there; a repeated fallback finds the trajectory terminal.
package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/predict"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/priority"
	"github.com/actloop/actloop/pkg/schema"
)

// tracer is looked up per use so that a tracer provider installed after
// start-up (or replaced in tests) takes effect.
func tracer() trace.Tracer { return otel.Tracer("github.com/actloop/actloop/internal/coordinator") }

// Coordinator is the admission, scheduling and bookkeeping service. Its
// state lives in components that each own theirs under their own lock:
// membership (liveness of the workers), active (the admitted
// trajectories), waiting (the samples waiting and the admission limit),
// ctl (weight-sync control), util (slot-use history) and the counters of
// repair. The HTTP API and the metrics read the view that publishView
// publishes, and take none of those locks.
type Coordinator struct {
	cfg Config
	d   *service.Deps
	// store is d.Store fenced by the term's lease revision (traj.Store.Fenced):
	// a write refused because a later term leads ends this one (stepDown).
	store    *traj.Store
	term     uint64
	stepDown atomic.Pointer[context.CancelCauseFunc]
	policy   priority.Policy
	predict  *predict.Client
	kv       jetstream.KeyValue
	// admitted keeps each admitted trajectory's sample until its result
	// (bus.BucketAdmitted), to run it again if its state is lost.
	admitted jetstream.KeyValue
	ctl      *control

	samples, results, events, predictions jetstream.Consumer

	wake chan struct{} // admission has something to do
	// admitMu is held by an admission round and by Abort, so that a sample
	// being aborted is not admitted meanwhile.
	admitMu sync.Mutex
	// intakeMu makes the samples' intake one at a time from the check of
	// its id and group to the waiting set (handleSample).
	intakeMu sync.Mutex

	members *membership
	pace    paceView
	active  *activeSet
	waiting *waitingSet
	snaps   snapshotLog
	util    utilHistory
	// outcomes are the results seen this term: reward, solve rate,
	// throughput and staleness.
	outcomes *outcomes
	// Counters of repair: trajectories moved off replicas that went down
	// and off env-workers that went away; work messages published again
	// for lack of progress.
	moved, envMoved, republished, readmitted atomic.Int64
	held                                     atomic.Int64 // admission passes held back by a pause

	view atomic.Pointer[view] // what the HTTP API and the metrics read
	m    *coordMetrics
}

// New declares the coordinator's consumers and loads its view of the active
// and waiting trajectories from Redis. Its writes are not fenced: for a
// coordinator that runs alone (Elected runs one per term, fenced).
func New(ctx context.Context, cfg Config, d *service.Deps) (*Coordinator, error) {
	return newTerm(ctx, cfg, d, 0)
}

// ErrFenced ends a term whose write was refused because a coordinator of a
// later term leads (a deposed leader that slept past its lease).
var ErrFenced = traj.ErrFenced

// newTerm is New for the term whose leader lease has revision term: the
// term stamps the trajectories it takes over, the trajectories it creates
// and the control state with it, and any write refused for a later term
// ends Run with ErrFenced.
func newTerm(ctx context.Context, cfg Config, d *service.Deps, term uint64) (*Coordinator, error) {
	policy, err := priority.New(cfg.Policy, priority.Config{AgeLimit: cfg.AgeLimit})
	if err != nil {
		return nil, fmt.Errorf("ACTLOOP_POLICY: %w", err)
	}
	c := &Coordinator{cfg: cfg, d: d, policy: policy, wake: make(chan struct{}, 1),
		members: newMembership(cfg.Replicas, cfg.ReplicaTimeout, cfg.EnvWorkerTimeout, d.Now()),
		active:  newActiveSet(), waiting: newWaitingSet(cfg.ActiveFloor()), outcomes: newOutcomes(d.Now()),
		predict: &predict.Client{NC: d.NC, Timeout: cfg.PredictTimeout, Log: d.Log}, term: term}
	c.store = d.Store.Fenced(term, c.fenced)
	if cfg.Policy == "fcfs" {
		c.predict.Timeout = 0 // fcfs needs no predictions
	}
	for _, cs := range []struct {
		dst                   *jetstream.Consumer
		stream, name, subject string
	}{
		{&c.samples, schema.StreamSamples, "coordinator-samples", schema.SubjectSamples},
		{&c.results, schema.StreamResults, schema.ConsumerCoordinatorResults, schema.SubjectResults},
		{&c.events, bus.StreamEvents, "coordinator-events", bus.SubjectEvents},
		{&c.predictions, bus.StreamEvents, "coordinator-predictions", bus.SubjectPredictions},
	} {
		if *cs.dst, err = d.Topo.Consumer(ctx, d.JS, cs.stream, cs.name, cs.subject); err != nil {
			return nil, err
		}
	}
	if c.kv, err = d.JS.KeyValue(ctx, bus.BucketPriority); err != nil {
		return nil, fmt.Errorf("kv %s: %w", bus.BucketPriority, err)
	}
	if c.admitted, err = d.JS.KeyValue(ctx, bus.BucketAdmitted); err != nil {
		return nil, fmt.Errorf("kv %s: %w", bus.BucketAdmitted, err)
	}
	if err := c.load(ctx); err != nil {
		return nil, err
	}
	if err := c.initControl(ctx); err != nil {
		return nil, err
	}
	if err := c.publishScheduling(ctx); err != nil {
		return nil, err
	}
	c.publishView()
	// Continue the snapshot versions where the last coordinator left them:
	// workers ignore a version older than the one they hold, whatever the
	// clock of this host says.
	for r := range replicaNames(cfg.Replicas, c.active.load()) {
		if e, err := c.kv.Get(ctx, r); err == nil {
			if snap, err := priority.DecodeSnapshot(e.Value()); err == nil {
				c.snaps.continueFrom(snap.Version)
			}
		}
	}
	return c, nil
}

// fenced ends the term: one of its writes was refused for a later term.
func (c *Coordinator) fenced(err error) {
	if stop := c.stepDown.Load(); stop != nil {
		(*stop)(err)
	}
}

// Run consumes until ctx ends, then drains. It returns an error wrapping
// ErrFenced when a coordinator of a later term refused one of its writes.
func (c *Coordinator) Run(ctx context.Context) error {
	defer c.registerMetrics().Close()
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	c.stepDown.Store(&stop)
	defer c.active.endSpans() // after the term's handlers, which end them as results come
	if err := c.runTerm(ctx); err != nil {
		return err
	}
	if cause := context.Cause(ctx); errors.Is(cause, ErrFenced) {
		return cause
	}
	return nil
}

func (c *Coordinator) runTerm(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	common := c.d.Common
	runner := func(name string, src jetstream.Consumer, slots int, h bus.Handler) *bus.Runner {
		// MaxDeliver 0: the coordinator's work is idempotent and fails only
		// transiently (Redis or NATS away), so it retries until it succeeds.
		return &bus.Runner{Name: name, Sources: []jetstream.Consumer{src}, Slots: slots, Handler: h,
			Publisher: c.d.Pub, Log: c.d.Log, AckWait: common.AckWait,
			PullWait: common.PullWait, StopTimeout: common.ShutdownTimeout}
	}
	intake := runner("coordinator-samples", c.samples, 8, c.handleSample)
	intake.Ready = func() bool { return c.waiting.count() < c.cfg.MaxWaiting }
	g.Go(func() error { return intake.Run(ctx) })
	g.Go(func() error { return runner(schema.ConsumerCoordinatorResults, c.results, 16, c.handleResult).Run(ctx) })
	g.Go(func() error { return runner("coordinator-events", c.events, 16, c.handleEvent).Run(ctx) })
	g.Go(func() error { return runner("coordinator-predictions", c.predictions, 16, c.handlePrediction).Run(ctx) })
	g.Go(func() error { return c.admitLoop(ctx) })
	g.Go(func() error { return c.snapshotLoop(ctx) })
	g.Go(func() error { return c.sweep(ctx) })
	g.Go(func() error { return c.members.watch(ctx, c.d.JS, c.d.Log, c.d.Now, c.poke) })
	g.Go(func() error { return c.watchReports(ctx) })
	g.Go(func() error { return c.serveControlNATS(ctx) })
	g.Go(func() error {
		return serveTrainerConsumers(ctx, c.d.NC, c.d.JS, c.d.Log, c.cfg.TrainerConsumerInactive)
	})
	g.Go(func() error { return every(ctx, c.cfg.AdaptInterval, c.adaptLimit) })
	g.Go(func() error { return every(ctx, utilEvery, c.sampleUtil) })
	g.Go(func() error { return every(ctx, viewEvery, c.publishView) })
	g.Go(func() error {
		return every(ctx, max(c.cfg.ReplicaTimeout/4, 100*time.Millisecond), func() { c.rebalance(ctx) })
	})
	g.Go(func() error {
		return every(ctx, max(c.cfg.EnvWorkerTimeout/4, 100*time.Millisecond), func() { c.moveFromDeadEnvWorkers(ctx) })
	})
	g.Go(func() error { return service.Serve(ctx, c.cfg.Addr, c.Handler(), c.d.Log) })
	return g.Wait()
}

// ActiveCount is the number of admitted, unfinished trajectories.
func (c *Coordinator) ActiveCount() int { return c.active.count() }

// poke wakes the admission loop.
func (c *Coordinator) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// every runs f every d until ctx ends.
func every(ctx context.Context, d time.Duration, f func()) error {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			f()
		}
	}
}
