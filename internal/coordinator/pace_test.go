package coordinator

import (
	"math"
	"testing"

	"github.com/actloop/actloop/pkg/priority"
	"github.com/actloop/actloop/pkg/schema"
)

// The coordinator ranks by time: each replica's seconds per token is the
// mean of its gen-workers' heartbeats, and a turn's time outside
// generation comes from completed trajectories.
func TestPaceFromHeartbeatsAndResults(t *testing.T) {
	var v paceView
	workers := map[string]schema.Heartbeat{
		"gen.fast.a": {Replica: "fast", TokenSeconds: 0.01},
		"gen.fast.b": {Replica: "fast", TokenSeconds: 0.03},
		"gen.slow.a": {Replica: "slow", TokenSeconds: 0.1},
		"gen.new.a":  {Replica: "new"}, // no measure yet: the default
	}
	// 20 turns in 700 s, 5,000 tokens at 0.02 s: (700 - 100) / 20 = 30 s a turn.
	v.inSeconds(nil, workers)
	v.finished("fast", 700, 5000, 20)
	facts := []priority.Fact{
		{TrajID: "a", Replica: "fast", Predicted: 1000, RemainingTurns: 5},
		{TrajID: "b", Replica: "slow", Predicted: 1000, RemainingTurns: 5},
		{TrajID: "c", Replica: "new", Predicted: 1000},
		{TrajID: "d", Replica: "fast"}, // unknown stays unknown
	}
	v.inSeconds(facts, workers)
	want := []float64{1000*0.02 + 5*30, 1000*0.1 + 5*30, 1000 * priority.DefaultTokenS, 0}
	for i, f := range facts {
		if math.Abs(f.Predicted-want[i]) > 1e-9 {
			t.Errorf("%s: %v s, want %v", f.TrajID, f.Predicted, want[i])
		}
	}
}

// A waiting sample's KV footprint carries predictor-gw's turns when it
// answered, and nothing known otherwise (a sibling's share is tokens only).
func TestWaitingFootprint(t *testing.T) {
	w := &waitingSample{Predicted: 500}
	if f := w.footprint(); f.RemainingTurns != -1 || f.Context != 0 {
		t.Fatalf("no turns predicted: %+v", f)
	}
	var s waitingSet
	if _, err := s.predicted(w, 800, 12); err != nil {
		t.Fatal(err)
	}
	if f := w.footprint(); f.RemainingTurns != 12 || w.Predicted != 800 {
		t.Fatalf("predicted 12 turns: %+v", f)
	}
}
