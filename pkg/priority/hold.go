package priority

import (
	"math"
	"time"
)

// Holding: admission made reversible. Admission by KV (KVPools.Admit)
// commits a trajectory to a replica on an expectation of how far its
// context will grow; a batch admitted together grows together, and when the
// contexts outgrow the pool the server evicts the contexts of trajectories
// waiting on their commands and prefills them again at their next turn,
// over and over. Hold stops that: while the contexts on a replica would
// overfill its pool, the trajectories last in policy order are held (their
// gen steps wait, their contexts may be evicted once) until the others have
// made room, and no new sample is admitted to that replica meanwhile
// (KVPools.Admit). With over-admission undone this way, admission can
// start a batch optimistically (see KVPools.fresh) and a small batch that
// fits the pools whole starts whole.

// HoldAbove and ReleaseBelow are Hold's thresholds, as shares of budget ×
// capacity: a replica holds trajectories while its unheld contexts' need
// exceeds HoldAbove of it, and lets a held one go when the need with it
// stays within ReleaseBelow of it, so that a trajectory is not held and let
// go turn after turn.
const (
	HoldAbove    = 1.0
	ReleaseBelow = 0.9
)

// HeldRetry is how soon a gen-worker is delivered again a gen step of a
// held trajectory that it handed back (and so how long after its release
// a held trajectory's step waits at most).
const HeldRetry = time.Second

// Hold returns which trajectories are held after this decision, given fs in
// policy order (best first) with each one's Held as decided before, p's
// pools (Capacity, in tokens, and the share Budget the contexts may fill)
// and the context tokens a model call adds (perTurn, PerTurn).
//
// A trajectory's need is its context after its last reply and one turn's
// growth (the observation not yet in its reported context, and its next
// reply); a finishing one needs nothing and is never held. On each replica,
// while the need of the unheld ones exceeds HoldAbove × budget × capacity,
// the last unheld one in policy order is held; then the held ones are let
// go in policy order while the need with each stays within ReleaseBelow ×
// budget × capacity, stopping at the first that does not fit (so that a
// large one is not passed over for ever). A replica without a capacity
// (not reported) holds nothing.
//
// With KV residency (p.Total set, for servers with a host-memory KV tier),
// an Offloadable trajectory's need counts p.OnDevice of itself against the
// device pool, and every unheld trajectory's whole need must also fit
// budget × Total: one is held while either is over, an Offloadable one
// only while Total is (its command is running: holding it would free the
// device only once it generates again).
func (p KVPools) Hold(fs []Footprint, perTurn float64) []bool {
	held := make([]bool, len(fs))
	byReplica := map[string][]int{}
	for i, f := range fs {
		if f.Finishing || p.Capacity[f.Replica] <= 0 {
			continue
		}
		byReplica[f.Replica] = append(byReplica[f.Replica], i)
		held[i] = f.Held
	}
	need := func(i int) float64 { return float64(fs[i].Context) + perTurn }
	device := func(i int) float64 {
		if fs[i].Offloadable && p.Total != nil {
			return need(i) * p.OnDevice
		}
		return need(i)
	}
	for r, idx := range byReplica {
		full, whole := p.Budget*float64(p.Capacity[r]), math.Inf(1)
		if p.Total != nil {
			whole = p.Budget * float64(p.Total[r])
		}
		dev, all := 0.0, 0.0
		for _, i := range idx {
			if !held[i] {
				dev, all = dev+device(i), all+need(i)
			}
		}
		for k := len(idx) - 1; k >= 0 && (dev > HoldAbove*full || all > HoldAbove*whole); k-- {
			i := idx[k]
			if held[i] || (all <= HoldAbove*whole && fs[i].Offloadable && p.Total != nil) {
				continue // the device alone is over: holding one in its command frees no room there
			}
			held[i] = true
			dev, all = dev-device(i), all-need(i)
		}
		for _, i := range idx {
			if !held[i] {
				continue
			}
			if dev+device(i) > ReleaseBelow*full || all+need(i) > ReleaseBelow*whole {
				break
			}
			held[i] = false
			dev, all = dev+device(i), all+need(i)
		}
	}
	return held
}
