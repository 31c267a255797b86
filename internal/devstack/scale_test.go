package devstack_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/coordinator"
	"github.com/actloop/actloop/internal/demo"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/pkg/llm"
	"github.com/actloop/actloop/pkg/schema"
)

// Replicas join and leave by themselves: the coordinator expects only r0;
// a gen-worker for r1, which no setting names, starts mid-batch and takes
// newly admitted trajectories; then r0's gen-worker stops mid-batch with
// trajectories in flight, they move to r1, and every trajectory ends as it
// would have on one replica.
func TestReplicasJoinAndLeaveMidBatch(t *testing.T) {
	e := newEnv(t, 2) // a simulator for r0 and one for r1
	cfg := e.stack.CoordinatorConfig()
	cfg.Replicas = []string{"r0"}
	cfg.ReplicaTimeout = time.Second
	coord, err := e.stack.StartCoordinator(e.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.stack.StartEnvWorker(e.ctx, e.stack.EnvWorkerConfig("env-0")); err != nil {
		t.Fatal(err)
	}
	r0ctx, stopR0 := context.WithCancel(e.ctx)
	defer stopR0()
	// r0 hangs once a trajectory has run a command (its observation is in
	// the prompt), so its trajectories are still in flight when it goes.
	hang := ctxGen{Generator: llm.NewSGLang(e.stack.SimURLs["r0"], llm.SGLangOptions{}),
		block: promptHas("<returncode>")}
	if _, err := e.stack.StartGenWorker(r0ctx, "r0", hang); err != nil {
		t.Fatal(err)
	}
	samples := demo.Samples(8, e.ws, "scale")
	e.submit(samples...)
	on := func(replica string, commands int) []string {
		var ids []string
		for _, s := range samples {
			tr, err := e.st.Load(e.ctx, s.ID, 0)
			if err == nil && tr.Replica == replica && tr.Commands >= commands {
				ids = append(ids, s.ID)
			}
		}
		return ids
	}
	testkit.Eventually(t, wait, "a trajectory on r0 to run a command", func() bool { return len(on("r0", 1)) > 0 })
	replica := func(name string) (coordinator.ReplicaStatus, bool) {
		st, err := coord.Status(e.ctx)
		if err != nil {
			return coordinator.ReplicaStatus{}, false
		}
		i := slices.IndexFunc(st.Replicas, func(r coordinator.ReplicaStatus) bool { return r.Name == name })
		if i < 0 {
			return coordinator.ReplicaStatus{}, false
		}
		return st.Replicas[i], true
	}
	if r, ok := replica("r1"); ok {
		t.Fatalf("r1 known before any gen-worker of it: %+v", r)
	}

	// r1's worker has a slot more than the coordinator's ACTLOOP_SLOTS: the
	// capacity counted is the one its heartbeat announces.
	gc := e.stack.GenWorkerConfig("r1")
	gc.Slots = cfg.Slots + 1
	if _, err := e.stack.StartGenWorkerWith(e.ctx, gc, nil); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, wait, "r1 to join with its slots", func() bool {
		r, ok := replica("r1")
		st, err := coord.Status(e.ctx)
		// The floor is 1.5 x the live replicas' slots.
		return ok && r.Live && r.Slots == gc.Slots && err == nil && st.MaxActiveFloor == (3*(cfg.Slots+gc.Slots)+1)/2
	})
	testkit.Eventually(t, wait, "a trajectory admitted to r1 to run a command", func() bool { return len(on("r1", 1)) > 0 })

	stranded := on("r0", 1) // hung on r0: they must move
	if len(stranded) == 0 {
		t.Fatal("no trajectory in flight on r0")
	}
	stopR0()
	got := e.results(len(samples))
	for _, s := range samples {
		r := got[s.ID]
		if r.Status != schema.StatusSubmitted || !r.Solved() {
			t.Errorf("%s: %s %q reward %g", s.ID, r.Status, r.Reason, r.Reward)
			continue
		}
		checkConsistent(t, r)
	}
	// The two samples of a group run one task's script: the same turns,
	// whichever replicas they ran on and however often they moved.
	for i := 0; i+1 < len(samples); i += 2 {
		a, b := got[samples[i].ID], got[samples[i+1].ID]
		if a.Turns != b.Turns || a.Commands != b.Commands || len(a.Messages) != len(b.Messages) {
			t.Errorf("%s and %s differ: turns %d/%d commands %d/%d messages %d/%d", samples[i].ID, samples[i+1].ID,
				a.Turns, b.Turns, a.Commands, b.Commands, len(a.Messages), len(b.Messages))
			continue
		}
		for k := range a.Messages {
			if a.Messages[k].Content != b.Messages[k].Content {
				t.Errorf("%s and %s: message %d differs: %q / %q", samples[i].ID, samples[i+1].ID, k, a.Messages[k].Content, b.Messages[k].Content)
			}
		}
	}
	for _, id := range stranded {
		if tr, err := e.st.Load(e.ctx, id, 0); err != nil || tr.Replica != "r1" {
			t.Errorf("%s did not move to r1: %+v %v", id, tr, err)
		}
	}
	st, err := coord.Status(e.ctx)
	if err != nil || st.Moved < int64(len(stranded)) {
		t.Fatalf("status %+v %v", st, err)
	}
	if r, ok := replica("r0"); !ok || r.Live {
		t.Errorf("r0 (expected) after its gen-worker stopped: %+v %v", r, ok)
	}
}
