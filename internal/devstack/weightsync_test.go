package devstack_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/coordinator"
	"github.com/actloop/actloop/internal/devstack"
	"github.com/actloop/actloop/internal/genworker"
	"github.com/actloop/actloop/internal/sim"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/pkg/schema"
)

// startSyncStack starts a coordinator, a gen-worker per replica and an
// env-worker whose commands take no time.
func startSyncStack(t *testing.T, e *env, tweak func(*coordinator.Config)) *coordinator.Coordinator {
	t.Helper()
	return startSyncStackWith(t, e, tweak, nil)
}

// startSyncStackWith is startSyncStack with genTweak applied to each
// gen-worker's configuration.
func startSyncStackWith(t *testing.T, e *env, tweak func(*coordinator.Config), genTweak func(*genworker.Config)) *coordinator.Coordinator {
	t.Helper()
	cfg := e.stack.CoordinatorConfig()
	cfg.PredictTimeout = 0
	if tweak != nil {
		tweak(&cfg)
	}
	coord, err := e.stack.StartCoordinator(e.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range e.stack.Replicas {
		gcfg := e.stack.GenWorkerConfig(r)
		if genTweak != nil {
			genTweak(&gcfg)
		}
		if _, err := e.stack.StartGenWorkerWith(e.ctx, gcfg, nil); err != nil {
			t.Fatal(err)
		}
	}
	envCfg := e.stack.EnvWorkerConfig("env-0")
	envCfg.SimEnvTimeScale = 0
	if _, err := e.stack.StartEnvWorker(e.ctx, envCfg); err != nil {
		t.Fatal(err)
	}
	return coord
}

// liveRequests counts the generations running on every replica's server
// that have produced at least minTokens.
func liveRequests(e *env, minTokens int) int {
	n := 0
	for _, s := range e.stack.Sims {
		for _, r := range s.Requests() {
			if r.Generated >= minTokens {
				n++
			}
		}
	}
	return n
}

// versionsSwitchOnce asserts the generated tokens of r carry version 0 up to
// some point and version 1 after it, and reports whether both occur.
func versionsSwitchOnce(t *testing.T, r schema.Result) bool {
	t.Helper()
	var seen []int32
	for i, m := range r.LossMask {
		if m != 1 {
			continue
		}
		v := r.Versions[i]
		if v != 0 && v != 1 {
			t.Fatalf("%s: token %d has version %d", r.TrajID, i, v)
		}
		if len(seen) > 0 && v < seen[len(seen)-1] {
			t.Fatalf("%s: versions go back at token %d", r.TrajID, i)
		}
		if len(seen) == 0 || seen[len(seen)-1] != v {
			seen = append(seen, v)
		}
	}
	return len(seen) == 2
}

// A pause with generations in flight aborts them all and commits their
// partial output; after the resume every trajectory finishes with exactly
// the tokens an uninterrupted run produces, the version switching from 0 to
// 1 at the pause.
func TestPauseAbortsInFlightAndResumeContinues(t *testing.T) {
	e := newEnvWith(t, 2, func(o *devstack.Options) {
		o.Slots = 4
		// Generations long enough in wall time that six are seen in
		// flight together on a loaded machine, where the poll below runs
		// late.
		o.Sim = sim.Config{TimeScale: 1.5, MaxTurns: 3}
	})
	coord := startSyncStack(t, e, nil)
	const n = 8
	var samples []schema.Sample
	for i := range n {
		samples = append(samples, simSample(fmt.Sprintf("ws-%d", i)))
	}
	e.submit(samples...)
	testkit.Eventually(t, wait, "generations in flight with output", func() bool { return liveRequests(e, 3) >= 6 })

	reply, err := coord.Pause(e.ctx, schema.PauseRequest{Mode: schema.PauseAbort})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pause: %+v", reply)
	for r, s := range e.stack.Sims {
		if live := s.Requests(); len(live) != 0 {
			t.Fatalf("%s still generates after the pause returned: %+v", r, live)
		}
	}
	for _, r := range e.stack.Replicas {
		if st := e.stack.GenWorker(r).Stats(); st.Running != 0 {
			t.Fatalf("%s: %d generations running after the pause", r, st.Running)
		}
	}
	// Six generations had output when the pause was called; one that ended
	// in the moment before its abort is not aborted, so ask for half.
	// The servers' share is part of the whole.
	if reply.Epoch != 1 || reply.Workers != 2 || reply.Aborted < 3 || reply.KeptTokens < 3*3 ||
		reply.ServerMS <= 0 || reply.ServerMS > reply.WaitedMS {
		t.Fatalf("pause reply %+v", reply)
	}
	again, err := coord.Pause(e.ctx, schema.PauseRequest{Mode: schema.PauseAbort})
	if err != nil || again.Epoch != reply.Epoch {
		t.Fatalf("a repeated pause is a new one: %+v %v", again, err)
	}
	v := int64(1)
	if _, err := coord.Resume(e.ctx, schema.ResumeRequest{WeightVersion: &v}); err != nil {
		t.Fatal(err)
	}
	if st, err := coord.Resume(e.ctx, schema.ResumeRequest{WeightVersion: &v}); err != nil || st.Paused || st.WeightVersion != 1 {
		t.Fatalf("repeated resume: %+v %v", st, err)
	}
	back := int64(0)
	if _, err := coord.Resume(e.ctx, schema.ResumeRequest{WeightVersion: &back}); err == nil {
		t.Fatal("a resume to an older weight version was accepted")
	}

	got := e.results(n)
	switched := 0
	for _, s := range samples {
		r := got[s.ID]
		if !r.Solved() {
			t.Fatalf("%s: %s %q", s.ID, r.Status, r.Reason)
		}
		checkConsistent(t, r)
		if versionsSwitchOnce(t, r) {
			switched++
		}
		if r.MaxVersion != 1 {
			t.Fatalf("%s: max version %d after the resume to 1", s.ID, r.MaxVersion)
		}
	}
	if switched == 0 {
		t.Fatal("no trajectory has tokens of both versions")
	}
	for i := range samples {
		samples[i].ID += "-again"
	}
	e.submit(samples...)
	ref := e.results(2 * n)
	for _, s := range samples {
		a, b := got[strings.TrimSuffix(s.ID, "-again")], ref[s.ID]
		if !slices.Equal(a.Tokens, b.Tokens) || !slices.Equal(a.Logprobs, b.Logprobs) || !slices.Equal(a.LossMask, b.LossMask) {
			t.Fatalf("%s: the paused run differs from an uninterrupted one", a.TrajID)
		}
	}
}

// A gen-worker cut off during a pause never answers: the pause names it
// when its timeout comes first, and returns without it once its heartbeat
// has lapsed.
func TestPauseWithADeadWorker(t *testing.T) {
	e := newEnvWith(t, 2, func(o *devstack.Options) {
		o.Sim = sim.Config{TimeScale: 0.5, MaxTurns: 3}
	})
	cfg := e.stack.CoordinatorConfig()
	cfg.PredictTimeout = 0
	// Long enough that the first pause below (200 ms) asks while the dead
	// worker's heartbeat is still recent, even on a loaded machine; the
	// second waits for it to lapse.
	cfg.ReplicaTimeout = 5 * time.Second
	coord, err := e.stack.StartCoordinator(e.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	gc := e.stack.GenWorkerConfig("r0")
	gc.HeartbeatInterval = 100 * time.Millisecond
	if _, err := e.stack.StartGenWorkerWith(e.ctx, gc, nil); err != nil {
		t.Fatal(err)
	}
	gc = e.stack.GenWorkerConfig("r1")
	gc.HeartbeatInterval = 100 * time.Millisecond
	dead, err := e.stack.StartGenWorkerWith(e.ctx, gc, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Both have reported, and the coordinator has their heartbeats (read by
	// another watch, later on a loaded machine): the pause waits for both.
	testkit.Eventually(t, wait, "both workers running", func() bool {
		c := coord.Control()
		st, _ := coord.Status(e.ctx) // st holds what could be read
		live := 0
		for _, r := range st.Replicas {
			if r.Live {
				live++
			}
		}
		return live == 2 && len(c.Workers) == 2 && !c.Control.Paused
	})
	dead.NC.Close() // no heartbeat, no report
	_, err = coord.Pause(e.ctx, schema.PauseRequest{TimeoutMS: 200})
	var pe *coordinator.PauseError
	if !errors.As(err, &pe) || !slices.Equal(pe.Missing, []string{"gen.r1.gen-r1"}) {
		t.Fatalf("pause with a dead worker: %v", err)
	}
	reply, err := coord.Pause(e.ctx, schema.PauseRequest{TimeoutMS: int64(wait / time.Millisecond)})
	if err != nil || reply.Workers != 1 {
		t.Fatalf("pause after the dead worker's heartbeat lapsed: %+v %v", reply, err)
	}

	// A worker that starts during the pause starts paused and says so: the
	// same pause, asked again, now counts it.
	gc = e.stack.GenWorkerConfig("r1")
	gc.WorkerID, gc.HeartbeatInterval = "gen-r1-new", 100*time.Millisecond
	if _, err := e.stack.StartGenWorkerWith(e.ctx, gc, nil); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, wait, "the new worker to heartbeat", func() bool {
		for _, w := range coord.Control().Workers {
			if w.Worker == "gen-r1-new" {
				return true
			}
		}
		return false
	})
	// Its pause report and its heartbeat are read by different watches:
	// ask until the coordinator has seen both.
	var again schema.PauseReply
	testkit.Eventually(t, wait, "the same pause to count the new worker", func() bool {
		again, err = coord.Pause(e.ctx, schema.PauseRequest{TimeoutMS: int64(wait / time.Millisecond)})
		if err != nil || again.Epoch != reply.Epoch {
			t.Fatalf("pause with a worker started during it: %+v %v", again, err)
		}
		return again.Workers == 2
	})
	if !e.stack.GenWorker("r1").Paused() {
		t.Fatal("the worker started during a pause is not paused")
	}
}

// Each stale policy with max_staleness 0 and one weight update while the
// trajectories run: what version 0 generated is stale once version 1 is
// current.
func TestStalePolicies(t *testing.T) {
	for _, policy := range []string{schema.StaleKeep, schema.StaleMask, schema.StaleRestart} {
		t.Run(policy, func(t *testing.T) {
			e := newEnvWith(t, 1, func(o *devstack.Options) {
				o.Slots = 4
				o.Sim = sim.Config{TimeScale: 0.3, MaxTurns: 3}
			})
			coord := startSyncStack(t, e, func(c *coordinator.Config) { c.MaxStaleness, c.StalePolicy = 0, policy })
			const n = 4
			var samples []schema.Sample
			for i := range n {
				samples = append(samples, simSample(fmt.Sprintf("stale-%s-%d", policy, i)))
			}
			e.submit(samples...)
			testkit.Eventually(t, wait, "generations in flight with output", func() bool { return liveRequests(e, 3) >= 2 })
			if _, err := coord.Pause(e.ctx, schema.PauseRequest{}); err != nil {
				t.Fatal(err)
			}
			v := int64(1)
			if _, err := coord.Resume(e.ctx, schema.ResumeRequest{WeightVersion: &v}); err != nil {
				t.Fatal(err)
			}
			got := e.results(n)
			flagged, restarted := 0, 0
			for _, s := range samples {
				r := got[s.ID]
				if !r.Solved() {
					t.Fatalf("%s: %s %q", s.ID, r.Status, r.Reason)
				}
				old := 0 // generated tokens of version 0
				for i, v := range r.Versions {
					if v == 0 {
						old++
						if want := int8(1); policy == schema.StaleMask {
							want = 0
							if r.LossMask[i] != want {
								t.Fatalf("%s: token %d of version 0 has loss mask %d", s.ID, i, r.LossMask[i])
							}
						}
					}
				}
				if r.Stale != (old > 0) || r.StaleTokens != old {
					t.Fatalf("%s: stale %v with %d stale tokens, but %d tokens of version 0", s.ID, r.Stale, r.StaleTokens, old)
				}
				if policy != schema.StaleMask {
					checkConsistent(t, r)
				}
				if r.Stale {
					flagged++
				}
				if r.Restarts > 0 {
					restarted++
				}
			}
			switch policy {
			case schema.StaleRestart:
				if restarted == 0 || e.stack.GenWorker("r0").Stats().Restarts == 0 {
					t.Fatal("no trajectory started again")
				}
			default:
				if flagged == 0 || restarted != 0 {
					t.Fatalf("%d stale, %d restarted", flagged, restarted)
				}
			}
		})
	}
}

// With max_staleness 0 and a trainer batch of 2, version 0 admits two
// trajectories in all; the next two wait for version 1. A validation
// rollout is outside the bound: it runs while they wait, is counted apart,
// and completes no group.
func TestStalenessBoundsAdmission(t *testing.T) {
	e := newEnv(t, 1)
	coord := startSyncStack(t, e, func(c *coordinator.Config) { c.MaxStaleness, c.TrainBatchSize = 0, 2 })
	var samples []schema.Sample
	for i := range 4 {
		samples = append(samples, simSample(fmt.Sprintf("bound-%d", i)))
	}
	e.submit(samples...)
	testkit.Eventually(t, wait, "two finished, two waiting, no room", func() bool {
		st, err := coord.Status(e.ctx)
		return err == nil && st.Finished[schema.StatusSubmitted] == 2 && st.Active == 0 && st.Queued == 2 && st.StalenessRoom == 0
	})
	val := groupSample("val-0", "val", 0, 1)
	val.Purpose = schema.PurposeValidation
	e.submit(val)
	if r := e.results(3)[val.ID]; !r.Solved() || r.Purpose != schema.PurposeValidation {
		t.Fatalf("validation rollout: %s %q purpose %q", r.Status, r.Reason, r.Purpose)
	}
	testkit.Eventually(t, wait, "the validation result counted apart, the bound unchanged", func() bool {
		st, err := coord.Status(e.ctx)
		return err == nil && st.Finished["validation:"+schema.StatusSubmitted] == 1 &&
			st.Finished[schema.StatusSubmitted] == 2 && st.Queued == 2 && st.StalenessRoom == 0
	})
	v := int64(1)
	if _, err := coord.Resume(e.ctx, schema.ResumeRequest{WeightVersion: &v}); err != nil {
		t.Fatal(err)
	}
	got := e.results(5)
	for _, s := range samples {
		if r := got[s.ID]; !r.Solved() {
			t.Fatalf("%s: %s %q", s.ID, r.Status, r.Reason)
		}
	}
	resultsHandled(e)
	for _, m := range resultsStream(e) {
		if schema.IsGroup(m.subject) {
			t.Fatalf("a group completed: %s (a validation rollout counts towards none)", m.subject)
		}
	}
}

// Pauses (both modes) and resumes in quick succession while trajectories
// run and preempt each other: every trajectory still finishes consistent,
// with the versions of its tokens never going back.
func TestRepeatedPauseResumeWithPreemption(t *testing.T) {
	e := newEnvWith(t, 1, func(o *devstack.Options) {
		o.Slots = 2
		o.Sim = sim.Config{TimeScale: 0.1, MaxTurns: 4}
	})
	coord := startSyncStackWith(t, e, func(c *coordinator.Config) { c.Policy, c.HighSlots = "lpt", 1 },
		func(g *genworker.Config) { g.Preempt = true })
	const n = 8
	var samples []schema.Sample
	for i := range n {
		samples = append(samples, simSample(fmt.Sprintf("rep-%d", i)))
	}
	e.submit(samples...)
	testkit.Eventually(t, wait, "generations in flight", func() bool { return liveRequests(e, 1) >= 1 })
	for v := int64(1); v <= 12; v++ {
		mode := schema.PauseAbort
		if v%3 == 0 {
			mode = schema.PauseDrain
		}
		if _, err := coord.Pause(e.ctx, schema.PauseRequest{Mode: mode}); err != nil {
			t.Fatal(err)
		}
		if _, err := coord.Resume(e.ctx, schema.ResumeRequest{WeightVersion: &v}); err != nil {
			t.Fatal(err)
		}
	}
	got := e.results(n)
	t.Logf("gen-worker: %+v", e.stack.GenWorker("r0").Stats())
	for _, s := range samples {
		r := got[s.ID]
		if !r.Solved() {
			t.Fatalf("%s: %s %q", s.ID, r.Status, r.Reason)
		}
		checkConsistent(t, r)
		last := int32(-1)
		for i, m := range r.LossMask {
			if m == 1 {
				if r.Versions[i] < last {
					t.Fatalf("%s: versions go back at token %d", s.ID, i)
				}
				last = r.Versions[i]
			}
		}
	}
}
