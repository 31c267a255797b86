package traj

import (
	"strings"
	"testing"
	"unicode/utf8"

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

// A trajectory keeps its request id across turns; only an interrupted
// generation's step goes to its class's resume queue.
func TestNextGenClass(t *testing.T) {
	for _, tt := range []struct {
		name string
		tr   Trajectory
		want string
	}{
		{"first turn", Trajectory{}, "actloop.gen.r0.lo"},
		{"next turn, same rid", Trajectory{RID: strings.Repeat("a", 32), Calls: 2}, "actloop.gen.r0.lo"},
		{"interrupted", Trajectory{RID: strings.Repeat("a", 32), Resuming: true}, "actloop.gen.r0.rlo"},
	} {
		tt.tr.ID, tt.tr.Replica, tt.tr.Status = "x", "r0", StatusNeedsGeneration
		n, err := NextOf(&tt.tr, LowOnly{})
		if err != nil || n.Subject != tt.want {
			t.Errorf("%s: subject %q (%v), want %q", tt.name, n.Subject, err, tt.want)
		}
	}
}
