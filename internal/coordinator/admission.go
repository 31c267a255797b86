package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/telemetry"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/priority"
	"github.com/actloop/actloop/pkg/schema"
)

// load rebuilds the in-memory view from Redis.
func (c *Coordinator) load(ctx context.Context) error {
	act, err := c.store.Active(ctx)
	if err != nil {
		return err
	}
	for id, e := range act {
		f := priority.Fact{TrajID: id, Replica: e.Replica, GroupID: e.GroupID, Family: e.Family}
		if t, err := c.store.Load(ctx, id, 0); err == nil {
			f = factOf(t)
		}
		c.active.add(id, &activeTraj{entry: e, fact: f})
	}
	// From here on a coordinator of an earlier term (one that slept past
	// its lease) can no longer move, end or change these.
	if err := c.store.Stamp(ctx, slices.Collect(maps.Keys(act))); err != nil {
		return err
	}
	counts, err := c.store.Counts(ctx)
	if err != nil {
		return err
	}
	for status, n := range counts {
		if !strings.HasPrefix(status, validationCount) {
			c.active.countFinished(n)
		}
	}
	waiting, err := c.store.Waiting(ctx)
	if err != nil {
		return err
	}
	for id, b := range waiting {
		var w waitingSample
		if err := json.Unmarshal(b, &w); err != nil {
			c.d.Log.Error("dropping unreadable waiting entry", "traj_id", id, "error", err)
			_ = c.store.RemoveWaiting(ctx, id)
			continue
		}
		c.waiting.add(id, &w)
	}
	return nil
}

func factOf(t *traj.Trajectory) priority.Fact {
	return priority.Fact{TrajID: t.ID, Replica: t.Replica, GroupID: t.Sample.GroupID, Family: t.Sample.Family,
		AdmittedAt: t.AdmittedAt, Turns: t.Calls, Tokens: t.GenTokens, WaitingSince: t.UpdatedAt}
}

// handleSample takes a sample in to the waiting set; admission picks from
// there in policy order.
func (c *Coordinator) handleSample(ctx context.Context, m jetstream.Msg) error {
	s, err := schema.DecodeSample(m.Data())
	if err != nil {
		err = fmt.Errorf("sample: %w", err)
		if rerr := c.reject(ctx, m.Data(), err); rerr != nil {
			return rerr // tried again: the rejection must reach the trainer
		}
		return bus.Malformed(err)
	}
	if redelivered(m) && (c.waiting.has(s.ID) || c.active.has(s.ID)) {
		return nil // a redelivery of a sample already waiting or admitted
	}
	// One sample at a time from here to the waiting set, so that two
	// members of a group (or two samples of an id) are checked against
	// each other.
	c.intakeMu.Lock()
	defer c.intakeMu.Unlock()
	switch h, err := c.idHolder(ctx, s.ID); {
	case err != nil:
		return err
	case h != nil && redelivered(m):
		return nil // taken in before: its acknowledgement was lost
	case h != nil:
		return c.refuseTaken(ctx, s, h)
	}
	switch conflict, err := c.groupConflict(ctx, s); {
	case err != nil:
		return err
	case conflict != nil:
		return c.refuseGroupConflict(ctx, s, m.Data(), conflict)
	}
	w := &waitingSample{Sample: s, ArrivedAt: c.d.Now()}
	b, err := json.Marshal(w)
	if err != nil {
		return err
	}
	if _, err := c.store.AddWaiting(ctx, s.ID, b); err != nil {
		return err
	}
	predicted := c.siblingPrediction(s.GroupID)
	w.Predicted = predicted
	if !c.active.has(s.ID) {
		c.waiting.add(s.ID, w)
	}
	if predicted == 0 {
		c.predictWaiting(ctx, w)
	}
	c.poke()
	return nil
}

// siblingPrediction is a prediction already known for a group member,
// which the group's siblings share until they have history of their own.
func (c *Coordinator) siblingPrediction(group string) float64 {
	if p := c.active.siblingPrediction(group); p > 0 {
		return p
	}
	return c.waiting.siblingPrediction(group)
}

// predictWaiting asks predictor-gw for a fresh sample's length (nothing done
// yet); without an answer it stays unknown.
func (c *Coordinator) predictWaiting(ctx context.Context, w *waitingSample) {
	s := w.Sample
	rep, err := c.predict.Predict(ctx, schema.PredictRequest{TrajID: s.ID, GroupID: s.GroupID, Family: s.Family, Task: s.Task})
	if err != nil {
		return
	}
	b, err := c.waiting.predicted(w, rep.RemainingTokens, rep.RemainingTurns)
	if err == nil {
		err = c.store.UpdateWaiting(ctx, s.ID, b)
	}
	if err != nil {
		c.d.Log.Warn("store prediction of waiting sample", "traj_id", s.ID, "error", err)
	}
}

// admitParallel is how many admissions run at once: each is a few Redis
// and NATS round trips, so one at a time would cap admission at a few
// hundred per second.
const admitParallel = 16

// admitLoop admits waiting samples in policy order while fewer than
// MAX_ACTIVE trajectories are active. Replicas are assigned for the whole
// batch first (least-loaded, counting the batch), then the admissions run
// in parallel; a failed one leaves its sample waiting for the next round.
func (c *Coordinator) admitLoop(ctx context.Context) error {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.wake:
		case <-t.C:
		}
		c.admitMu.Lock()
		batch, replicas := c.admissible()
		var wg sync.WaitGroup
		sem := make(chan struct{}, admitParallel)
		for i, replica := range replicas {
			w := batch[i]
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				if err := c.admit(ctx, w, replica); err != nil && ctx.Err() == nil {
					c.d.Log.Warn("admission failed; will retry", "traj_id", w.Sample.ID, "error", err)
				}
			})
		}
		wg.Wait()
		c.admitMu.Unlock()
	}
}

// admissible returns the waiting samples to admit now, best first, and
// the replica of each; none while generation is paused. While every live
// replica reports its KV pool (and ACTLOOP_KV_BUDGET > 0) admission goes by
// KV (priority.KVPools), under ACTLOOP_MAX_ACTIVE_CEILING when it is set
// (priority.KVCeiling); otherwise by the adaptive
// count limit, each on the replica with the fewest trajectories.
func (c *Coordinator) admissible() ([]*waitingSample, []string) {
	if c.controlState().Paused { // a weight sync: no new sample until it resumes
		if c.waiting.count() > 0 {
			c.held.Add(1)
		}
		return nil, nil
	}
	now := c.d.Now()
	live, capacity, byKV := c.byKV(now)
	// A replica that joined or left moves the count limit's bounds at once,
	// not at the next adaptation.
	limit := c.waiting.bound(c.activeBounds(now))
	if byKV {
		limit = priority.KVCeiling(c.cfg.MaxActiveCeiling)
	}
	free, room := priority.Admissible(limit, c.active.count(), -1), c.stalenessRoom()
	if free == 0 || c.waiting.count() == 0 || len(live) == 0 {
		return nil, nil // full, nothing waiting, or no live replica
	}
	batch := c.waiting.ranked(c.policy, free, room)
	if len(batch) == 0 {
		return nil, nil // only training samples wait, and the staleness bound is reached
	}
	if !byKV {
		return batch, priority.AssignReplicas(live, c.active.load(), len(batch))
	}
	waiting := make([]priority.Footprint, len(batch))
	for k, w := range batch {
		waiting[k] = w.footprint()
	}
	pools := priority.KVPools{Capacity: capacity, Budget: c.cfg.KVBudget, Slots: c.cfg.Slots}
	replicas := pools.Admit(live, c.active.footprints(), waiting)
	return batch[:len(replicas)], replicas
}

// byKV returns the live replicas and their pools, and whether admission
// goes by KV: under action-level scheduling with ACTLOOP_KV_BUDGET > 0,
// while every live replica reports its pool.
func (c *Coordinator) byKV(now time.Time) ([]string, map[string]int, bool) {
	live := c.members.liveReplicas(now)
	capacity := c.members.capacity(now)
	byKV := c.cfg.Scheduling == priority.SchedulingAction && c.cfg.KVBudget > 0 && len(live) > 0
	for _, r := range live {
		byKV = byKV && capacity[r] > 0
	}
	return live, capacity, byKV
}

// stalenessRoom is priority.StalenessRoom for the current control state and
// the training trajectories admitted so far.
func (c *Coordinator) stalenessRoom() int {
	ctl := c.controlState()
	return priority.StalenessRoom(ctl.MaxStaleness, ctl.WeightVersion, c.cfg.TrainBatchSize, c.active.admitted())
}

// admit creates a trajectory for a waiting sample on replica and publishes
// its start. Every step is idempotent, so a failure leaves the sample
// waiting and a later try (or a restarted coordinator) goes on from where it
// stopped.
func (c *Coordinator) admit(ctx context.Context, w *waitingSample, replica string) error {
	s := w.Sample
	tctx, span := tracer().Start(context.WithoutCancel(ctx), "trajectory", trace.WithNewRoot(),
		trace.WithAttributes(attribute.String("traj_id", s.ID), attribute.String("group_id", s.GroupID)))
	err := c.store.Create(ctx, traj.Admission{Sample: s, Replica: replica, Trace: telemetry.Traceparent(tctx)})
	switch {
	case errors.Is(err, traj.ErrExists):
		span.End() // a retry, a restart, or a duplicate id: go on from the stored state
		span = nil
	case err != nil:
		span.End()
		return err
	}
	t, err := c.store.Load(ctx, s.ID, 0)
	if err != nil {
		endSpan(span)
		return err
	}
	if t.Status != traj.StatusStarting || t.Seq != 0 {
		endSpan(span)
		c.d.Log.Info("duplicate sample dropped: its trajectory exists", "traj_id", s.ID, "status", string(t.Status))
		return c.unwait(ctx, s.ID)
	}
	entry := traj.ActiveEntryOf(s, t.Replica)
	if err := c.store.AddActive(ctx, s.ID, entry); err != nil {
		endSpan(span)
		return err
	}
	if err := c.keepSample(ctx, admittedSample{Sample: s}); err != nil {
		endSpan(span)
		return err
	}
	f := factOf(t)
	f.Predicted = w.Predicted
	kv := w.footprint()
	f.RemainingTurns = max(kv.RemainingTurns, 0)
	if !c.active.add(s.ID, &activeTraj{entry: entry, fact: f, kv: kv, span: span}) {
		endSpan(span) // a retry: keep the span of the first try
	}
	n, err := traj.NextOf(t, traj.LowOnly{})
	if err != nil {
		return err
	}
	if err := traj.Publish(ctx, c.d.Pub, t.Trace, n); err != nil {
		return err
	}
	return c.unwait(ctx, s.ID)
}

func (c *Coordinator) unwait(ctx context.Context, id string) error {
	if err := c.store.RemoveWaiting(ctx, id); err != nil {
		return err
	}
	c.waiting.remove(id)
	return nil
}

func endSpan(s trace.Span) {
	if s != nil {
		s.End()
	}
}

// reject answers a sample that cannot run but names itself (a valid id)
// with a result of status failed carrying the reason, so that a trainer
// waiting for it, or for its group, is not left waiting; the message is
// dead-lettered as well. An id already taken (waiting, active or stored) gets no result:
// the sample that holds it will have one.
func (c *Coordinator) reject(ctx context.Context, data []byte, reason error) error {
	var id struct {
		Purpose    string `json:"purpose"`
		ID         string `json:"id"`
		GroupID    string `json:"group_id"`
		GroupIndex int    `json:"group_index"`
		GroupSize  int    `json:"group_size"`
		Family     string `json:"family"`
	}
	if json.Unmarshal(data, &id) != nil || !schema.ValidID(id.ID) {
		return nil // nothing to answer to
	}
	if c.waiting.has(id.ID) || c.active.has(id.ID) {
		return nil
	}
	switch _, err := c.store.Load(ctx, id.ID, 0); {
	case err == nil:
		return nil
	case !errors.Is(err, traj.ErrNotFound):
		return err
	}
	if id.GroupID == "" || !schema.ValidID(id.GroupID) || id.GroupSize < 1 || id.GroupIndex < 0 || id.GroupIndex >= id.GroupSize {
		id.GroupID, id.GroupIndex, id.GroupSize = "", 0, 0 // no group to count it towards
	}
	if !schema.ValidID(id.Family) {
		id.Family = ""
	}
	now := c.d.Now().UTC()
	r := traj.FallbackResult(schema.ResultHead{TrajID: id.ID, GroupID: id.GroupID, GroupIndex: id.GroupIndex,
		GroupSize: id.GroupSize, Family: id.Family, Purpose: schema.ResultPurpose(id.Purpose), Status: schema.StatusFailed,
		Reason: "rejected: " + reason.Error(), AdmittedAt: now, FinishedAt: now})
	c.d.Log.Warn("sample rejected: answered with a failed result", "traj_id", id.ID, "reason", reason)
	if err := c.d.Results.Publish(ctx, r, schema.MsgID(id.ID, 0, "rejected")); err != nil {
		return err
	}
	// Never active, so handleResult does not count it.
	c.observeResult(schema.ResultHead{Status: r.Status, Reason: r.Reason, Purpose: r.Purpose, MinVersion: -1})
	return nil
}
