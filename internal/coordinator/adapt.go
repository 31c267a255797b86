package coordinator

// adaptLimit reconsiders the admission limit from the live gen-workers'
// last heartbeats.
func (c *Coordinator) adaptLimit() {
	now := c.d.Now()
	workers := c.members.genWorkers(now)
	floor, ceiling := c.activeBounds(now)
	l, from, to := c.waiting.adapt(workers, c.active.count(), floor, ceiling, c.cfg.ReprefillLimit)
	if to != from {
		c.d.Log.Info("admission limit adapted", "from", from, "to", to, "slots", l.Slots, "running", l.Running,
			"generated", l.Generated, "reprefilled", l.Reprefilled)
		c.poke()
	}
}
