package priority_test

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/actloop/actloop/internal/virtual"
	"github.com/actloop/actloop/internal/workload"
	"github.com/actloop/actloop/pkg/priority"
)

// mostTurns is a user's own policy: the trajectories that have made the
// most model calls first (they are the likeliest to be near their end and
// hold the most KV), those that have waited priority.DefaultAgeLimit for a
// generation ahead of all, longest wait first, so that none starves.
type mostTurns struct{}

func (mostTurns) Name() string { return "most-turns" }

func (p mostTurns) Rank(facts []priority.Fact, now time.Time) []priority.Fact {
	out := make([]priority.Fact, 0, len(facts))
	for _, i := range p.Order(facts, now) {
		out = append(out, facts[i])
	}
	return out
}

// Order is pure (facts and now only) and total: every tie goes to the
// earlier admission, then the smaller TrajID, then the position.
func (mostTurns) Order(facts []priority.Fact, now time.Time) []int {
	order := make([]int, len(facts))
	for i := range order {
		order[i] = i
	}
	aged := func(f priority.Fact) bool { return priority.Aged(f, now, priority.DefaultAgeLimit) }
	slices.SortFunc(order, func(i, j int) int {
		a, b := facts[i], facts[j]
		switch {
		case aged(a) != aged(b):
			if aged(a) {
				return -1
			}
			return 1
		case aged(a):
			if c := a.WaitingSince.Compare(b.WaitingSince); c != 0 {
				return c
			}
		default:
			if c := cmp.Compare(b.Turns, a.Turns); c != 0 {
				return c
			}
		}
		if c := a.AdmittedAt.Compare(b.AdmittedAt); c != 0 {
			return c
		}
		if c := cmp.Compare(a.TrajID, b.TrajID); c != 0 {
			return c
		}
		return cmp.Compare(i, j)
	})
	return order
}

var _ priority.Policy = mostTurns{}

// A user's policy runs in the virtual engine in place of a named one: here
// on a seeded batch of 24 tool-calling trajectories on 2 replicas of 4
// slots, with the services' other defaults.
func Example_customPolicy() {
	sc, _ := workload.Lookup("tool-fast")
	plans := sc.Generate(1, 24)
	cfg := virtual.Defaults(2, 4)
	cfg.Custom = mostTurns{}
	r, err := virtual.Run(cfg, plans)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("completed %d of %d\n", r.Completed, r.Trajectories)
	fmt.Println("makespan at or above the lower bound:", r.MakespanS >= virtual.LowerBound(plans, cfg).S)
	// Output:
	// completed 24 of 24
	// makespan at or above the lower bound: true
}
