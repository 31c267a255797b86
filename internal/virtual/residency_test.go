package virtual

import (
	"reflect"
	"slices"
	"testing"

	"github.com/actloop/actloop/internal/batching"
	"github.com/actloop/actloop/internal/workload"
	"github.com/actloop/actloop/pkg/priority"
)

// residencyFootprints are 30 active trajectories on one replica, each 8,000
// tokens into its context with 10 turns to go at 800 tokens a turn (a
// demand of 8,000 + 0.75 × 8,000 = 14,000 tokens), and 40 waiting ones.
func residencyFootprints() (active, waiting []priority.Footprint) {
	for range 30 {
		active = append(active, priority.Footprint{Replica: "r0", Context: 8000, Grown: 7000, Generated: 2000, Turns: 8,
			RemainingTurns: 10 * 7.0 / 8})
	}
	for range 40 {
		waiting = append(waiting, priority.Footprint{RemainingTurns: 20})
	}
	return active, waiting
}

// With nothing offloadable, admission with a host tier (KVPools.OnDevice,
// Total) admits as without;
// with most active trajectories in their commands it admits more, and the
// host pool still bounds what is admitted.
func TestResidencyAdmitsMoreWhenTrajectoriesAreInTheirCommands(t *testing.T) {
	active, waiting := residencyFootprints()
	live := []string{"r0"}
	pools := priority.KVPools{Capacity: map[string]int{"r0": 600_000}, Budget: 1, Slots: 16}
	byContexts := pools.Admit(live, active, waiting)
	rp := pools
	rp.OnDevice, rp.Total = 0.3, map[string]int{"r0": 1_200_000}

	if got := rp.Admit(live, active, waiting); !reflect.DeepEqual(got, byContexts) {
		t.Fatalf("nothing offloadable: admitted %d, KVPools.Admit %d", len(got), len(byContexts))
	}
	inCommands := slices.Clone(active)
	for k := range 25 {
		inCommands[k].Offloadable = true
	}
	byRunning := rp.Admit(live, inCommands, waiting)
	if len(byRunning) <= len(byContexts) {
		t.Errorf("25 of 30 in their commands: admitted %d by running KV, %d by admitted contexts: want more", len(byRunning), len(byContexts))
	}
	rp.Total["r0"] = 600_000 // the host pool no larger than the device's
	if got := rp.Admit(live, inCommands, waiting); len(got) != len(byContexts) {
		t.Errorf("host pool of 600,000 tokens: admitted %d, want %d (what every context fits in)", len(got), len(byContexts))
	}
	t.Logf("admitted: by contexts %d, by running KV %d", len(byContexts), len(byRunning))
}

// In a run of SWE-like trajectories whose commands take a good part of
// each turn, admission by running KV keeps more trajectories active on
// servers with a host tier, and their contexts come back from host memory
// rather than being prefilled again; without a host tier the option does
// nothing.
func TestKVResidencyAdmitsMoreInARun(t *testing.T) {
	sc, _ := workload.Lookup("swe-rl-64k")
	sc.Exec = workload.LogNormal{Median: 8, Sigma: 0.5, Min: 1, Max: 60} // commands as long as generations
	plans := sc.Generate(1, 160)
	base := Defaults(1, 2) // few slots: a large cold-start share, so that admission binds
	base.MaxActiveCeiling = len(plans)
	base.Server.MaxTotalTokens = 200_000
	base.Hold = false // it counts every context against the device pool
	hier := base
	var err error
	if hier.Server, err = base.Server.WithHiCache(batching.DefaultHiCacheRatio, 0, batching.WriteThrough, 0); err != nil {
		t.Fatal(err)
	}
	run := func(cfg Config) Result {
		t.Helper()
		r, err := Run(cfg, plans)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// inTurns is the mean, over every 10 s of the run, of the trajectories
	// admitted and not yet in their eval.
	inTurns := func(cfg Config) float64 {
		t.Helper()
		e, err := newEngine(cfg, plans)
		if err != nil {
			t.Fatal(err)
		}
		sum, n, next := 0, 0, 0.0
		for e.done < len(e.ts) {
			if err := e.step(); err != nil {
				t.Fatal(err)
			}
			for ; e.now >= next; next += 10 {
				for _, i := range e.activeIDs {
					if !e.ts[i].inEval {
						sum++
					}
				}
				n++
			}
		}
		return float64(sum) / float64(n)
	}
	off, offTurns := run(hier), inTurns(hier)
	hier.KVResidency = true
	on, onTurns := run(hier), inTurns(hier)
	if onTurns <= offTurns {
		t.Errorf("trajectories in their turns, mean over the run: %.1f with residency, %.1f without: want more", onTurns, offTurns)
	}
	if on.Loaded == 0 {
		t.Error("no context was loaded back from host memory")
	}
	t.Logf("in their turns %.1f → %.1f, makespan %.0f → %.0f s, loaded %d tokens in %.1f s, re-prefilled %d → %d",
		offTurns, onTurns, off.MakespanS, on.MakespanS, on.Loaded, on.LoadS, off.Reprefilled, on.Reprefilled)
	noHost := base
	noHost.KVResidency = true
	if a, b := run(base), run(noHost); !reflect.DeepEqual(a, b) {
		t.Error("without a host tier KVResidency changed the run")
	}
}
