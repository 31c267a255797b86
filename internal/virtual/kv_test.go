package virtual

import (
	"math"
	"testing"

	"github.com/actloop/actloop/internal/workload"
	"github.com/actloop/actloop/pkg/priority"
)

// finalContext is the context plan ends with: its prompt, every reply and
// every observation.
func finalContext(plan *workload.Trajectory) int {
	n := plan.Prompt
	for k, r := range plan.Tokens {
		n += r + replyEndTokens
		if k < len(plan.Obs) {
			n += plan.Obs[k] + obsTemplateTokens
		}
	}
	return n
}

// KV admission's growth per turn, from what the gen-workers report after
// each model call, is what the running trajectories' contexts still grow
// by per call to come, from the first minute on. Counting the context past
// the prompt over the calls made (k replies but k − 1 observations) came to
// 55 % of it at one minute, 69 % at two and 78 % at four on this plan.
func TestPerTurnMatchesThePlan(t *testing.T) {
	sc, _ := workload.Lookup("swe-rl-64k")
	plans := sc.Generate(1, 512)
	// All running from the start (the reports are the same in every mode),
	// so that hundreds are at their first calls.
	cfg := Defaults(4, 16)
	cfg.Kind = KindAsync
	e, err := newEngine(cfg, plans)
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []float64{60, 120, 240, 480} {
		for e.now < at {
			if err := e.step(); err != nil {
				t.Fatal(err)
			}
		}
		var fs []priority.Footprint
		var growth, calls float64
		for _, i := range e.activeIDs {
			tr := e.ts[i]
			if tr.kv.Finishing || tr.kv.Turns == 0 {
				continue
			}
			fs = append(fs, tr.kv)
			growth += float64(finalContext(tr.plan) - tr.kv.Context)
			calls += float64(len(tr.plan.Tokens) - tr.kv.Turns)
		}
		got, want := priority.PerTurn(fs), growth/calls
		t.Logf("at %3.0f s: %d running, %.0f tokens a turn estimated, %.0f a call to come", at, len(fs), got, want)
		if math.Abs(got-want) > 0.1*want {
			t.Errorf("at %.0f s: %.0f tokens a turn estimated, the plan has %.0f a call to come", at, got, want)
		}
	}
}
