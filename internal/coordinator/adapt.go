package coordinator

import "github.com/actloop/actloop/internal/priority"

// adaptState remembers the gen-workers' counters at the last adaptation.
type adaptState struct {
	generated, reprefilled map[string]int64 // by worker key
}

// adaptLimit reconsiders the admission limit from the last heartbeats.
func (c *Coordinator) adaptLimit() {
	now := c.d.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.adapt.generated == nil {
		c.adapt = adaptState{generated: map[string]int64{}, reprefilled: map[string]int64{}}
	}
	var l priority.Load
	for key, h := range c.hearts {
		if at, ok := c.beats[h.Replica][h.Worker]; !ok || now.Sub(at) > c.cfg.ReplicaTimeout {
			continue
		}
		l.Slots += h.Slots
		l.Running += h.Running
		l.Generated += priority.Grown(h.GeneratedTokens, c.adapt.generated[key])
		l.Reprefilled += priority.Grown(h.ReprefilledTokens, c.adapt.reprefilled[key])
		c.adapt.generated[key], c.adapt.reprefilled[key] = h.GeneratedTokens, h.ReprefilledTokens
	}
	binding := len(c.waiting) > 0 && len(c.active) >= c.limit
	next := priority.NextLimit(c.limit, c.cfg.ActiveFloor(), c.cfg.ActiveCeiling(), l, binding, c.cfg.ReprefillLimit)
	if next != c.limit {
		c.d.Log.Info("admission limit adapted", "from", c.limit, "to", next, "slots", l.Slots, "running", l.Running,
			"generated", l.Generated, "reprefilled", l.Reprefilled)
		c.limit = next
		c.poke()
	}
}
