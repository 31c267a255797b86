package coordinator

import (
	"testing"
	"time"

	"github.com/actloop/actloop/pkg/schema"
)

// The window holds the results of the last OutcomeWindow, its rates are
// its counts over the window (or over the time since the term began, when
// shorter); reward, solve rate and staleness count training results only;
// the totals keep everything.
func TestOutcomes(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	o := newOutcomes(t0)
	head := func(status string, reward float64, purpose string) schema.ResultHead {
		return schema.ResultHead{Status: status, Reward: reward, Purpose: purpose, GenTokens: 100, Commands: 2}
	}
	o.observe(head(schema.StatusSubmitted, 1, ""), 0, t0.Add(10*time.Second))
	o.observe(head(schema.StatusSubmitted, 0, ""), 3, t0.Add(20*time.Second))
	o.observe(head(schema.StatusSubmitted, 1, schema.PurposeValidation), -1, t0.Add(20*time.Second))

	got := o.get(t0.Add(30 * time.Second))
	if got.WindowS != 30 || got.Window.Trajectories != 3 || got.TokensPerS != 10 || got.EnvStepsPerS != 0.2 ||
		got.TrajectoriesPerS != 0.1 {
		t.Fatalf("at 30 s: %+v", got)
	}
	if w := got.Window; w.Results != 2 || w.Solved != 1 || w.SolveRate != 0.5 || w.MeanReward != 0.5 ||
		w.MeanStaleness != 1.5 || w.MaxStaleness != 3 {
		t.Fatalf("window at 30 s: %+v", w)
	}

	got = o.get(t0.Add(75 * time.Second)) // the first result has left the window
	if got.WindowS != 60 || got.Window.Trajectories != 2 || got.Window.Results != 1 || got.Window.Solved != 0 ||
		got.Window.MeanStaleness != 3 || got.Total.Trajectories != 3 || got.Total.Solved != 1 {
		t.Fatalf("at 75 s: %+v", got)
	}
	got = o.get(t0.Add(200 * time.Second))
	if got.Window != (OutcomeCounts{}) || got.TokensPerS != 0 || got.Total.Results != 2 || got.Total.GenTokens != 300 {
		t.Fatalf("at 200 s: %+v", got)
	}
}
