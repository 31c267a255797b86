package coordinator

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/pkg/priority"
	"github.com/actloop/actloop/pkg/schema"
)

// snapshotStats describes the newest priority snapshots published.
type snapshotStats struct {
	Version int64          `json:"version"`
	At      time.Time      `json:"at"`
	High    map[string]int `json:"high"` // high-class size per replica
	// Held is the trajectories held per replica (ACTLOOP_HOLD); absent:
	// none.
	Held      map[string]int `json:"held,omitempty"`
	Published int64          `json:"published"`
}

// snapshotLog remembers the snapshots published, under its own lock.
type snapshotLog struct {
	mu   sync.Mutex
	last snapshotStats
}

// continueFrom makes the next version follow v (a previous leader's).
func (l *snapshotLog) continueFrom(v int64) {
	l.mu.Lock()
	l.last.Version = max(l.last.Version, v)
	l.mu.Unlock()
}

func (l *snapshotLog) get() snapshotStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

// nextVersion is a version above every one published, increasing across
// restarts too.
func (l *snapshotLog) nextVersion(now time.Time) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return max(now.UnixNano(), l.last.Version+1)
}

func (l *snapshotLog) published(version int64, at time.Time, high, held map[string]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last = snapshotStats{Version: version, At: at, High: high, Held: held, Published: l.last.Published + 1}
}

// handlePrediction updates the live view with a gen-worker's prediction,
// dropping one older than what is already known of the trajectory.
func (c *Coordinator) handlePrediction(_ context.Context, m jetstream.Msg) error {
	p, err := schema.Decode[schema.Prediction](m.Data())
	if err != nil {
		return bus.Malformed(fmt.Errorf("prediction: %w", err))
	}
	c.active.predicted(p)
	if p.Finishing {
		c.poke() // its KV is free for admission
	}
	return nil
}

// snapshotLoop publishes each replica's priority snapshot to NATS KV when
// the facts changed (at most once per SnapshotInterval) and at least every
// few seconds, so ageing takes effect and a missed update heals.
func (c *Coordinator) snapshotLoop(ctx context.Context) error {
	refresh := max(5*c.cfg.SnapshotInterval, 2*time.Second)
	return every(ctx, c.cfg.SnapshotInterval, func() {
		facts, kv, due := c.active.facts(c.d.Now().Sub(c.snaps.get().At) >= refresh)
		if !due {
			return
		}
		if err := c.publishSnapshots(ctx, facts, kv); err != nil && ctx.Err() == nil {
			c.active.touch() // try again next time
			c.d.Log.Warn("publish priority snapshots", "error", err)
		}
	})
}

// publishSnapshots publishes each replica's snapshot from facts and kv (the
// active trajectories' facts and footprints, alike ordered): its high class
// and, under ACTLOOP_HOLD, the trajectories it holds.
func (c *Coordinator) publishSnapshots(ctx context.Context, facts []priority.Fact, kv []priority.Footprint) error {
	now := c.d.Now()
	if c.cfg.RankBy == priority.RankByTime {
		c.pace.inSeconds(facts, c.members.genWorkers(now))
	}
	version := c.snaps.nextVersion(now)
	order := c.policy.Order(facts, now)
	snaps := priority.SnapshotsOf(facts, order, c.cfg.highSlots(), version, now)
	held := c.hold(facts, kv, order, now)
	high, heldOn := map[string]int{}, map[string]int{}
	// Every known replica, and any other that holds trajectories: a
	// replica that left gets its high class cleared.
	names := c.members.replicas()
	for r := range snaps {
		if !slices.Contains(names, r) {
			names = append(names, r)
		}
	}
	for _, r := range names {
		s := snaps[r]
		if s == nil { // an empty high class clears the last one
			s = &priority.Snapshot{Replica: r, Version: version, At: now, High: map[string]bool{}}
		}
		s.Held = held[r]
		heldOn[r] = len(s.Held)
		b, err := s.Marshal()
		if err != nil {
			return err
		}
		if _, err := c.kv.Put(ctx, r, b); err != nil {
			return fmt.Errorf("snapshot of %s: %w", r, err)
		}
		high[r] = len(s.High)
	}
	c.snaps.published(version, now, high, heldOn)
	return nil
}

// hold decides which active trajectories are held (priority.KVPools.Hold over kv
// in order, the policy's), records it, and returns the held ones by
// replica; none unless ACTLOOP_HOLD is on and admission goes by KV.
func (c *Coordinator) hold(facts []priority.Fact, kv []priority.Footprint, order []int, now time.Time) map[string]map[string]bool {
	ids := map[string]bool{}
	out := map[string]map[string]bool{}
	if _, capacity, ok := c.byKV(now); ok && c.cfg.Hold {
		ordered := make([]priority.Footprint, len(order))
		for k, i := range order {
			ordered[k] = kv[i]
		}
		pools := priority.KVPools{Capacity: capacity, Budget: c.cfg.KVBudget}
		for k, h := range pools.Hold(ordered, priority.PerTurn(ordered)) {
			if f := facts[order[k]]; h {
				ids[f.TrajID] = true
				if out[f.Replica] == nil {
					out[f.Replica] = map[string]bool{}
				}
				out[f.Replica][f.TrajID] = true
			}
		}
	}
	c.active.hold(ids)
	return out
}
