package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/schema"
)

// Abort ends the trajectories req names, and every waiting or running
// member of its groups, each with a result of status aborted (reward 0, no
// trainable tokens): a trainer that has what it needs from a batch stops
// the rest. A waiting sample is answered without running; a running
// trajectory is committed as aborted (a step in flight then commits
// nothing) and its sandbox closed; one whose state is lost is answered
// from what the index keeps of it. Admission is held meanwhile, so that no
// sample named here starts while it is being aborted. Ids that are neither
// waiting nor running (finished, or unknown) are listed as not found, and
// those that could not be aborted (Redis or NATS failing) as failed, with
// the error.
func (c *Coordinator) Abort(ctx context.Context, req schema.AbortRequest) (schema.AbortReply, error) {
	if err := req.Validate(); err != nil {
		return schema.AbortReply{}, err
	}
	c.admitMu.Lock()
	defer c.admitMu.Unlock()
	reason := "aborted by the trainer"
	if req.Reason != "" {
		reason += ": " + req.Reason
	}
	ids := slices.Clone(req.TrajIDs)
	if len(req.GroupIDs) > 0 {
		groups := make(map[string]bool, len(req.GroupIDs))
		for _, g := range req.GroupIDs {
			groups[g] = true
		}
		ids = append(ids, c.waiting.inGroups(groups)...)
		ids = append(ids, c.active.inGroups(groups)...)
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	reply := schema.AbortReply{Aborted: []string{}}
	var running []string // ended while running: a generation of theirs may be on a server
	for _, id := range ids {
		_, active := c.active.entry(id)
		ended, err := c.abortOne(ctx, id, reason)
		switch {
		case err != nil:
			reply.Failed = append(reply.Failed, schema.AbortFailed{ID: id, Error: err.Error()})
		case ended:
			reply.Aborted = append(reply.Aborted, id)
			if active {
				running = append(running, id)
			}
		default:
			reply.NotFound = append(reply.NotFound, id)
		}
	}
	c.cancelGenerations(running)
	if len(reply.Aborted) > 0 {
		c.d.Log.Info("trajectories aborted by the trainer", "aborted", len(reply.Aborted), "reason", req.Reason)
	}
	c.poke()
	if len(reply.Failed) > 0 && len(reply.Aborted) == 0 {
		return reply, fmt.Errorf("abort %s: %s", reply.Failed[0].ID, reply.Failed[0].Error)
	}
	return reply, nil
}

// cancelGenerations tells the gen-workers that trajectories ids have
// ended, so that each aborts a generation it runs for one of them
// (schema.Cancel on bus.SubjectCancel, MaxCancelIDs at a time). At most
// once: a generation the message misses runs to its end, and its output is
// not committed.
func (c *Coordinator) cancelGenerations(ids []string) {
	for chunk := range slices.Chunk(ids, schema.MaxCancelIDs) {
		b, err := json.Marshal(schema.Cancel{V: schema.Version, TrajIDs: chunk})
		if err == nil {
			err = c.d.NC.Publish(bus.SubjectCancel, b)
		}
		if err != nil {
			c.d.Log.Warn("cancel generations: their servers finish them", "trajectories", len(chunk), "error", err)
		}
	}
}

// abortOne ends id if it is running or waiting, and reports whether it did.
// A trajectory admitted is running even while its sample is still listed
// as waiting (an admission half done): it is ended as running, and no
// longer waits.
func (c *Coordinator) abortOne(ctx context.Context, id, reason string) (bool, error) {
	if e, ok := c.active.entry(id); ok {
		for attempt := 0; ; attempt++ {
			t, err := c.store.Load(ctx, id, traj.WithAll)
			switch {
			case errors.Is(err, traj.ErrNotFound): // its state is lost: answered from the index
				h := e.Head(id)
				h.Status, h.Reason, h.FinishedAt = schema.StatusAborted, reason, c.d.Now().UTC()
				if err := c.d.Results.Publish(ctx, traj.FallbackResult(h), schema.MsgID(id, 0, "aborted")); err != nil {
					return false, err
				}
			case err != nil:
				return false, err
			case t.Status.Terminal():
				return false, nil // it ended already: its result stands
			default:
				err = c.end(ctx, t, schema.StatusAborted, reason)
				if errors.Is(err, traj.ErrStale) && attempt < 5 {
					continue // it moved meanwhile; look again
				}
				if err != nil {
					return false, err
				}
			}
			break
		}
		if c.waiting.get(id) != nil {
			return true, c.unwait(ctx, id)
		}
		return true, nil
	}
	if w := c.waiting.get(id); w != nil {
		return true, c.abortWaiting(ctx, w, reason)
	}
	return false, nil
}

// abortWaiting answers a waiting sample with a result of status aborted
// and forgets it.
func (c *Coordinator) abortWaiting(ctx context.Context, w *waitingSample, reason string) error {
	s, now := w.Sample, c.d.Now().UTC()
	h := traj.ActiveEntryOf(s, "").Head(s.ID)
	h.Status, h.Reason, h.AdmittedAt, h.FinishedAt = schema.StatusAborted, reason, now, now
	r := traj.FallbackResult(h)
	if err := c.d.Results.Publish(ctx, r, schema.MsgID(s.ID, 0, "aborted")); err != nil {
		return err
	}
	// Never active, so handleResult does not count it.
	c.observeResult(r.ResultHead)
	return c.unwait(ctx, s.ID)
}
