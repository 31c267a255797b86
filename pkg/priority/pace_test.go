package priority_test

import (
	"math"
	"testing"
	"time"

	"github.com/actloop/actloop/pkg/priority"
)

func TestPaceSeconds(t *testing.T) {
	var p priority.Pace
	p.SetTokenS("fast", 0.01)
	p.SetTokenS("slow", 0.05)
	p.SetTokenS("bad", math.Inf(1)) // ignored
	p.TurnS = 4
	tests := []struct {
		name              string
		replica           string
		tokens, turns, at float64
	}{
		{"tokens at the replica's pace plus turns outside generation", "fast", 1000, 10, 1000*0.01 + 10*4},
		{"a slower replica takes longer for the same work", "slow", 1000, 10, 1000*0.05 + 10*4},
		{"a replica with no measure goes at the default", "bad", 1000, 0, 1000 * priority.DefaultTokenS},
		{"unknown tokens: unknown time", "fast", 0, 10, 0},
		{"negative turns count as none", "fast", 100, -3, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := p.Seconds(tt.replica, tt.tokens, tt.turns); math.Abs(got-tt.at) > 1e-9 {
				t.Fatalf("Seconds = %v, want %v", got, tt.at)
			}
		})
	}
}

// Time, not tokens: a trajectory with fewer tokens but many more turns
// left (each turn's command and a share of its eval) ranks longer under
// lpt once its prediction is in seconds.
func TestPaceReordersLPT(t *testing.T) {
	var p priority.Pace
	p.SetTokenS("r", 0.03)
	// Finished: 600 s over 20 turns, 3,000 tokens at 0.03 s: 90 s of
	// generation, (600 - 90) / 20 = 25.5 s a turn outside it.
	p.ObserveFinished("r", 600, 3000, 20)
	if math.Abs(p.TurnS-25.5) > 1e-9 {
		t.Fatalf("TurnS = %v, want 25.5", p.TurnS)
	}
	manyTurns := priority.Fact{TrajID: "turns", Replica: "r", Predicted: p.Seconds("r", 500, 20)}
	manyTokens := priority.Fact{TrajID: "tokens", Replica: "r", Predicted: p.Seconds("r", 5000, 2)}
	got := priority.LPT{}.Rank([]priority.Fact{manyTokens, manyTurns}, time.Unix(0, 0))
	if got[0].TrajID != "turns" {
		t.Fatalf("lpt by time ranks %s first, want the one with 20 turns left (%.0f s against %.0f s)",
			got[0].TrajID, manyTurns.Predicted, manyTokens.Predicted)
	}
	// By tokens it would have been the other way round.
	byTokens := priority.LPT{}.Rank([]priority.Fact{{TrajID: "tokens", Predicted: 5000}, {TrajID: "turns", Predicted: 500}}, time.Unix(0, 0))
	if byTokens[0].TrajID != "tokens" {
		t.Fatal("lpt by tokens: the control failed")
	}
	// A trajectory of no turns or no time teaches nothing.
	before := p.TurnS
	p.ObserveFinished("r", 0, 100, 3)
	p.ObserveFinished("r", 100, 100, 0)
	if p.TurnS != before {
		t.Fatalf("TurnS moved to %v on empty observations", p.TurnS)
	}
}
