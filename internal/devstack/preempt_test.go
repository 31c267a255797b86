package devstack_test

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/devstack"
	"github.com/actloop/actloop/internal/sim"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/pkg/priority"
)

// A high-priority step arriving while the only slot runs a low-priority
// generation preempts it; the preempted trajectory resumes under the same
// request id and ends with exactly the tokens an uninterrupted run produces.
func TestPreemptionKeepsTheTokenStream(t *testing.T) {
	e := newEnvWith(t, 1, func(o *devstack.Options) {
		o.Slots = 1
		o.Sim = sim.Config{TimeScale: 1, MaxTurns: 2} // generations take about a second or more
	})
	// The test decides the classes: "hi-a" is high. (The coordinator below
	// publishes no snapshot of its own within the test.)
	kv, err := e.js.KeyValue(e.ctx, bus.BucketPriority)
	if err != nil {
		t.Fatal(err)
	}
	snap := &priority.Snapshot{Replica: "r0", Version: math.MaxInt64, High: map[string]bool{"hi-a": true}}
	b, err := snap.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(e.ctx, "r0", b); err != nil {
		t.Fatal(err)
	}
	cfg := e.stack.CoordinatorConfig()
	cfg.PredictTimeout = 0
	cfg.SnapshotInterval = time.Hour
	cfg.KVBudget = 0 // admit both at once: by KV, one slot's share of the pool is all of it
	if _, err := e.stack.StartCoordinator(e.ctx, cfg); err != nil {
		t.Fatal(err)
	}
	gcfg := e.stack.GenWorkerConfig("r0")
	gcfg.KVBudget = 0 // one slot, however much the server's pool holds: it is full
	gcfg.Preempt = true
	if _, err := e.stack.StartGenWorkerWith(e.ctx, gcfg, nil); err != nil {
		t.Fatal(err)
	}
	envCfg := e.stack.EnvWorkerConfig("env-0")
	envCfg.SimEnvTimeScale = 0
	if _, err := e.stack.StartEnvWorker(e.ctx, envCfg); err != nil {
		t.Fatal(err)
	}
	lowTask := simSample("lo-b")
	lowTask.Task = "the same long task"
	e.submit(lowTask)
	testkit.Eventually(t, wait, "the low generation to have produced some tokens", func() bool {
		for _, r := range e.stack.Sims["r0"].Requests() {
			if r.Generated >= 5 {
				return true
			}
		}
		return false
	})
	e.submit(simSample("hi-a"))
	got := e.results(2)
	st := e.stack.GenWorker("r0").Stats()
	t.Logf("gen-worker: %+v", st)
	if st.Preemptions < 1 || st.ResumedTokens < 5 {
		t.Fatalf("no preemption: %+v", st)
	}
	for _, id := range []string{"hi-a", "lo-b"} {
		if r := got[id]; !r.Solved() {
			t.Fatalf("%s: %s %q", id, r.Status, r.Reason)
		}
		checkConsistent(t, got[id])
	}

	// The same task alone, never preempted: the same tokens and log-probs.
	again := lowTask
	again.ID = "lo-b-again"
	e.submit(again)
	ref := e.results(3)["lo-b-again"]
	if b := got["lo-b"]; !slices.Equal(b.Tokens, ref.Tokens) || !slices.Equal(b.Logprobs, ref.Logprobs) || !slices.Equal(b.LossMask, ref.LossMask) {
		t.Fatalf("preempted run differs from an uninterrupted one:\n%q\n%q",
			string(decode(b.Tokens)), string(decode(ref.Tokens)))
	}
	if after := e.stack.GenWorker("r0").Stats(); after.Preemptions != st.Preemptions {
		t.Fatalf("the reference run was preempted too: %+v", after)
	}
}
