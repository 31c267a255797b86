package priority

import (
	"math"

	"github.com/actloop/actloop/pkg/schema"
)

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

// KVCeiling is the count ceiling of admission by KV (KVPools.Admit):
// maxActiveCeiling when set, else none (math.MaxInt), since the pools bound admission by what the trajectories are expected to hold.
// A count ceiling derived from the slots would bind before the pools on a
// server whose pool holds more trajectories than 4.5 × its slots (on the
// benchmark's swe-rl-64k, 18 a replica against the 25 a tuned
// trajectory-level loop runs).
func KVCeiling(maxActiveCeiling int) int {
	if maxActiveCeiling > 0 {
		return maxActiveCeiling
	}
	return math.MaxInt
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

// KV admission: admission keeps what the active trajectories are expected
// to hold in the replicas' KV pools within the pools, from the capacity the
// servers report (SGLang's max_total_num_tokens, vLLM's KV blocks × block
// size).

// GrowthShare is the share of a trajectory's predicted context growth its
// KV demand counts: a context grows from the prompt to its largest over the
// trajectory's life, so the mean it holds is about half the growth still to
// come; the predictions of remaining turns come from finished trajectories,
// the shorter ones first, and run low, which the other quarter makes up for
// (on the RL-scale benchmark scenarios, 0.5 let the pools overfill at 128k
// contexts and 1 admitted too few at 64k).
const GrowthShare = 0.75

// Footprint is what admission knows of a trajectory's use of its replica's
// KV pool: what its gen-worker reported after its newest model call
// (Reported), so the coordinator and the virtual engine count alike.
type Footprint struct {
	Replica string // "" for a waiting sample
	// Context is its tokens of context after its last reply (0: none yet),
	// Grown how many of them came after the prompt, over Turns model calls,
	// of which Generated are its replies. The rest of Grown is what came
	// between replies (each command's observation and the templates around
	// it): Turns − 1 of those, since the last reply's observation is not in
	// yet when the reply is reported.
	Context, Grown, Generated, Turns int
	// RemainingTurns is the predicted model calls still to come; negative
	// (or NaN) when unknown.
	RemainingTurns float64
	// Finishing: its last reply is in and it is in its eval; it needs no
	// more KV.
	Finishing bool
	// Held: its gen steps wait until its replica has room for it (Hold).
	Held bool
	// Offloadable: its command is running on a replica whose server keeps
	// a host-memory KV tier (SGLang's hierarchical cache), so its context
	// can wait there until its next generation (KVPools.OnDevice).
	Offloadable bool
}

// Reported is the footprint a gen-worker's progress report p gives (sent
// after each model call: schema.Prediction's context, prompt, generated
// tokens and turns), with remaining the predicted model calls to come
// (negative: unknown).
func Reported(p schema.Prediction, remaining float64) Footprint {
	f := Footprint{Context: p.ContextTokens, Turns: p.Turns, RemainingTurns: remaining, Finishing: p.Finishing}
	if p.Turns > 0 {
		f.Grown = max(p.ContextTokens-p.PromptTokens, 0)
		f.Generated = min(p.GenTokens, f.Grown)
	}
	return f
}

// PerTurn is the context tokens a model call adds, on average over the
// running trajectories of fs: a reply and the observation that follows it.
// Replies are averaged over the calls made, observations over the calls
// whose observation is in (each trajectory's calls but its last), so that a
// trajectory reported after k calls, with k replies and k − 1 observations
// in its context, counts each at its own rate. 0 (unknown) before any
// running trajectory has an observation in: replies alone would be a
// fraction of a turn's growth.
func PerTurn(fs []Footprint) float64 {
	observed := 0
	replies, calls, between := 0, 0, 0
	for _, f := range fs {
		if f.Finishing || f.Turns <= 0 {
			continue
		}
		replies += f.Generated
		calls += f.Turns
		between += max(f.Grown-f.Generated, 0)
		observed += f.Turns - 1
	}
	if observed == 0 {
		return 0
	}
	return float64(replies)/float64(calls) + float64(between)/float64(observed)
}

// Demand is the KV f is expected to hold: nothing while finishing; else its
// context and GrowthShare of the growth still to come, predicted as its
// remaining turns × perTurn (each call to come adds the observation before
// it, the first being the one not yet in Context, and its reply), or,
// without a prediction, fresh tokens less what it has grown.
func Demand(f Footprint, perTurn, fresh float64) float64 {
	if f.Finishing {
		return 0
	}
	if f.RemainingTurns >= 0 && perTurn > 0 {
		return float64(f.Context) + GrowthShare*f.RemainingTurns*perTurn
	}
	return float64(f.Context) + GrowthShare*max(fresh-float64(f.Grown), 0)
}

// FreshGrowth is how far a trajectory's context is expected to grow over
// its life: the mean over the running trajectories of fs with a prediction
// of what they have grown and are predicted to grow; prior when none has
// one.
func FreshGrowth(fs []Footprint, perTurn, prior float64) float64 {
	sum, n := 0.0, 0
	for _, f := range fs {
		if !f.Finishing && f.RemainingTurns >= 0 && perTurn > 0 {
			sum += float64(f.Grown) + f.RemainingTurns*perTurn
			n++
		}
	}
	if n == 0 {
		return prior
	}
	return sum / float64(n)
}

// KVPools is admission's view of the replicas' KV pools.
type KVPools struct {
	// Capacity is each live replica's pool, in tokens.
	Capacity map[string]int
	// Budget is the share of each pool the active trajectories' demand may
	// fill (ACTLOOP_KV_BUDGET).
	Budget float64
	// Slots is each gen-worker's generation slots. Before any trajectory
	// has a prediction, a trajectory is expected to grow by its replica's
	// capacity / (ColdStart × Slots).
	Slots int
	// KV residency, for servers with a host-memory KV tier: an Offloadable
	// trajectory's demand counts OnDevice of itself (in [0, 1]; 0: none)
	// against its replica's device pool, and, where Total is set, every
	// active trajectory's whole demand must also fit in budget × Total, the
	// replica's memory for contexts in either tier. Without Offloadable
	// footprints and Total, admission counts every admitted context against
	// the device pool.
	OnDevice float64
	Total    map[string]int
}

// ColdStart divides a slot's share of a pool (capacity / Slots) into the
// growth a trajectory is expected to have before any prediction: a tenth of
// it. Admission before the first predictions is a guess, and an optimistic
// one costs little since Hold undoes it; a pessimistic one holds half a
// small batch back until its first results. A tenth admits the benchmark's
// small batches whole (96 trajectories on two replicas of 8 slots) and, at
// RL scale, made no difference beyond the seeds' spread against a whole
// share with holding (docs/benchmarks.md).
const ColdStart = 10

// Admit returns the replicas of the first waiting samples to admit, in
// waiting's (rank) order, beside the active trajectories: each goes to the
// live replica with the most room (budget × capacity minus the demand on
// it, counting those admitted before it) while its demand fits; admission
// stops at the first that fits nowhere, so that a large one is not passed
// over for ever. A replica with nothing on it takes one whatever its
// demand. live orders replicas of equal room.
func (p KVPools) Admit(live []string, active, waiting []Footprint) []string {
	perTurn := PerTurn(active)
	fresh := FreshGrowth(active, perTurn, -1)
	full := make(map[string]float64, len(live))
	room := make(map[string]float64, len(live))
	total := make(map[string]float64, len(live)) // room in either tier (Total), +Inf without
	for _, r := range live {
		full[r] = p.Budget * float64(p.Capacity[r])
		room[r] = full[r]
		total[r] = math.Inf(1)
		if p.Total != nil {
			total[r] = p.Budget * float64(p.Total[r])
		}
	}
	for _, f := range active {
		if _, ok := room[f.Replica]; !ok {
			continue
		}
		if f.Held { // it waits for room: nothing more is admitted there
			room[f.Replica], total[f.Replica] = math.Inf(-1), math.Inf(-1)
			continue
		}
		d := Demand(f, perTurn, p.fresh(fresh, f.Replica))
		total[f.Replica] -= d
		if f.Offloadable {
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
		if best == "" || math.IsInf(room[best], -1) {
			break
		}
		need := Demand(f, perTurn, p.fresh(fresh, best))
		if (need > room[best] || need > total[best]) && room[best] < full[best] {
			break
		}
		room[best] -= need
		total[best] -= need
		out = append(out, best)
	}
	return out
}

// fresh is the expected growth of a trajectory on replica: fresh when
// known (not negative), else the replica's capacity / (ColdStart × Slots).
func (p KVPools) fresh(fresh float64, replica string) float64 {
	if fresh >= 0 {
		return fresh
	}
	return float64(p.Capacity[replica]) / float64(ColdStart*max(p.Slots, 1))
}

// DispatchCap bounds the generations a gen-worker runs at once when it
// dispatches by KV (DispatchLimit).
const DispatchCap = 1024

// DispatchLimit is how many generations a gen-worker may run at once: its
// slots, and beyond them, while its server reports a pool (pool > 0) and
// budget > 0, as many as fit in budget × pool beside the running ones,
// whose inputs and output reserves (min(max_new_tokens, 4,096), what
// SGLang reserves for a new request) come to inflight tokens; each more is
// expected to need their mean, or pool / slots while none runs. At most
// DispatchCap.
func DispatchLimit(slots, running int, inflight int64, pool int, budget float64) int {
	if pool <= 0 || budget <= 0 {
		return slots
	}
	mean := float64(pool) / float64(max(slots, 1))
	if running > 0 && inflight > 0 {
		mean = float64(inflight) / float64(running)
	}
	room := budget*float64(pool) - float64(inflight)
	return min(max(running+int(room/mean), slots), DispatchCap)
}

// OutputReserve is the output tokens a generation of maxNew new tokens is
// counted to need in its server's pool (SGLang's
// SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION, 4,096).
func OutputReserve(maxNew int) int { return min(maxNew, 4096) }
