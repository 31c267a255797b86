package coordinator

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/priority"
	"github.com/actloop/actloop/pkg/schema"
)

// snapshotStats describes the newest priority snapshots published.
type snapshotStats struct {
	Version   int64          `json:"version"`
	At        time.Time      `json:"at"`
	High      map[string]int `json:"high"` // high-class size per replica
	Published int64          `json:"published"`
}

// handlePrediction updates the live view with a gen-worker's prediction,
// dropping one older than what is already known of the trajectory. A
// prediction for a newer turn also says which replica ran it.
func (c *Coordinator) handlePrediction(_ context.Context, m jetstream.Msg) error {
	p, err := schema.Decode[schema.Prediction](m.Data())
	if err != nil {
		return bus.Malformed(fmt.Errorf("prediction: %w", err))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.active[p.TrajID]
	if a == nil {
		return nil // finished meanwhile
	}
	if p.TurnSeq < a.turnSeq {
		c.stale++
		return nil
	}
	if p.TurnSeq > a.turnSeq && p.Replica != "" {
		a.fact.Replica = p.Replica // a newer turn ran there: stolen by that replica
	}
	a.turnSeq = p.TurnSeq
	a.fact.Predicted, a.fact.Turns, a.fact.Tokens = p.RemainingTokens, p.Turns, p.GenTokens
	a.fact.WaitingSince = p.At
	c.dirty = true
	return nil
}

// snapshotLoop publishes each replica's priority snapshot to NATS KV when
// the facts changed (at most once per SnapshotInterval) and at least every
// few seconds, so ageing takes effect and a missed update heals.
func (c *Coordinator) snapshotLoop(ctx context.Context) error {
	refresh := max(5*c.cfg.SnapshotInterval, 2*time.Second)
	return every(ctx, c.cfg.SnapshotInterval, func() {
		c.mu.Lock()
		due := c.dirty || c.d.Now().Sub(c.snap.At) >= refresh
		c.mu.Unlock()
		if due {
			if err := c.publishSnapshots(ctx); err != nil && ctx.Err() == nil {
				c.d.Log.Warn("publish priority snapshots", "error", err)
			}
		}
	})
}

func (c *Coordinator) publishSnapshots(ctx context.Context) error {
	now := c.d.Now()
	c.mu.Lock()
	facts := make([]priority.Fact, 0, len(c.active))
	for _, a := range c.active {
		facts = append(facts, a.fact)
	}
	version := max(now.UnixNano(), c.snap.Version+1) // increasing across restarts too
	c.dirty = false
	c.mu.Unlock()

	snaps := priority.Snapshots(c.policy, facts, c.cfg.highSlots(), version, now)
	high := map[string]int{}
	for _, r := range c.cfg.Replicas {
		s := snaps[r]
		if s == nil { // an empty high class clears the last one
			s = &priority.Snapshot{Replica: r, Version: version, At: now, High: map[string]bool{}}
		}
		b, err := s.Marshal()
		if err != nil {
			return err
		}
		if _, err := c.kv.Put(ctx, r, b); err != nil {
			c.mu.Lock()
			c.dirty = true
			c.mu.Unlock()
			return fmt.Errorf("snapshot of %s: %w", r, err)
		}
		high[r] = len(s.High)
	}
	c.mu.Lock()
	c.snap = snapshotStats{Version: version, At: now, High: high, Published: c.snap.Published + 1}
	c.mu.Unlock()
	return nil
}
