// Package coordinator admits samples, assigns replicas, watches for
// trajectories that cannot finish and ends them with a fallback result, and
// serves the status API.
//
// Consumers and their acks: samples (one at a time, only while fewer than
// MAX_ACTIVE trajectories are active; undecodable → dead letter; admitted
// or duplicate → ack); results (forget the trajectory → ack); events
// (failed → fallback → ack). Every effect is idempotent: a redelivered
// sample finds its trajectory created and re-publishes its start; a repeated
// fallback finds the trajectory terminal.
package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/actloop/actloop/internal/flow"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/pkg/bus"
	"github.com/actloop/actloop/pkg/schema"
	"github.com/actloop/actloop/pkg/store"
)

// tracer is looked up per use so that a tracer provider installed after
// start-up (or replaced in tests) takes effect.
func tracer() trace.Tracer { return otel.Tracer("github.com/actloop/actloop/internal/coordinator") }

// Coordinator is the admission and bookkeeping service.
type Coordinator struct {
	cfg Config
	d   *service.Deps

	samples, results, events jetstream.Consumer

	mu     sync.Mutex
	active map[string]*activeTraj
}

type activeTraj struct {
	replica string
	span    trace.Span // nil when admitted before this process started
}

// New declares the coordinator's consumers and loads its view of the active
// trajectories from Redis.
func New(ctx context.Context, cfg Config, d *service.Deps) (*Coordinator, error) {
	c := &Coordinator{cfg: cfg, d: d, active: map[string]*activeTraj{}}
	var err error
	if c.samples, err = d.Topo.Consumer(ctx, d.JS, bus.StreamSamples, "coordinator-samples", bus.SubjectSamples); err != nil {
		return nil, err
	}
	if c.results, err = d.Topo.Consumer(ctx, d.JS, bus.StreamResults, "coordinator-results", bus.SubjectResults); err != nil {
		return nil, err
	}
	if c.events, err = d.Topo.Consumer(ctx, d.JS, bus.StreamEvents, "coordinator-events", bus.SubjectEvents); err != nil {
		return nil, err
	}
	act, err := d.Store.Active(ctx)
	if err != nil {
		return nil, err
	}
	for id, replica := range act {
		c.active[id] = &activeTraj{replica: replica}
	}
	return c, nil
}

// Run consumes until ctx ends, then drains.
func (c *Coordinator) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	common := c.d.Common
	runner := func(name string, src jetstream.Consumer, slots int, h bus.Handler) *bus.Runner {
		// MaxDeliver 0: the coordinator's work is idempotent and fails only
		// transiently (Redis or NATS away), so it retries until it succeeds.
		return &bus.Runner{Name: name, Sources: []jetstream.Consumer{src}, Slots: slots, Handler: h,
			Publisher: c.d.Pub, Log: c.d.Log, AckWait: common.AckWait,
			PullWait: common.PullWait, StopTimeout: common.ShutdownTimeout}
	}
	// One sample at a time: admission is a read-modify-write of the active
	// set, and a step's Redis and NATS round trips keep it fast enough.
	admit := runner("coordinator-samples", c.samples, 1, c.handleSample)
	admit.Ready = func() bool { return c.ActiveCount() < c.cfg.ActiveLimit() }
	g.Go(func() error { return admit.Run(ctx) })
	g.Go(func() error { return runner("coordinator-results", c.results, 16, c.handleResult).Run(ctx) })
	g.Go(func() error { return runner("coordinator-events", c.events, 16, c.handleEvent).Run(ctx) })
	g.Go(func() error { return c.sweep(ctx) })
	g.Go(func() error { return service.Serve(ctx, c.cfg.Addr, c.Handler(), c.d.Log) })
	return g.Wait()
}

// ActiveCount is the number of admitted, unfinished trajectories.
func (c *Coordinator) ActiveCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.active)
}

// leastLoaded returns the replica with the fewest active trajectories.
func (c *Coordinator) leastLoaded() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	load := make(map[string]int, len(c.cfg.Replicas))
	for _, a := range c.active {
		load[a.replica]++
	}
	best := c.cfg.Replicas[0]
	for _, r := range c.cfg.Replicas[1:] {
		if load[r] < load[best] {
			best = r
		}
	}
	return best
}

func (c *Coordinator) handleSample(ctx context.Context, m jetstream.Msg) error {
	s, err := schema.DecodeSample(m.Data())
	if err != nil {
		return bus.Malformed(fmt.Errorf("sample: %w", err))
	}
	log := c.d.Log.With("traj_id", s.ID)
	replica := c.leastLoaded()
	tctx, span := tracer().Start(context.WithoutCancel(ctx), "trajectory", trace.WithNewRoot(),
		trace.WithAttributes(attribute.String("traj_id", s.ID), attribute.String("group_id", s.GroupID)))
	err = c.d.Store.Create(ctx, s, store.StatusStarting, map[string]string{
		store.FieldReplica: replica, store.FieldTrace: flow.Traceparent(tctx)})
	switch {
	case errors.Is(err, store.ErrExists):
		span.End() // a redelivery (or a duplicate id): continue from the stored state
		return c.resume(ctx, s.ID, log)
	case err != nil:
		span.End()
		return err
	}
	if err := c.d.Store.AddActive(ctx, s.ID, replica); err != nil {
		span.End()
		return err
	}
	c.mu.Lock()
	c.active[s.ID] = &activeTraj{replica: replica, span: span}
	c.mu.Unlock()
	log.Debug("admitted", "replica", replica)
	return c.resume(ctx, s.ID, log)
}

// resume publishes the start of a created trajectory again, or ignores a
// duplicate sample whose trajectory already moved on.
func (c *Coordinator) resume(ctx context.Context, id string, log interface{ Info(string, ...any) }) error {
	t, err := c.d.Store.Load(ctx, id, 0)
	if err != nil {
		return err
	}
	if t.Status != store.StatusStarting || t.Seq != 0 {
		log.Info("duplicate sample ignored: trajectory exists", "status", string(t.Status))
		return nil
	}
	if err := c.d.Store.AddActive(ctx, id, t.Replica); err != nil {
		return err
	}
	c.mu.Lock()
	if c.active[id] == nil {
		c.active[id] = &activeTraj{replica: t.Replica}
	}
	c.mu.Unlock()
	n, err := flow.NextOf(t, flow.LowOnly{})
	if err != nil {
		return err
	}
	return flow.Publish(ctx, c.d.Pub, t.Trace, n)
}

func (c *Coordinator) handleResult(ctx context.Context, m jetstream.Msg) error {
	r, err := schema.Decode[schema.Result](m.Data())
	if err != nil {
		return bus.Malformed(fmt.Errorf("result: %w", err))
	}
	if _, err := c.d.Store.RemoveActive(ctx, r.TrajID, r.Status); err != nil {
		return err
	}
	c.mu.Lock()
	a := c.active[r.TrajID]
	delete(c.active, r.TrajID)
	c.mu.Unlock()
	if a != nil && a.span != nil {
		a.span.SetAttributes(attribute.String("status", r.Status), attribute.Float64("reward", r.Reward),
			attribute.Int("turns", r.Turns))
		a.span.End()
	}
	return nil
}

func (c *Coordinator) handleEvent(ctx context.Context, m jetstream.Msg) error {
	e, err := schema.Decode[schema.Event](m.Data())
	if err != nil {
		return bus.Malformed(fmt.Errorf("event: %w", err))
	}
	switch e.Type {
	case schema.EventFailed:
		return c.stepFailed(ctx, e)
	}
	return nil
}

// stepFailed acts on a worker's report that it gave up on step e.Seq.
func (c *Coordinator) stepFailed(ctx context.Context, e schema.Event) error {
	t, err := c.d.Store.Load(ctx, e.TrajID, 0)
	if errors.Is(err, store.ErrNotFound) {
		c.forget(ctx, e.TrajID)
		return nil
	}
	if err != nil {
		return err
	}
	switch {
	case t.Status.Terminal():
		// It ended, but the worker could not publish the result: do it here.
		return c.finish(ctx, t.ID)
	case flow.PosOf(t, e.Seq) == flow.PosJustDone:
		// The step committed (another delivery did it) but its follow-up
		// may not have gone out: send it again from the stored state.
		n, err := flow.NextOf(t, flow.LowOnly{})
		if err != nil {
			return err
		}
		return flow.Publish(ctx, c.d.Pub, t.Trace, n)
	case flow.PosOf(t, e.Seq) == flow.PosCurrent:
		return c.Fallback(ctx, e.TrajID, fmt.Sprintf("step %d failed on %s: %s", e.Seq, e.Worker, e.Reason))
	}
	return nil // a report about a step long past
}

// finish publishes the result of a terminal trajectory from its stored
// state: it repairs an end whose result was not sent (a crash between the
// final commit and the publish).
func (c *Coordinator) finish(ctx context.Context, id string) error {
	t, err := c.d.Store.Load(ctx, id, store.WithAll)
	if errors.Is(err, store.ErrNotFound) {
		c.forget(ctx, id)
		return nil
	}
	if err != nil {
		return err
	}
	return flow.PublishResult(ctx, c.d.Store, c.d.Pub, t, c.d.Common.ResultTTL)
}

// Fallback ends a trajectory that cannot finish: it commits it as aborted
// and publishes a fallback result (reward 0, no trainable tokens, the
// reason), so no trainer batch waits for it. It is a no-op for a trajectory
// that already ended.
func (c *Coordinator) Fallback(ctx context.Context, id, reason string) error {
	for attempt := 0; ; attempt++ {
		t, err := c.d.Store.Load(ctx, id, store.WithAll)
		if errors.Is(err, store.ErrNotFound) {
			c.forget(ctx, id)
			return nil
		}
		if err != nil {
			return err
		}
		if t.Status.Terminal() {
			return flow.PublishResult(ctx, c.d.Store, c.d.Pub, t, c.d.Common.ResultTTL)
		}
		commit := store.Commit{ID: id, Seq: t.Seq, Set: map[string]string{
			store.FieldStatus: string(store.StatusAborted), store.FieldReason: reason,
			store.FieldFinishedAt: fmt.Sprint(c.d.Now().UnixMilli())}}
		err = c.d.Store.Commit(ctx, commit)
		if errors.Is(err, store.ErrStale) && attempt < 5 {
			continue // it moved meanwhile; look again
		}
		if err != nil {
			return err
		}
		c.d.Log.Warn("trajectory ended with a fallback", "traj_id", id, "seq", t.Seq, "reason", reason)
		t.Apply(commit)
		if err := flow.PublishResult(ctx, c.d.Store, c.d.Pub, t, c.d.Common.ResultTTL); err != nil {
			return err
		}
		if t.Owner != "" {
			close := schema.EnvStep{V: schema.Version, TrajID: id, Seq: t.Seq, Kind: schema.EnvClose}
			if err := c.d.Pub.Publish(ctx, bus.SubjectEnv(t.Owner), schema.MsgID(id, t.Seq, "close"), close); err != nil {
				c.d.Log.Warn("sandbox close not sent", "traj_id", id, "error", err)
			}
		}
		return nil
	}
}

// forget drops a trajectory whose state is gone from the active set.
func (c *Coordinator) forget(ctx context.Context, id string) {
	if _, err := c.d.Store.RemoveActive(ctx, id, "lost"); err != nil {
		c.d.Log.Warn("forget", "traj_id", id, "error", err)
		return
	}
	c.mu.Lock()
	delete(c.active, id)
	c.mu.Unlock()
}

// sweep ends trajectories whose state has not advanced within StallTimeout.
func (c *Coordinator) sweep(ctx context.Context) error {
	every := max(min(c.cfg.StallTimeout, c.cfg.ResultGrace)/4, 250*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		c.mu.Lock()
		ids := make([]string, 0, len(c.active))
		for id := range c.active {
			ids = append(ids, id)
		}
		c.mu.Unlock()
		prog, err := c.d.Store.Progress(ctx, ids)
		if err != nil {
			c.d.Log.Warn("stall sweep", "error", err)
			continue
		}
		now := c.d.Now()
		for _, id := range ids {
			p, ok := prog[id]
			switch {
			case !ok:
				c.forget(ctx, id)
			case p.Status.Terminal():
				// Normally its result is on the way and its consumer removes
				// it; still here after a while, the result was never sent.
				if now.Sub(p.UpdatedAt) > c.cfg.ResultGrace {
					if err := c.finish(ctx, id); err != nil {
						c.d.Log.Warn("re-publish result", "traj_id", id, "error", err)
					}
				}
			case now.Sub(p.UpdatedAt) > c.cfg.StallTimeout:
				reason := fmt.Sprintf("stalled: no progress for %v at %s (seq %d)",
					now.Sub(p.UpdatedAt).Round(time.Second), p.Status, p.Seq)
				if err := c.Fallback(ctx, id, reason); err != nil {
					c.d.Log.Warn("fallback", "traj_id", id, "error", err)
				}
			}
		}
	}
}
