package coordinator

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/priority"
)

// rebalance moves the trajectories of replicas that went down to the
// least-loaded live ones, and re-publishes the gen step of those waiting for
// one (the copy queued on the dead replica stays there; a gen-worker that
// finds a step for a replica the trajectory left drops it).
func (c *Coordinator) rebalance(ctx context.Context) {
	now := c.d.Now()
	live := c.members.liveReplicas(now)
	var ids []string
	if len(live) < len(c.members.replicas()) || c.active.anyOn(func(r string) bool { return !c.members.live(r, now) }) {
		ids = c.stranded(ctx, now)
	}
	// Each to the least-loaded live replica counting those before it, so
	// they spread; none when nothing is live.
	to := priority.AssignReplicas(live, c.active.load(), len(ids))
	moves := make(map[string]string, len(to))
	for i, r := range to {
		moves[ids[i]] = r
	}
	if len(moves) > 0 {
		c.d.Log.Warn("replica down: moving its trajectories", "moved", len(moves))
	}
	for id, to := range moves {
		// Only a move that reached Redis counts; a failed one is planned
		// again next round.
		if err := c.store.SetReplica(ctx, id, to); err != nil {
			c.d.Log.Warn("move trajectory", "traj_id", id, "replica", to, "error", err)
			continue
		}
		if c.active.moved(id, to, now) {
			c.moved.Add(1)
		}
	}
	c.resendMoved(ctx, now)
}

// stranded lists the active trajectories on replicas that are down, as
// their state in Redis has it, in order. The coordinator's own view of
// where each runs follows the progress reports, which can come after a
// move (a report of the turn run before it), so it is set from the
// state here.
func (c *Coordinator) stranded(ctx context.Context, now time.Time) []string {
	ids := c.active.ids()
	prog, err := c.store.Progress(ctx, ids)
	if err != nil {
		c.d.Log.Warn("replica failover", "error", err)
		return nil
	}
	var out []string
	for _, id := range ids {
		p, ok := prog[id]
		if !ok || p.Status.Terminal() || p.Replica == "" {
			continue
		}
		c.active.placed(id, p.Replica)
		if !c.members.live(p.Replica, now) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// resendMoved re-sends the gen step of the trajectories moved in the last
// ten seconds that wait for one.
func (c *Coordinator) resendMoved(ctx context.Context, now time.Time) {
	// Re-send the gen step of recently moved trajectories waiting for one:
	// its copy on the dead replica will not run. (Steps published after the
	// move go to the new replica: a commit returns the replica as of then.)
	for id, at := range c.active.movedSince(now.Add(-10 * time.Second)) {
		t, err := c.store.Load(ctx, id, 0)
		if err != nil || t.Status != traj.StatusNeedsGeneration {
			continue
		}
		n, err := traj.NextOf(t, traj.LowOnly{})
		if err == nil {
			n.MsgID = movedMsgID(n.MsgID, at)
			err = traj.Publish(ctx, c.d.Pub, t.Trace, n)
		}
		if err != nil {
			c.d.Log.Warn("re-send moved gen step", "traj_id", id, "error", err)
		}
	}
}

// moveFromDeadEnvWorkers gives the trajectories of env-workers not heard
// from for EnvWorkerTimeout to live ones (the least loaded first), which
// rebuild their sandboxes by replaying their commands; a step waiting on the
// dead worker's queue is published again to the new owner.
func (c *Coordinator) moveFromDeadEnvWorkers(ctx context.Context) {
	if c.cfg.EnvWorkerTimeout <= 0 {
		return
	}
	dead, live := c.members.envWorkers(c.d.Now())
	if len(dead) == 0 || len(live) == 0 {
		return
	}
	ids := c.active.ids()
	prog, err := c.store.Progress(ctx, ids)
	if err != nil {
		c.d.Log.Warn("env-worker failover", "error", err)
		return
	}
	var orphans []string
	for _, id := range ids {
		p, ok := prog[id]
		switch {
		case !ok || p.Status.Terminal():
		case dead[p.Owner]:
			orphans = append(orphans, id)
		case p.Owner != "":
			if _, ok := live[p.Owner]; ok {
				live[p.Owner]++
			}
		}
	}
	for _, id := range orphans {
		to := ""
		for w, n := range live {
			if to == "" || n < live[to] || (n == live[to] && w < to) {
				to = w
			}
		}
		from := prog[id].Owner
		moved, err := c.store.SetOwner(ctx, id, from, to)
		if err != nil || !moved {
			continue
		}
		live[to]++
		c.envMoved.Add(1)
		c.d.Log.Warn("env-worker gone: moving its trajectory", "traj_id", id, "from", from, "to", to)
		t, err := c.store.Load(ctx, id, 0)
		if err != nil {
			continue
		}
		next, err := traj.NextOf(t, traj.LowOnly{})
		if err != nil || next.Subject != bus.SubjectEnv(to) {
			continue // not waiting for an env step: the next one goes to the new owner
		}
		next.MsgID = movedMsgID(next.MsgID, c.d.Now())
		if err := traj.Publish(ctx, c.d.Pub, t.Trace, next); err != nil {
			c.d.Log.Warn("re-send moved env step", "traj_id", id, "error", err)
		}
	}
}

// movedMsgID is the message id of a step sent again after a move at at:
// one of its own for each move, so that it is no duplicate, within the
// stream's duplicate window, of the step first sent to the same place
// (a trajectory moved back to the replica or env-worker it left, whose
// copy of the step was dropped meanwhile), while the copies re-sent for
// one move are duplicates of one another.
func movedMsgID(id string, at time.Time) string {
	return fmt.Sprintf("%s:moved-%d", id, at.UnixNano())
}

// replicaNames is the set of names and of the replicas load counts.
func replicaNames(names []string, load map[string]int) map[string]bool {
	out := make(map[string]bool, len(names)+len(load))
	for _, r := range names {
		out[r] = true
	}
	for r := range load {
		out[r] = true
	}
	return out
}

// replicaSlots is the generation slots of each live replica: what its
// live gen-workers announce in their heartbeats, or ACTLOOP_SLOTS for an
// expected replica not heard from yet (live while its workers come up).
func (c *Coordinator) replicaSlots(now time.Time) map[string]int {
	announced := c.members.slots(now)
	out := map[string]int{}
	for _, r := range c.members.liveReplicas(now) {
		if n := announced[r]; n > 0 {
			out[r] = n
		} else {
			out[r] = c.cfg.Slots
		}
	}
	return out
}

// activeBounds is the admission limit's floor and ceiling now
// (priority.ActiveBounds) over the slots of the live replicas
// (replicaSlots), so that a replica that joins raises them and one that
// leaves lowers them; with no replica live, those of one replica of
// ACTLOOP_SLOTS. ACTLOOP_MAX_ACTIVE and ACTLOOP_MAX_ACTIVE_CEILING, when
// set, bound them as they do Config.ActiveFloor.
func (c *Coordinator) activeBounds(now time.Time) (floor, ceiling int) {
	total := 0
	for _, n := range c.replicaSlots(now) {
		total += n
	}
	if total == 0 {
		total = c.cfg.Slots
	}
	return priority.ActiveBounds(c.cfg.Scheduling, total, 1, c.cfg.MaxActive, c.cfg.MaxActiveCeiling)
}
