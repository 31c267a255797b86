package sched

// Admission decisions: how many samples to admit, how the admission limit
// adapts, and which replica each new trajectory goes to. Pure functions of
// their inputs, so the coordinator and a virtual-time simulator call the
// same code.

// Scheduling modes (ACTLOOP_SCHEDULING), siiRL-agentic's
// enable_action_level_scheduling.
const (
	// SchedulingAction: action-level scheduling: admission adapts between a
	// floor of 1.5 × the generation slots (so sandbox start-up overlaps
	// generation) and a ceiling, and a high-priority step may preempt a
	// low-priority generation.
	SchedulingAction = "action"
	// SchedulingTrajectory: a trajectory holds a generation slot for its
	// whole life: exactly as many are admitted as there are slots, and
	// nothing is preempted.
	SchedulingTrajectory = "trajectory"
)

// ActiveBounds is the admission limit's floor and ceiling for a scheduling
// mode on replicas × slots generation slots: under SchedulingTrajectory
// both are the slots; under SchedulingAction the floor is maxActive, or
// 1.5 × the slots when 0, and the ceiling maxActiveCeiling (at least the
// floor), or 3 × the floor when 0.
func ActiveBounds(scheduling string, slots, replicas, maxActive, maxActiveCeiling int) (floor, ceiling int) {
	if scheduling == SchedulingTrajectory {
		return slots * replicas, slots * replicas
	}
	floor = maxActive
	if floor <= 0 {
		floor = (3*slots*replicas + 1) / 2
	}
	if maxActiveCeiling > 0 {
		return floor, max(maxActiveCeiling, floor)
	}
	return floor, 3 * floor
}

// Load is what the gen-workers reported over one adaptation interval.
type Load struct {
	Slots, Running         int   // over live workers, at their last heartbeat
	Generated, Reprefilled int64 // tokens during the interval
}

// NextLimit is the admission limit after an interval with l: it falls (by a
// tenth, at least one) while re-prefilled tokens exceed reprefillLimit of the
// tokens generated — over-subscription is evicting contexts from the prefix
// caches — and rises by the idle slots while slots sit idle, samples wait
// and the limit binds, as long as re-prefill stays well below the bound.
// It stays within [floor, ceiling].
func NextLimit(limit, floor, ceiling int, l Load, binding bool, reprefillLimit float64) int {
	ratio := float64(l.Reprefilled) / float64(max(l.Generated, 1))
	switch idle := l.Slots - l.Running; {
	case l.Generated > 0 && ratio > reprefillLimit:
		limit -= max(1, limit/10)
	case binding && idle > 0 && ratio <= reprefillLimit/2:
		limit += idle
	}
	return min(max(limit, floor), ceiling)
}

// Grown is how much a cumulative counter grew from before to now; a
// counter that went back (its worker restarted) grew by its whole value.
func Grown(now, before int64) int64 {
	if now < before {
		return now
	}
	return now - before
}

// StalenessRoom is how many more trajectories may be admitted before more
// would exist than the trainer can consume while they are fresh, as AReaL's
// staleness manager bounds it: (maxStaleness + weightVersion + 1) ×
// batchSize minus those admitted so far (finished and active); -1 without a
// bound (batchSize 0 or maxStaleness < 0). Weight versions count the
// trainer's steps from 0.
func StalenessRoom(maxStaleness, weightVersion int64, batchSize int, admitted int64) int {
	if batchSize == 0 || maxStaleness < 0 {
		return -1
	}
	return int(max((maxStaleness+weightVersion+1)*int64(batchSize)-admitted, 0))
}

// Admissible is how many waiting samples to admit now: the room under the
// limit, and under the staleness room when there is a bound (room >= 0).
func Admissible(limit, active, room int) int {
	free := limit - active
	if room >= 0 {
		free = min(free, room)
	}
	return max(free, 0)
}

// LeastLoaded is the replica of live with the fewest trajectories by load,
// the first in live's order among equals; "" when none is live.
func LeastLoaded(live []string, load map[string]int) string {
	best := ""
	for _, r := range live {
		if best == "" || load[r] < load[best] {
			best = r
		}
	}
	return best
}

// AssignReplicas returns the replicas of n new trajectories, each the least
// loaded of live counting those before it (load is updated); nil when none
// is live.
func AssignReplicas(live []string, load map[string]int, n int) []string {
	if len(live) == 0 {
		return nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = LeastLoaded(live, load)
		load[out[i]]++
	}
	return out
}
