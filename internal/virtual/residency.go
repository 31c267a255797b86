package virtual

import (
	"github.com/actloop/actloop/pkg/priority"
)

// KV residency (issue 29, item 5): with a host tier on the servers (SGLang's
// hierarchical cache), the context of a trajectory whose command is running
// in its sandbox need not stay in the device pool: the server evicts it to
// host memory (at once under write-through, where it is already there) and
// loads it back when the trajectory's next generation arrives. Admission
// then need not count every admitted context against the device pool, only
// what the running requests are expected to need.
//
// residentPools is the admission rule this engine runs under
// Config.KVResidency. It is priority.KVPools.Admit with two changes, written
// here rather than in pkg/priority (which this engine may only call) so that
// its effect can be measured first; the change it asks of pkg/priority is a
// field of Footprint (Offloadable: its command is running, on a replica with
// a host tier) and two of KVPools (OnDevice, Total), with Admit as below:
//
//   - on the device, an offloadable trajectory counts OnDevice × its demand
//     (priority.Demand): 0 in the engine, so that the device pool is
//     counted against the trajectories that generate (queued at their
//     gen-worker or at their server, or about to be: starting up, or just
//     admitted), each at its whole demand;
//   - every active trajectory's whole demand must also fit in the memory
//     that holds contexts at all: the host pool, which under write-through
//     holds a copy of what is on the device too (device + host under
//     write_back).
type residentPools struct {
	priority.KVPools
	// OnDevice is the share of an offloadable trajectory's demand counted
	// against the device pool, in [0, 1].
	OnDevice float64
	// Total is each replica's memory for contexts in either tier.
	Total map[string]int
}

// admit is priority.KVPools.Admit under the rules above; offloadable[k]
// says whether active[k] is in an env step.
func (p residentPools) admit(live []string, active []priority.Footprint, offloadable []bool, waiting []priority.Footprint) []string {
	perTurn := priority.PerTurn(active)
	observed := 0
	for _, f := range active {
		if !f.Finishing && f.Turns > 0 {
			observed += f.Turns - 1
		}
	}
	fresh, prior := priority.FreshGrowth(active, perTurn, -1), -1.0
	if perTurn > 0 && observed >= p.Slots*len(live) {
		prior = priority.PriorTurns * perTurn
	}
	full := make(map[string]float64, len(live))
	room := make(map[string]float64, len(live))
	total := make(map[string]float64, len(live))
	for _, r := range live {
		full[r] = p.Budget * float64(p.Capacity[r])
		room[r] = full[r]
		total[r] = p.Budget * float64(p.Total[r])
	}
	for k, f := range active {
		if _, ok := room[f.Replica]; !ok {
			continue
		}
		d := priority.Demand(f, perTurn, p.fresh(fresh, prior, f.Replica))
		total[f.Replica] -= d
		if offloadable[k] {
			d *= p.OnDevice
		}
		room[f.Replica] -= d
	}
	var out []string
	for _, f := range waiting {
		best := ""
		for _, r := range live {
			if best == "" || room[r] > room[best] {
				best = r
			}
		}
		if best == "" {
			break
		}
		need := priority.Demand(f, perTurn, p.fresh(fresh, prior, best))
		if (need > room[best] || need > total[best]) && room[best] < full[best] {
			break
		}
		room[best] -= need
		total[best] -= need
		out = append(out, best)
	}
	return out
}

// fresh is priority.KVPools' expected growth of a trajectory on replica
// (its unexported fresh).
func (p residentPools) fresh(fresh, prior float64, replica string) float64 {
	if fresh >= 0 {
		return fresh
	}
	share := float64(p.Capacity[replica]) / float64(max(p.Slots, 1))
	if prior >= 0 {
		return min(share, prior)
	}
	return share
}
