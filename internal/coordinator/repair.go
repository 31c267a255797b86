package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/schema"
)

func (c *Coordinator) handleResult(ctx context.Context, m jetstream.Msg) error {
	r, err := schema.Decode[schema.ResultHead](m.Data()) // the tokens are not needed here
	if err != nil {
		return bus.Malformed(fmt.Errorf("result: %w", err))
	}
	validation := r.Purpose == schema.PurposeValidation
	counted := r.Status
	if validation {
		counted = validationCount + r.Status // outside the staleness bound's count
	}
	was, err := c.store.RemoveActive(ctx, r.TrajID, counted)
	if err != nil {
		return err
	}
	if err := c.admitted.Delete(ctx, bus.AdmittedKey(r.TrajID)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("forget the sample of %s: %w", r.TrajID, err)
	}
	if err := c.groupResult(ctx, r); err != nil {
		return err
	}
	if was {
		c.observeResult(r)
	}
	a := c.active.remove(r.TrajID, was && !validation)
	if a != nil && schema.Trainable(r.Status) && r.FinishedAt.After(r.AdmittedAt) {
		c.pace.finished(a.fact.Replica, r.FinishedAt.Sub(r.AdmittedAt).Seconds(), r.GenTokens, r.Turns)
	}
	c.poke()
	if a != nil && a.span != nil {
		a.span.SetAttributes(attribute.String("status", r.Status), attribute.Float64("reward", r.Reward),
			attribute.Int("turns", r.Turns))
		a.span.End()
	}
	return nil
}

// validationCount prefixes the status under which a validation rollout's
// result is counted (Status.Finished): apart from training results, which
// the staleness bound counts.
const validationCount = "validation:"

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
	t, err := c.store.Load(ctx, e.TrajID, 0)
	if errors.Is(err, traj.ErrNotFound) {
		return c.lost(ctx, e.TrajID)
	}
	if err != nil {
		return err
	}
	switch {
	case t.Status.Terminal():
		// It ended, but the worker could not publish the result: do it here.
		return c.finish(ctx, t.ID)
	case traj.PosOf(t, e.Seq) == traj.PosJustDone:
		// The step committed (another delivery did it) but its follow-up
		// may not have gone out: send it again from the stored state.
		n, err := traj.NextOf(t, traj.LowOnly{})
		if err != nil {
			return err
		}
		return traj.Publish(ctx, c.d.Pub, t.Trace, n)
	case traj.PosOf(t, e.Seq) == traj.PosCurrent:
		return c.Fallback(ctx, e.TrajID, fmt.Sprintf("step %d failed on %s: %s", e.Seq, e.Worker, e.Reason))
	}
	return nil // a report about a step long past
}

// finish publishes the result of a terminal trajectory from its stored
// state: it repairs an end whose result was not sent (a crash between the
// final commit and the publish).
func (c *Coordinator) finish(ctx context.Context, id string) error {
	t, err := c.loadOrLost(ctx, id)
	if t == nil {
		return err
	}
	return traj.PublishResult(ctx, c.d.Store, c.d.Results, t, c.d.Common.ResultTTL, c.controlState())
}

// loadOrLost loads a trajectory whole; one whose state is gone is answered
// as lost (nil and what that returned).
func (c *Coordinator) loadOrLost(ctx context.Context, id string) (*traj.Trajectory, error) {
	t, err := c.store.Load(ctx, id, traj.WithAll)
	if errors.Is(err, traj.ErrNotFound) {
		return nil, c.lost(ctx, id)
	}
	return t, err
}

// Fallback ends a trajectory that cannot finish: it commits it as aborted
// and publishes a fallback result (reward 0, no trainable tokens, the
// reason), so no trainer batch waits for it. For a trajectory that already
// ended it publishes that end's result again.
func (c *Coordinator) Fallback(ctx context.Context, id, reason string) error {
	for attempt := 0; ; attempt++ {
		t, err := c.loadOrLost(ctx, id)
		if t == nil {
			return err
		}
		if t.Status.Terminal() {
			return traj.PublishResult(ctx, c.d.Store, c.d.Results, t, c.d.Common.ResultTTL, c.controlState())
		}
		err = c.end(ctx, t, schema.StatusFallback, reason)
		if errors.Is(err, traj.ErrStale) && attempt < 5 {
			continue // it moved meanwhile; look again
		}
		return err
	}
}

// end commits live trajectory t as ended with a result of status
// (fallback, aborted), publishes the result and has its sandbox closed.
// traj.ErrStale: t moved meanwhile.
func (c *Coordinator) end(ctx context.Context, t *traj.Trajectory, status, reason string) error {
	id, seq := t.ID, t.Seq
	if err := c.store.Commit(ctx, t, traj.Aborted{End: status, Reason: reason}); err != nil {
		return err
	}
	c.d.Log.Warn("trajectory ended early", "traj_id", id, "seq", seq, "status", status, "reason", reason)
	if err := traj.PublishResult(ctx, c.d.Store, c.d.Results, t, c.d.Common.ResultTTL, c.controlState()); err != nil {
		return err
	}
	if t.Owner != "" {
		close := schema.EnvStep{V: schema.Version, TrajID: id, Seq: t.Seq, Kind: schema.EnvClose}
		if err := c.d.Pub.Publish(ctx, bus.SubjectEnv(t.Owner), t.MsgID("close"), close); err != nil {
			c.d.Log.Warn("sandbox close not sent", "traj_id", id, "error", err)
		}
	}
	return nil
}

// republish publishes again the work message that trajectory id's state
// calls for, at most once per RepublishAfter: the one sent may have been
// lost. The copy carries its own message id (a duplicate of the first
// would be dropped by the stream's duplicate window); the seq check makes
// it harmless when the first was not lost after all.
func (c *Coordinator) republish(ctx context.Context, id string, updatedAt, now time.Time) {
	n, due := c.active.republishDue(id, now, c.cfg.RepublishAfter)
	if !due {
		return
	}
	t, err := c.store.Load(ctx, id, 0)
	if err != nil {
		c.d.Log.Warn("republish", "traj_id", id, "error", err)
		return
	}
	next, err := traj.NextOf(t, traj.LowOnly{})
	if err != nil {
		return // terminal meanwhile
	}
	next.MsgID = fmt.Sprintf("%s:again-%d", next.MsgID, n)
	c.d.Log.Warn("no progress: publishing the pending step again", "traj_id", id, "seq", t.Seq, "status", t.Status,
		"since", now.Sub(updatedAt).Round(time.Second), "subject", next.Subject)
	if err := traj.Publish(ctx, c.d.Pub, t.Trace, next); err != nil {
		c.d.Log.Warn("republish", "traj_id", id, "error", err)
	}
	c.republished.Add(1)
}

// ReasonLost is the reason of the fallback result of a trajectory whose
// state is gone from Redis.
const ReasonLost = "lost: the trajectory's state is gone from Redis"

// MaxReadmissions is how often a trajectory whose state is lost is
// admitted again from its kept sample before it ends with a fallback.
const MaxReadmissions = 1

// admittedSample is what bus.BucketAdmitted keeps of an admitted
// trajectory.
type admittedSample struct {
	Sample schema.Sample `json:"sample"`
	// Readmissions counts the times it was admitted again after its state
	// was lost.
	Readmissions int `json:"readmissions,omitempty"`
}

// keepSample keeps a's sample until the trajectory's result.
func (c *Coordinator) keepSample(ctx context.Context, a admittedSample) error {
	b, err := json.Marshal(a)
	if err == nil {
		_, err = c.admitted.Put(ctx, bus.AdmittedKey(a.Sample.ID), b)
	}
	if err != nil {
		return fmt.Errorf("keep the sample of %s: %w", a.Sample.ID, err)
	}
	return nil
}

// lost answers for an active trajectory whose state is gone from Redis (a
// Redis that lost its data, keys deleted). With its sample kept and fewer
// than MaxReadmissions re-admissions, it starts again from the beginning
// (a new sandbox, seq 0; steps of its first run still in flight apply to
// the new state only where it has reached their seq, as any redelivery).
// Otherwise it ends with a fallback result from what the index keeps of it,
// so its trainer and its group still get one. A trajectory not active here
// (ended, its state expired) gets nothing.
func (c *Coordinator) lost(ctx context.Context, id string) error {
	e, ok := c.active.entry(id)
	if !ok {
		return nil
	}
	kept, err := c.admitted.Get(ctx, bus.AdmittedKey(id))
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("the sample of %s: %w", id, err)
	}
	var a admittedSample
	if err == nil && json.Unmarshal(kept.Value(), &a) == nil && a.Sample.ID == id && a.Readmissions < MaxReadmissions {
		return c.readmit(ctx, a, e.Replica)
	}
	h := e.Head(id)
	h.Reason, h.FinishedAt = ReasonLost, c.d.Now().UTC()
	r := traj.FallbackResult(h)
	c.d.Log.Error("trajectory state lost: answered with a fallback result", "traj_id", id)
	return c.d.Results.Publish(ctx, r, schema.MsgID(id, 0, "lost"))
}

// readmit starts a lost trajectory again from its kept sample, on replica.
func (c *Coordinator) readmit(ctx context.Context, a admittedSample, replica string) error {
	id := a.Sample.ID
	a.Readmissions++
	err := c.store.Create(ctx, traj.Admission{Sample: a.Sample, Replica: replica, Run: a.Readmissions})
	if errors.Is(err, traj.ErrExists) {
		return nil // admitted again already (a concurrent repair)
	}
	if err != nil {
		return err
	}
	if err := c.keepSample(ctx, a); err != nil {
		return err
	}
	t, err := c.store.Load(ctx, id, 0)
	if err != nil {
		return err
	}
	n, err := traj.NextOf(t, traj.LowOnly{})
	if err != nil {
		return err
	}
	if err := traj.Publish(ctx, c.d.Pub, t.Trace, n); err != nil {
		return err
	}
	c.readmitted.Add(1)
	c.d.Log.Error("trajectory state lost: admitted again from its sample", "traj_id", id, "readmissions", a.Readmissions)
	return nil
}

// sweep ends trajectories whose state has not advanced within StallTimeout
// and re-publishes results that were never seen.
func (c *Coordinator) sweep(ctx context.Context) error {
	every4 := min(c.cfg.StallTimeout, c.cfg.ResultGrace)
	if c.cfg.RepublishAfter > 0 {
		every4 = min(every4, c.cfg.RepublishAfter)
	}
	return every(ctx, max(every4/4, 250*time.Millisecond), func() {
		ids := c.active.ids()
		prog, err := c.store.Progress(ctx, ids)
		if err != nil {
			c.d.Log.Warn("stall sweep", "error", err)
			return
		}
		now := c.d.Now()
		for _, id := range ids {
			p, ok := prog[id]
			switch {
			case !ok:
				if err := c.lost(ctx, id); err != nil {
					c.d.Log.Warn("lost trajectory", "traj_id", id, "error", err)
				}
			case p.LeaseUntil.After(now):
				// A step runs and renews its lease: it is slow, not stalled
				// or lost, and a copy of it would only be handed back.
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
			case c.cfg.RepublishAfter > 0 && now.Sub(p.UpdatedAt) > c.cfg.RepublishAfter:
				c.republish(ctx, id, p.UpdatedAt, now)
			}
		}
	})
}
