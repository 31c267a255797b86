package traj

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/actloop/actloop/pkg/priority"
	"github.com/actloop/actloop/pkg/schema"
)

// A prediction is asked with what the conversation says, and its command
// is cut at a character boundary within the wire's bound.
func TestPredictRequest(t *testing.T) {
	tr := &Trajectory{ID: "p", Seq: 7, Calls: 3, GenTokens: 300, PromptLen: 1000, GenCtx: 2500, LastExit: 1, LastObs: 120,
		Action: "cd /repo && python -m pytest -x " + strings.Repeat("é", schema.MaxPredictCommandBytes),
		Sample: schema.Sample{GroupID: "g", Family: "f"}}
	r := PredictRequest(tr)
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	if !utf8.ValidString(r.Command) || len(r.Command) > schema.MaxPredictCommandBytes || len(r.Command) < schema.MaxPredictCommandBytes-1 {
		t.Fatalf("command of %d bytes (valid UTF-8: %v)", len(r.Command), utf8.ValidString(r.Command))
	}
	want := schema.PredictRequest{V: schema.Version, TrajID: "p", GroupID: "g", Family: "f", Turns: 3, GenTokens: 300,
		TurnSeq: 7, ContextTokens: 2500, PromptTokens: 1000, Command: r.Command, CommandKind: schema.CommandTest,
		ObsTokens: 120, ExitCode: 1}
	if r != want {
		t.Fatalf("PredictRequest = %+v, want %+v", r, want)
	}
}

// A trajectory's first generation waits in its priority class; every
// later gen step of it (back from an environment step, or interrupted) in
// its resume class, which gen-workers take first (priority.DispatchOrder).
func TestNextGenClass(t *testing.T) {
	high := highOnly{}
	for _, tt := range []struct {
		name string
		tr   Trajectory
		cls  Classifier
		want string
	}{
		{"first turn", Trajectory{}, LowOnly{}, "actloop.gen.r0.lo"},
		{"first turn, high", Trajectory{}, high, "actloop.gen.r0.hi"},
		{"next turn, same rid", Trajectory{RID: strings.Repeat("a", 32), Calls: 2}, LowOnly{}, "actloop.gen.r0.rlo"},
		{"next turn, high", Trajectory{RID: strings.Repeat("a", 32), Calls: 2}, high, "actloop.gen.r0.rhi"},
		{"first turn interrupted", Trajectory{RID: strings.Repeat("a", 32), Resuming: true}, LowOnly{}, "actloop.gen.r0.rlo"},
	} {
		tt.tr.ID, tt.tr.Replica, tt.tr.Status = "x", "r0", StatusNeedsGeneration
		n, err := NextOf(&tt.tr, tt.cls)
		if err != nil || n.Subject != tt.want {
			t.Errorf("%s: subject %q (%v), want %q", tt.name, n.Subject, err, tt.want)
		}
	}
}

// highOnly puts every gen step in the high class.
type highOnly struct{}

func (highOnly) Class(string, string) string { return priority.ClassHigh }
