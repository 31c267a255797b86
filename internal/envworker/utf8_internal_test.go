package envworker

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/sandbox"
	"github.com/actloop/actloop/pkg/schema"
)

// A command whose output is not valid UTF-8: its observation holds U+FFFD
// and a line saying so, and the result counts it in replaced_outputs; a
// command whose output is valid counts nothing (issue 31, item 12).
func TestReplacedOutputInResult(t *testing.T) {
	w := newTestWorker(t, nil)
	ctx := context.Background()
	tr := admit(t, w, schema.Sample{ID: "bytes", Env: schema.Env{Backend: schema.BackendLocal}})
	got := await(t, startAsync(w, tr), 30*time.Second)
	if got.err != nil {
		t.Fatal(got.err)
	}
	commit := func(tr traj.Transition) *traj.Trajectory {
		t.Helper()
		cur, err := w.d.Store.Load(ctx, "bytes", traj.WithAll)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.d.Store.Commit(ctx, cur, tr); err != nil {
			t.Fatal(err)
		}
		after, err := w.d.Store.Load(ctx, "bytes", traj.WithAll)
		if err != nil {
			t.Fatal(err)
		}
		return after
	}
	cur := commit(got.next)
	for i, action := range []string{`printf 'a\377b\n'`, `echo fine`, `printf '\300\n'`} {
		cur = commit(traj.Generated{Turn: traj.Turn{Output: []int32{1}, Text: "run it"}, Action: action})
		next, err := w.execStep(ctx, cur)
		if err != nil {
			t.Fatalf("command %d: %v", i, err)
		}
		cur = commit(next)
	}
	var notes, replaced int
	for _, m := range cur.Messages {
		if strings.Contains(m.Content, sandbox.ReplacedNote) {
			notes++
		}
		if strings.Contains(m.Content, "a\uFFFDb") {
			replaced++
		}
	}
	if notes != 2 || replaced != 1 {
		t.Errorf("observations say %d times that output was replaced, want 2: %q", notes, cur.Messages)
	}
	cur = commit(traj.LimitReached{Limit: schema.LimitStep, Reason: "step limit"})
	cur = commit(traj.Finished{Reason: cur.Reason})
	r := traj.Result(cur, schema.Control{})
	if r.ReplacedOutputs != 2 || r.Commands != 3 {
		t.Fatalf("result: replaced_outputs %d of %d commands, want 2 of 3", r.ReplacedOutputs, r.Commands)
	}
	b, err := json.Marshal(r.ResultHead)
	if err != nil || !strings.Contains(string(b), `"replaced_outputs":2`) {
		t.Fatalf("result head %s (%v) lacks replaced_outputs", b, err)
	}
}
