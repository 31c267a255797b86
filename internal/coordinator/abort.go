package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/schema"
)

// Abort ends the trajectories req names, and every waiting or running
// member of its groups, each with a result of status aborted (reward 0, no
// trainable tokens): a trainer that has what it needs from a batch stops
// the rest. A waiting sample is answered without running; a running
// trajectory is committed as aborted (a step in flight then commits
// nothing) and its sandbox closed. Admission is held meanwhile, so that no
// sample named here starts while it is being aborted. Ids that are neither
// waiting nor running (finished, or unknown) are listed as not found.
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
		ids = append(ids, c.waiting.inGroups(req.GroupIDs)...)
		ids = append(ids, c.active.inGroups(req.GroupIDs)...)
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	reply := schema.AbortReply{Aborted: []string{}}
	var errs []error
	for _, id := range ids {
		var err error
		switch w := c.waiting.get(id); {
		case w != nil:
			err = c.abortWaiting(ctx, w, reason)
		case c.active.has(id):
			err = c.end(ctx, id, schema.StatusAborted, reason)
		default:
			reply.NotFound = append(reply.NotFound, id)
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("abort %s: %w", id, err))
			continue
		}
		reply.Aborted = append(reply.Aborted, id)
	}
	if len(reply.Aborted) > 0 {
		c.d.Log.Info("trajectories aborted by the trainer", "aborted", len(reply.Aborted), "reason", req.Reason)
	}
	c.poke()
	return reply, errors.Join(errs...)
}

// abortWaiting answers a waiting sample with a result of status aborted
// and forgets it.
func (c *Coordinator) abortWaiting(ctx context.Context, w *waitingSample, reason string) error {
	s, now := w.Sample, c.d.Now().UTC()
	r := traj.FallbackResult(schema.ResultHead{TrajID: s.ID, GroupID: s.GroupID, GroupIndex: s.GroupIndex,
		GroupSize: s.GroupSize, Family: s.Family, Purpose: purposeOf(s.Purpose), Status: schema.StatusAborted,
		Reason: reason, AdmittedAt: now, FinishedAt: now})
	r.SampleID = s.ID
	if err := c.d.Results.Publish(ctx, r, schema.MsgID(s.ID, 0, "aborted")); err != nil {
		return err
	}
	// Never active, so handleResult does not count it.
	c.observeResult(r.ResultHead)
	return c.unwait(ctx, s.ID)
}
