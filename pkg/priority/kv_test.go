package priority_test

import (
	"math"
	"slices"
	"testing"

	"github.com/actloop/actloop/pkg/priority"
	"github.com/actloop/actloop/pkg/schema"
)

func TestPerTurnAndFreshGrowth(t *testing.T) {
	fs := []priority.Footprint{
		// 3 replies of 200 and the 2 observations in: 1,200 each.
		{Replica: "a", Context: 5000, Grown: 3000, Generated: 600, Turns: 3, RemainingTurns: 7},
		// 5 replies of 200 and 4 observations of 1,500.
		{Replica: "a", Context: 9000, Grown: 7000, Generated: 1000, Turns: 5, RemainingTurns: -1},
		{Replica: "b", Context: 60000, Grown: 58000, Generated: 9000, Turns: 20, Finishing: true}, // left out
		{Replica: "b", Context: 2000, RemainingTurns: -1},                                         // no call yet: left out
	}
	// Replies: 1,600 over 8 calls; observations: 8,400 over 6.
	if got := priority.PerTurn(fs); got != 200+1400 {
		t.Fatalf("PerTurn = %v, want 1,600 (200 a reply, 1,400 an observation)", got)
	}
	if got := priority.PerTurn(fs[2:]); got != 0 {
		t.Fatalf("PerTurn with no running call = %v, want 0", got)
	}
	first := []priority.Footprint{{Context: 2300, Grown: 300, Generated: 300, Turns: 1, RemainingTurns: -1}}
	if got := priority.PerTurn(first); got != 0 {
		t.Fatalf("PerTurn with no observation in = %v, want 0 (unknown)", got)
	}
	// Only the first has a prediction: 3,000 grown + 7 × 1,600.
	if got := priority.FreshGrowth(fs, 1600, -1); got != 3000+7*1600 {
		t.Fatalf("FreshGrowth = %v, want %v", got, 3000+7*1600)
	}
	if got := priority.FreshGrowth(fs[1:], 1600, 42); got != 42 {
		t.Fatalf("FreshGrowth without predictions = %v, want the prior 42", got)
	}
}

// A progress report comes after a model call: the context holds k replies
// and k − 1 observations. PerTurn counts each at its own rate, so on a plan
// whose turns add a reply and an observation it is the plan's growth per
// turn from the second call on, where the context's tokens over the calls
// made were a fraction of it early on (150 at the first call, 500 at the
// second, against 850).
func TestPerTurnMatchesAPlan(t *testing.T) {
	type plan struct{ prompt, reply, obs int }
	plans := []plan{{2000, 100, 500}, {3000, 200, 900}} // 150 + 700 = 850 a turn
	const truth = 850.0
	for k := 1; k <= 10; k++ {
		var fs []priority.Footprint
		for _, p := range plans {
			p := schema.Prediction{Turns: k, GenTokens: k * p.reply, PromptTokens: p.prompt,
				ContextTokens: p.prompt + k*p.reply + (k-1)*p.obs}
			fs = append(fs, priority.Reported(p, -1))
		}
		got := priority.PerTurn(fs)
		if k == 1 {
			if got != 0 {
				t.Fatalf("after the first call: %v, want 0 (no observation in yet)", got)
			}
			continue
		}
		if math.Abs(got-truth) > 1e-9 {
			t.Fatalf("after %d calls: %v tokens a turn, want the plan's %v", k, got, truth)
		}
		// Each plan alone: what its context still grows by over the n − k
		// calls to come (the observation not yet in, then replies and
		// observations, the last reply last) is n − k turns of its own.
		const n = 20
		for i, p := range plans {
			f := fs[i]
			f.RemainingTurns = float64(n - k)
			want := float64(f.Context) + priority.GrowthShare*float64((n-k)*(p.reply+p.obs))
			if got := priority.Demand(f, priority.PerTurn(fs[i:i+1]), 0); math.Abs(got-want) > 1e-9 {
				t.Fatalf("plan %d after %d calls: demand %v, want %v", i, k, got, want)
			}
		}
	}
}

// Reported reads a progress report: the context past the prompt, of which
// the generated tokens are replies; nothing grown before the first call.
func TestReported(t *testing.T) {
	p := schema.Prediction{Turns: 3, GenTokens: 600, ContextTokens: 5000, PromptTokens: 2000, Finishing: true}
	want := priority.Footprint{Context: 5000, Grown: 3000, Generated: 600, Turns: 3, RemainingTurns: 4, Finishing: true}
	if got := priority.Reported(p, 4); got != want {
		t.Fatalf("Reported = %+v, want %+v", got, want)
	}
	if got := priority.Reported(schema.Prediction{ContextTokens: 2000, PromptTokens: 2000}, -1); got.Grown != 0 || got.Generated != 0 || got.RemainingTurns != -1 {
		t.Fatalf("before a call: %+v", got)
	}
}

func TestDemand(t *testing.T) {
	g := priority.GrowthShare
	tests := []struct {
		name           string
		f              priority.Footprint
		perTurn, fresh float64
		want           float64
	}{
		{"finishing: nothing", priority.Footprint{Context: 50000, Finishing: true}, 1000, 20000, 0},
		{"predicted: context and a share of turns × per turn", priority.Footprint{Context: 10000, Grown: 8000, Turns: 4, RemainingTurns: 10}, 1000, 20000, 10000 + g*10*1000},
		{"predicted to end: its context", priority.Footprint{Context: 10000, Grown: 8000, Turns: 4, RemainingTurns: 0}, 1000, 20000, 10000},
		{"unknown: a share of the fresh growth it has not made", priority.Footprint{Context: 10000, Grown: 8000, Turns: 4, RemainingTurns: -1}, 1000, 20000, 10000 + g*12000},
		{"unknown and past the fresh growth: its context", priority.Footprint{Context: 30000, Grown: 28000, Turns: 9, RemainingTurns: -1}, 1000, 20000, 30000},
		{"waiting: a share of the fresh growth", priority.Footprint{RemainingTurns: -1}, 0, 20000, g * 20000},
		{"NaN prediction is unknown", priority.Footprint{Context: 100, RemainingTurns: math.NaN()}, 1000, 400, 100 + g*400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := priority.Demand(tt.f, tt.perTurn, tt.fresh); math.Abs(got-tt.want) > 1e-9 {
				t.Fatalf("Demand = %v, want %v", got, tt.want)
			}
		})
	}
}

func waiting(n int) []priority.Footprint {
	out := make([]priority.Footprint, n)
	for k := range out {
		out[k] = priority.Footprint{RemainingTurns: -1}
	}
	return out
}

func TestKVPoolsAdmit(t *testing.T) {
	pools := priority.KVPools{Capacity: map[string]int{"a": 100000, "b": 100000}, Budget: 1, Slots: 4}
	// Nothing known: a fresh trajectory grows by capacity / (ColdStart ×
	// slots) = 2,500, of which it counts GrowthShare.
	need := priority.GrowthShare * 100000 / (priority.ColdStart * 4)
	per := int(100000 / need) // on each replica
	got := pools.Admit([]string{"a", "b"}, nil, waiting(200))
	if len(got) != 2*per {
		t.Fatalf("admitted %d on empty pools, want %d (%d a replica)", len(got), 2*per, per)
	}
	if n := countOf(got, "a"); n != per {
		t.Fatalf("replica a got %d of %v, want %d: the most room first", n, got, per)
	}

	// Replica a is full with one large trajectory: all go to b.
	active := []priority.Footprint{{Replica: "a", Context: 99000, Grown: 97000, Turns: 10, RemainingTurns: -1}}
	got = pools.Admit([]string{"a", "b"}, active, waiting(100))
	if len(got) != per || countOf(got, "a") != 0 {
		t.Fatalf("with a full: %v, want %d on b", got, per)
	}

	// A trajectory in its eval holds nothing.
	active[0].Finishing = true
	if got = pools.Admit([]string{"a", "b"}, active, waiting(200)); len(got) != 2*per {
		t.Fatalf("with a finishing: admitted %d, want %d", len(got), 2*per)
	}

	// A replica with nothing on it takes one whatever its demand.
	small := priority.KVPools{Capacity: map[string]int{"a": 1000}, Budget: 1, Slots: 1}
	big := []priority.Footprint{{RemainingTurns: 4}, {RemainingTurns: 4}, {RemainingTurns: 4}}
	seen := []priority.Footprint{{Replica: "b", Context: 3000, Grown: 2000, Generated: 1000, Turns: 2, RemainingTurns: 4}}
	if got = small.Admit([]string{"a"}, seen, big); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("an empty replica too small for one: %v, want one admitted", got)
	}

	// Nothing live: nothing admitted.
	if got = pools.Admit(nil, nil, waiting(3)); len(got) != 0 {
		t.Fatalf("no live replica: %v", got)
	}

	// A budget of 0.5 halves what fits.
	half := pools
	half.Budget = 0.5
	if got = half.Admit([]string{"a", "b"}, nil, waiting(200)); len(got) != 2*int(50000/need) {
		t.Fatalf("budget 0.5: admitted %d, want %d", len(got), 2*int(50000/need))
	}

	// Active trajectories with predictions set the fresh growth: each has
	// grown 4,000 in 4 calls (4 replies of 250, 3 observations of 1,000:
	// 1,250 a turn) and has 6 to go, so a fresh one grows 4,000 + 6 × 1,250.
	active = nil
	for range 4 {
		active = append(active, priority.Footprint{Replica: "a", Context: 5000, Grown: 4000, Generated: 1000, Turns: 4, RemainingTurns: 6})
	}
	used := 4 * (5000 + priority.GrowthShare*6*1250)
	fresh := priority.GrowthShare * (4000 + 6*1250.0)
	want := int((100000-used)/fresh) + int(100000/fresh)
	if got = pools.Admit([]string{"a", "b"}, active, waiting(100)); len(got) != want {
		t.Fatalf("with history: admitted %d, want %d", len(got), want)
	}
}

// A replica holding a trajectory (Hold) admits nothing until it lets it
// go; the others admit as before.
func TestKVPoolsAdmitNothingWhereHeld(t *testing.T) {
	pools := priority.KVPools{Capacity: map[string]int{"a": 100000, "b": 100000}, Budget: 1, Slots: 4}
	need := priority.GrowthShare * 100000 / (priority.ColdStart * 4)
	per := int(100000 / need)
	active := []priority.Footprint{{Replica: "a", Context: 1000, Grown: 500, Generated: 200, Turns: 2, RemainingTurns: -1, Held: true}}
	got := pools.Admit([]string{"a", "b"}, active, waiting(200))
	if countOf(got, "a") != 0 || len(got) != per {
		t.Fatalf("a holds one: admitted %v, want %d, all on b", got, per)
	}
	active = append(active, priority.Footprint{Replica: "b", Held: true})
	if got = pools.Admit([]string{"a", "b"}, active, waiting(200)); len(got) != 0 {
		t.Fatalf("both hold one: admitted %v, want none", got)
	}
}

func countOf(rs []string, r string) int {
	n := 0
	for _, x := range rs {
		if x == r {
			n++
		}
	}
	return n
}

func TestDispatchLimit(t *testing.T) {
	tests := []struct {
		name     string
		slots    int
		running  int
		inflight int64
		pool     int
		budget   float64
		want     int
	}{
		{"no pool reported: the slots", 4, 4, 40000, 0, 1, 4},
		{"budget 0: the slots", 4, 4, 40000, 100000, 0, 4},
		{"room for six more at the running mean", 4, 4, 40000, 100000, 1, 10},
		{"none running: pool / slots each", 4, 0, 0, 100000, 1, 4},
		{"pool overfull: no more until the excess ends", 4, 12, 120000, 100000, 1, 10},
		{"never below the slots", 4, 4, 200000, 100000, 1, 4},
		{"half the pool", 4, 2, 20000, 100000, 0.5, 5},
		{"at most DispatchCap", 1, 1, 10, 1 << 30, 1, priority.DispatchCap},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := priority.DispatchLimit(tt.slots, tt.running, tt.inflight, tt.pool, tt.budget); got != tt.want {
				t.Fatalf("DispatchLimit = %d, want %d", got, tt.want)
			}
		})
	}
	if priority.OutputReserve(8192) != 4096 || priority.OutputReserve(100) != 100 {
		t.Fatal("OutputReserve: min(max_new_tokens, 4096)")
	}
}
