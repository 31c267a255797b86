package genworker_test

import (
	"math"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/priority"
	"github.com/actloop/actloop/pkg/schema"
)

// A gen step of a trajectory its replica's snapshot holds is handed back,
// never sent to the server and never given up on, however often it is
// delivered; once a snapshot lets the trajectory go, it runs to its end.
func TestHeldStepWaitsForItsRelease(t *testing.T) {
	const wait = 2 * time.Minute
	common := service.CommonDefaults()
	common.MaxDeliver = 2
	ctx, stack, d, rec, ts := recordedStack(t, common, 0.01)
	kv, err := d.JS.KeyValue(ctx, bus.BucketPriority)
	if err != nil {
		t.Fatal(err)
	}
	// Versions above any the coordinator could publish: these snapshots
	// are the only ones that count.
	publish := func(version int64, held map[string]bool) {
		t.Helper()
		b, err := (&priority.Snapshot{Replica: "r0", Version: version, High: map[string]bool{}, Held: held}).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, "r0", b); err != nil {
			t.Fatal(err)
		}
	}
	publish(math.MaxInt64-1, map[string]bool{"x": true})
	ccfg := stack.CoordinatorConfig()
	ccfg.PredictTimeout, ccfg.SnapshotInterval = 0, time.Hour // no snapshot of its own within the test
	if _, err := stack.StartCoordinator(ctx, ccfg); err != nil {
		t.Fatal(err)
	}
	gcfg := stack.GenWorkerConfig("r0")
	gcfg.LLMURL = ts.URL
	if _, err := stack.StartGenWorkerWith(ctx, gcfg, nil); err != nil {
		t.Fatal(err)
	}
	ecfg := stack.EnvWorkerConfig("env-0")
	ecfg.SimEnvTimeScale = 0
	if _, err := stack.StartEnvWorker(ctx, ecfg); err != nil {
		t.Fatal(err)
	}
	if err := d.Pub.Publish(ctx, schema.SubjectSamples, "x", ridSample("x", 1)); err != nil {
		t.Fatal(err)
	}
	// Handed back more often than MAX_DELIVER: still not given up on.
	testkit.Eventually(t, wait, "x's step handed back three times", func() bool {
		return stack.GenWorker("r0").Stats().HeldSteps >= 3
	})
	if reqs := rec.requests(); len(reqs) != 0 {
		t.Fatalf("a held trajectory's generation reached the server: %+v", reqs)
	}
	if tr, err := d.Store.Load(ctx, "x", 0); err != nil || tr.Status != traj.StatusNeedsGeneration {
		t.Fatalf("x while held: %+v, %v; want it waiting for its generation", tr, err)
	}
	publish(math.MaxInt64, nil)
	testkit.Eventually(t, wait, "x to finish once let go", func() bool {
		tr, err := d.Store.Load(ctx, "x", 0)
		return err == nil && tr.Status == traj.StatusTerminated
	})
	if tr, err := d.Store.Load(ctx, "x", 0); err != nil || tr.End != schema.StatusSubmitted || tr.Calls != 2 {
		t.Fatalf("x at its end: %+v, %v; want submitted after 2 calls", tr, err)
	}
}
