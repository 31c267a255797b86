package coordinator

// adaptState remembers the gen-workers' counters at the last adaptation.
type adaptState struct {
	generated, reprefilled map[string]int64 // by worker key
}

// load is what the gen-workers reported over one adaptation interval.
type load struct {
	slots, running         int   // over live workers, at their last heartbeat
	generated, reprefilled int64 // tokens during the interval
}

// nextLimit is the admission limit after an interval with l: it falls (by a
// tenth, at least one) while re-prefilled tokens exceed reprefillLimit of the
// tokens generated — over-subscription is evicting contexts from the prefix
// caches — and rises by the idle slots while slots sit idle, samples wait
// and the limit binds, as long as re-prefill stays well below the bound.
// It stays within [floor, ceiling].
func nextLimit(limit, floor, ceiling int, l load, binding bool, reprefillLimit float64) int {
	ratio := float64(l.reprefilled) / float64(max(l.generated, 1))
	switch idle := l.slots - l.running; {
	case l.generated > 0 && ratio > reprefillLimit:
		limit -= max(1, limit/10)
	case binding && idle > 0 && ratio <= reprefillLimit/2:
		limit += idle
	}
	return min(max(limit, floor), ceiling)
}

// adaptLimit reconsiders the admission limit from the last heartbeats.
func (c *Coordinator) adaptLimit() {
	now := c.d.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.adapt.generated == nil {
		c.adapt = adaptState{generated: map[string]int64{}, reprefilled: map[string]int64{}}
	}
	var l load
	for key, h := range c.hearts {
		if at, ok := c.beats[h.Replica][h.Worker]; !ok || now.Sub(at) > c.cfg.ReplicaTimeout {
			continue
		}
		l.slots += h.Slots
		l.running += h.Running
		l.generated += delta(h.GeneratedTokens, c.adapt.generated[key])
		l.reprefilled += delta(h.ReprefilledTokens, c.adapt.reprefilled[key])
		c.adapt.generated[key], c.adapt.reprefilled[key] = h.GeneratedTokens, h.ReprefilledTokens
	}
	binding := len(c.waiting) > 0 && len(c.active) >= c.limit
	next := nextLimit(c.limit, c.cfg.ActiveFloor(), c.cfg.ActiveCeiling(), l, binding, c.cfg.ReprefillLimit)
	if next != c.limit {
		c.d.Log.Info("admission limit adapted", "from", c.limit, "to", next, "slots", l.slots, "running", l.running,
			"generated", l.generated, "reprefilled", l.reprefilled)
		c.limit = next
		c.poke()
	}
}

// delta is how much a cumulative counter grew; a counter that went back
// (its worker restarted) grew by its whole value.
func delta(now, before int64) int64 {
	if now < before {
		return now
	}
	return now - before
}
