package coordinator

// adaptLimit reconsiders the admission limit from the live gen-workers'
// last heartbeats.
func (c *Coordinator) adaptLimit() {
	workers := c.members.genWorkers(c.d.Now())
	l, from, to := c.waiting.adapt(workers, c.active.count(), c.cfg.ActiveFloor(), c.cfg.ActiveCeiling(), c.cfg.ReprefillLimit)
	if to != from {
		c.d.Log.Info("admission limit adapted", "from", from, "to", to, "slots", l.Slots, "running", l.Running,
			"generated", l.Generated, "reprefilled", l.Reprefilled)
		c.poke()
	}
}
