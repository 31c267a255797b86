package coordinator

import (
	"context"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/schema"
)

// watchHeartbeats follows the gen-workers' heartbeats in NATS KV until ctx
// ends. Liveness is judged by when a heartbeat arrived here, so clocks on
// other hosts do not matter.
func (c *Coordinator) watchHeartbeats(ctx context.Context) error {
	return bus.WatchKV(ctx, c.d.JS, bus.BucketHeartbeats, func(e jetstream.KeyValueEntry, initial bool) {
		if id, ok := strings.CutPrefix(e.Key(), "env."); ok {
			c.envBeat(e, id, initial)
			return
		}
		parts := strings.SplitN(e.Key(), ".", 3)
		if len(parts) != 3 || parts[0] != "gen" {
			return
		}
		replica, worker := parts[1], parts[2]
		c.mu.Lock()
		if e.Operation() == jetstream.KeyValuePut {
			if h, err := schema.Decode[schema.Heartbeat](e.Value()); err == nil {
				if c.beats[replica] == nil {
					c.beats[replica] = map[string]time.Time{}
				}
				at := c.d.Now()
				if initial && at.Sub(e.Created()) > c.cfg.ReplicaTimeout {
					// An old entry, perhaps of a worker that died without
					// removing its key: not a sign of life. (A live worker's
					// next beat arrives as an update.)
					at = e.Created()
				}
				c.beats[replica][worker] = at
				c.hearts[e.Key()] = h
			}
		} else {
			if ws := c.beats[replica]; ws != nil {
				delete(ws, worker) // the worker stopped
			}
			delete(c.hearts, e.Key())
		}
		c.mu.Unlock()
		c.poke()
	})
}

// live reports whether replica has a gen-worker whose heartbeat is recent.
// A replica never heard from is live during the first ReplicaTimeout after
// start, while its workers come up. Callers hold c.mu.
func (c *Coordinator) live(replica string, now time.Time) bool {
	ws, heard := c.beats[replica]
	if !heard {
		return now.Sub(c.started) < c.cfg.ReplicaTimeout
	}
	for _, at := range ws {
		if now.Sub(at) <= c.cfg.ReplicaTimeout {
			return true
		}
	}
	return false
}

// rebalance moves the trajectories of replicas that went down to the
// least-loaded live ones, and re-publishes the gen step of those waiting for
// one (the copy queued on the dead replica stays there; a gen-worker that
// finds a step for a replica the trajectory left drops it).
func (c *Coordinator) rebalance(ctx context.Context) {
	now := c.d.Now()
	type move struct{ id, to string }
	var moves []move
	c.mu.Lock()
	planned := map[string]int{} // moves planned this round, so they spread
	for id, a := range c.active {
		if a.fact.Replica == "" || c.live(a.fact.Replica, now) {
			continue
		}
		to := c.leastLoadedPlus(planned)
		if to == "" {
			break // nothing is live
		}
		planned[to]++
		moves = append(moves, move{id, to})
	}
	c.mu.Unlock()
	if len(moves) > 0 {
		c.d.Log.Warn("replica down: moving its trajectories", "moved", len(moves))
	}
	for _, m := range moves {
		// Only a move that reached Redis counts; a failed one is planned
		// again next round.
		if err := c.d.Store.SetReplica(ctx, m.id, m.to); err != nil {
			c.d.Log.Warn("move trajectory", "traj_id", m.id, "replica", m.to, "error", err)
			continue
		}
		c.mu.Lock()
		if a := c.active[m.id]; a != nil {
			a.fact.Replica, a.movedAt = m.to, now
			c.moved++
			c.dirty = true
		}
		c.mu.Unlock()
	}
	// Re-send the gen step of recently moved trajectories waiting for one:
	// its copy on the dead replica will not run. (Steps published after the
	// move go to the new replica: a commit returns the replica as of then.)
	var resend []string
	c.mu.Lock()
	for id, a := range c.active {
		if !a.movedAt.IsZero() && now.Sub(a.movedAt) < 10*time.Second {
			resend = append(resend, id)
		}
	}
	c.mu.Unlock()
	for _, id := range resend {
		t, err := c.d.Store.Load(ctx, id, 0)
		if err != nil || t.Status != traj.StatusNeedsGeneration {
			continue
		}
		n, err := traj.NextOf(t, traj.LowOnly{})
		if err == nil {
			err = traj.Publish(ctx, c.d.Pub, t.Trace, n)
		}
		if err != nil {
			c.d.Log.Warn("re-send moved gen step", "traj_id", id, "error", err)
		}
	}
}

// envBeat records an env-worker's heartbeat. A removed entry (the worker
// stopped) counts as its last sign of life: it may come back under the same
// id within EnvWorkerTimeout and keep its sandboxes.
func (c *Coordinator) envBeat(e jetstream.KeyValueEntry, id string, initial bool) {
	at := c.d.Now()
	if initial && at.Sub(e.Created()) > c.cfg.EnvWorkerTimeout {
		at = e.Created() // an old entry: not a sign of life
	}
	c.mu.Lock()
	c.envSeen[id] = at
	c.mu.Unlock()
}

// moveFromDeadEnvWorkers gives the trajectories of env-workers not heard
// from for EnvWorkerTimeout to live ones (the least loaded first), which
// rebuild their sandboxes by replaying their commands; a step waiting on the
// dead worker's queue is published again to the new owner.
func (c *Coordinator) moveFromDeadEnvWorkers(ctx context.Context) {
	if c.cfg.EnvWorkerTimeout <= 0 {
		return
	}
	now := c.d.Now()
	dead, live := map[string]bool{}, map[string]int{}
	c.mu.Lock()
	for id, at := range c.envSeen {
		if now.Sub(at) > c.cfg.EnvWorkerTimeout {
			dead[id] = true
		} else {
			live[id] = 0
		}
	}
	ids := make([]string, 0, len(c.active))
	for id := range c.active {
		ids = append(ids, id)
	}
	c.mu.Unlock()
	if len(dead) == 0 || len(live) == 0 {
		return
	}
	prog, err := c.d.Store.Progress(ctx, ids)
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
		moved, err := c.d.Store.SetOwner(ctx, id, from, to)
		if err != nil || !moved {
			continue
		}
		live[to]++
		c.mu.Lock()
		c.envMoved++
		c.mu.Unlock()
		c.d.Log.Warn("env-worker gone: moving its trajectory", "traj_id", id, "from", from, "to", to)
		t, err := c.d.Store.Load(ctx, id, 0)
		if err != nil {
			continue
		}
		next, err := traj.NextOf(t, traj.LowOnly{})
		if err != nil || next.Subject != bus.SubjectEnv(to) {
			continue // not waiting for an env step: the next one goes to the new owner
		}
		next.MsgID += ":moved-" + to
		if err := traj.Publish(ctx, c.d.Pub, t.Trace, next); err != nil {
			c.d.Log.Warn("re-send moved env step", "traj_id", id, "error", err)
		}
	}
}
