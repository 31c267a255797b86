package devstack_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/coordinator"
	"github.com/actloop/actloop/internal/demo"
	"github.com/actloop/actloop/internal/devstack"
	"github.com/actloop/actloop/internal/envworker"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/pkg/schema"
)

func simSample(id string, script ...string) schema.Sample {
	s := schema.Sample{V: schema.Version, ID: id, Task: "task " + id, Script: script,
		Env: schema.Env{Backend: schema.BackendSim, Eval: "exit 0"}, Sampling: schema.Sampling{MaxNewTokens: 4096}}
	s.Normalize()
	return s
}

// Limits end a trajectory (limit_exceeded, not evaluated by default); a
// trajectory that cannot finish (its sandbox does not start, or it stops
// advancing) still produces a result: failed or fallback, with reward 0,
// no trainable tokens and the reason.
func TestLimitsAndFallbacks(t *testing.T) {
	e := newEnv(t, 1)
	cfg := e.stack.CoordinatorConfig()
	cfg.StallTimeout = 2 * time.Second
	startOneOfEach(t, e, cfg, nil)
	echo := "THOUGHT: again.\n\n```bash\necho hi\n```"
	steps := simSample("steps", echo, echo, echo, echo)
	steps.Limits.StepLimit = 2
	budget := simSample("budget", strings.Repeat("x ", 100)+echo)
	budget.Limits.TokenBudget = 50
	setup := simSample("setup")
	setup.Env.Setup = []string{"exit 3"}
	slow := simSample("slow", "THOUGHT: this takes long.\n\n```bash\nsleep 30\n```", "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```")
	slow.Env.StepTimeoutMS = 200
	// Setup of 160 s under a wall clock of 2 s: stopped, and ended as the
	// wall clock ends a trajectory between turns (issue 31, item 7).
	clock := simSample("clock")
	clock.Env.Setup = slices.Repeat([]string{"sleep 20"}, 8)
	clock.Limits.WallClockMS = 2000
	e.submit(steps, budget, setup, slow, clock)

	got := e.results(5)
	// A command's timeout is an observation for the model, not a failure.
	if r := got["slow"]; !r.Solved() || r.Turns != 2 || !strings.Contains(r.Messages[3].Content, "timed out") {
		t.Errorf("slow: %s %q turns %d; observation %q", r.Status, r.Reason, r.Turns, r.Messages[3].Content)
	}
	for id, want := range map[string]struct {
		status, reason string
		turns          int
	}{
		"steps":  {schema.StatusLimitExceeded, "limits exceeded: step_limit 2 reached", 2},
		"budget": {schema.StatusLimitExceeded, "limits exceeded: token_budget 50 reached", 1},
		"setup":  {schema.StatusFailed, "setup command 0", 0},
		"clock":  {schema.StatusLimitExceeded, "limits exceeded: wall_clock 2s reached during setup", 0},
	} {
		r := got[id]
		if r.Status != want.status || !strings.Contains(r.Reason, want.reason) || r.Turns != want.turns {
			t.Errorf("%s: status %s reason %q turns %d, want %s %q %d", id, r.Status, r.Reason, r.Turns,
				want.status, want.reason, want.turns)
		}
		if r.Status == schema.StatusFailed && (r.Reward != 0 || len(r.LossMask) != 0 || len(r.Tokens) != 0) {
			t.Errorf("%s: failed with reward %g and %d tokens", id, r.Reward, len(r.Tokens))
		}
	}
	if r := got["steps"]; r.Reward != 0 || r.Limit != schema.LimitStep {
		t.Errorf("a trajectory ended by its step limit: limit %q, reward %g; want step_limit, 0 (not evaluated)", r.Limit, r.Reward)
	}
	if r := got["clock"]; r.Limit != schema.LimitWallClock || r.Reward != 0 || len(r.Tokens) != 0 {
		t.Errorf("clock: limit %q, reward %g, %d tokens; want wall_clock, 0, none", r.Limit, r.Reward, len(r.Tokens))
	}
	if r := got["budget"]; r.GenTokens != 50 {
		t.Errorf("budget: %d generated tokens, want the budget of 50", r.GenTokens)
	}
	// Finished state expires once the result is stored.
	for _, id := range []string{"steps", "setup"} {
		ttl, err := e.stack.RedisClient().PTTL(e.ctx, "actloop:traj:{"+id+"}").Result()
		if err != nil || ttl <= 0 {
			t.Errorf("%s: ttl %v %v, want an expiry", id, ttl, err)
		}
	}
}

// A step that runs longer than ACTLOOP_REPUBLISH_AFTER, ACTLOOP_STALL_TIMEOUT
// and MAX_DELIVER back-offs put together, within its own timeout, holds its
// lease and finishes: it is not published again, not given up on and not
// ended as stalled. (A copy of it reaching the worker that runs it would
// be terminated without counting.)
func TestLongStepIsNotEnded(t *testing.T) {
	e := newEnvWith(t, 1, func(o *devstack.Options) {
		o.Common.MaxDeliver = 2
		o.Common.StepLease = time.Second
	})
	cfg := e.stack.CoordinatorConfig()
	cfg.RepublishAfter, cfg.StallTimeout = time.Second, time.Second
	coord := startOneOfEach(t, e, cfg, nil)
	long := simSample("long", "THOUGHT: the tests take a while.\n\n```bash\nsleep 6\n```",
		"```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```")
	long.Env.StepTimeoutMS = 60_000
	e.submit(long)
	r := e.results(1)["long"]
	if !r.Solved() || r.Turns != 2 || strings.Contains(r.Messages[3].Content, "timed out") {
		t.Fatalf("long: %s %q turns %d", r.Status, r.Reason, r.Turns)
	}
	st, err := coord.Status(e.ctx)
	if err != nil || st.Republished != 0 {
		t.Fatalf("status %+v %v: the running step was published again", st, err)
	}
}

// A trajectory that stops advancing with no step running (its work
// message lost, republishing off) ends with a fallback once
// ACTLOOP_STALL_TIMEOUT passes.
func TestStalledTrajectoryFallsBack(t *testing.T) {
	e := newEnv(t, 1)
	cfg := e.stack.CoordinatorConfig()
	cfg.RepublishAfter, cfg.StallTimeout = 0, 2*time.Second
	if _, err := e.stack.StartCoordinator(e.ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := e.stack.StartGenWorker(e.ctx, "r0", nil); err != nil {
		t.Fatal(err)
	}
	e.submit(simSample("stall", "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"))
	purgeStart(t, e)
	if _, err := e.stack.StartEnvWorker(e.ctx, e.stack.EnvWorkerConfig("env-0")); err != nil {
		t.Fatal(err)
	}
	r := e.results(1)["stall"]
	if r.Status != schema.StatusFallback || !strings.Contains(r.Reason, "stalled: no progress") || r.Reward != 0 || len(r.Tokens) != 0 {
		t.Fatalf("stall: %s %q reward %g, %d tokens", r.Status, r.Reason, r.Reward, len(r.Tokens))
	}
}

// purgeStart waits for the sandbox start of the one sample submitted and
// removes it from its stream, as if it had been lost.
func purgeStart(t *testing.T, e *env) {
	t.Helper()
	stream, err := e.js.Stream(e.ctx, bus.StreamEnv)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, wait, "the sandbox start to be published", func() bool {
		info, err := stream.Info(e.ctx, jetstream.WithSubjectFilter(bus.SubjectEnvStart))
		return err == nil && info.State.Subjects[bus.SubjectEnvStart] > 0
	})
	if err := stream.Purge(e.ctx, jetstream.WithPurgeSubject(bus.SubjectEnvStart)); err != nil {
		t.Fatal(err)
	}
}

// A work message lost after its trajectory's state was committed (here the
// sandbox start, purged from its stream before any env-worker ran) is
// published again from the state in Redis once the trajectory has not
// advanced for ACTLOOP_REPUBLISH_AFTER, and the trajectory finishes.
func TestLostWorkMessageIsPublishedAgain(t *testing.T) {
	e := newEnv(t, 1)
	cfg := e.stack.CoordinatorConfig()
	cfg.RepublishAfter = time.Second
	coord, err := e.stack.StartCoordinator(e.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.stack.StartGenWorker(e.ctx, "r0", nil); err != nil {
		t.Fatal(err)
	}
	e.submit(simSample("lost", "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"))
	purgeStart(t, e)
	if _, err := e.stack.StartEnvWorker(e.ctx, e.stack.EnvWorkerConfig("env-0")); err != nil {
		t.Fatal(err)
	}
	if r := e.results(1)["lost"]; !r.Solved() {
		t.Fatalf("lost: %s %q", r.Status, r.Reason)
	}
	st, err := coord.Status(e.ctx)
	if err != nil || st.Republished < 1 {
		t.Fatalf("status %+v %v: want the start published again", st, err)
	}
}

// Sandbox creation that fails the way it does in clusters is tried again
// with a back-off; a trajectory whose sandbox cannot be created within the
// attempts ends with a fallback naming the error. Both are counted.
func TestSandboxCreationRetries(t *testing.T) {
	e := newEnv(t, 1)
	if _, err := e.stack.StartCoordinator(e.ctx, e.stack.CoordinatorConfig()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.stack.StartGenWorker(e.ctx, "r0", nil); err != nil {
		t.Fatal(err)
	}
	cfg := e.stack.EnvWorkerConfig("env-0")
	cfg.SimStartFailures, cfg.SandboxStartAttempts, cfg.SandboxStartBackoff = 0.5, 3, 10*time.Millisecond
	ed, err := e.stack.StartEnvWorker(e.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	const n = 12
	for i := range n {
		e.submit(simSample(fmt.Sprintf("flaky-%02d", i), "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"))
	}
	got := e.results(n)
	failed := 0
	for id, r := range got {
		switch {
		case r.Solved():
		case r.Status == schema.StatusFallback && strings.Contains(r.Reason, "sandbox creation failed 3 times") &&
			strings.Contains(r.Reason, "simulated creation failure"):
			failed++
		default:
			t.Errorf("%s: %s %q, want solved or a fallback naming the creation failure", id, r.Status, r.Reason)
		}
	}
	fams, err := ed.Metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			count[f.GetName()] += m.GetCounter().GetValue()
		}
	}
	if count["actloop_sandbox_start_retries_total"] < 1 || count["actloop_sandbox_start_failures_total"] != float64(failed) || failed == n {
		t.Errorf("retries %v, failures %v, fallbacks %d of %d", count["actloop_sandbox_start_retries_total"],
			count["actloop_sandbox_start_failures_total"], failed, n)
	}
	t.Logf("%d of %d trajectories could not get a sandbox; %v retries", failed, n, count["actloop_sandbox_start_retries_total"])
}

// A running trajectory whose state is deleted from Redis (a Redis that lost
// its data) starts again from its kept sample and completes; one whose
// state is lost a second time ends in a fallback naming the loss, with its
// group fields, so its group completes. Each ends in exactly one result.
func TestLostStateIsReadmittedThenFallsBack(t *testing.T) {
	e := newEnv(t, 1)
	cfg := e.stack.CoordinatorConfig()
	cfg.ResultGrace = time.Second // the sweep looks every quarter of it
	coord := startOneOfEach(t, e, cfg, nil)
	submit := "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"
	gone := simSample("gone", "THOUGHT: a long command.\n\n```bash\nsleep 20\n```", submit)
	gone.Env.StepTimeoutMS = 60_000
	once := simSample("once", "THOUGHT: a command.\n\n```bash\nsleep 3\n```", submit)
	sibling := simSample("sibling", submit)
	for i, s := range []*schema.Sample{&gone, &sibling} {
		s.GroupID, s.GroupIndex, s.GroupSize = "g-lost", i, 2
	}
	e.submit(gone, once, sibling)
	rdb := e.stack.RedisClient()
	running := func(id string) func() bool {
		return func() bool { return rdb.HGet(e.ctx, "actloop:traj:{"+id+"}", "status").Val() == "needs_env_step" }
	}
	lose := func(id string) {
		for _, k := range []string{"", ":msgs", ":tok", ":lp", ":mask", ":ver", ":audit", ":exec"} {
			if err := rdb.Del(e.ctx, "actloop:traj:{"+id+"}"+k).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	testkit.Eventually(t, wait, "the commands to run", func() bool { return running("gone")() && running("once")() })
	lose("gone")
	lose("once")
	testkit.Eventually(t, wait, "both to be admitted again", func() bool {
		st, err := coord.Status(e.ctx)
		return err == nil && st.Readmitted == 2
	})
	testkit.Eventually(t, wait, "the long command to run again", running("gone"))
	lose("gone")
	got := e.results(3)
	if r := got["gone"]; r.Status != schema.StatusFallback || !strings.HasPrefix(r.Reason, "lost:") || r.GroupID != "g-lost" ||
		r.GroupIndex != 0 || r.GroupSize != 2 || len(r.Tokens) != 0 {
		t.Fatalf("gone: %s %q group %s/%d/%d", r.Status, r.Reason, r.GroupID, r.GroupIndex, r.GroupSize)
	}
	if r := got["once"]; !r.Solved() || r.Turns != 2 {
		t.Fatalf("once: %s %q, %d turns", r.Status, r.Reason, r.Turns)
	}
	checkConsistent(t, got["once"])
	if r := got["sibling"]; !r.Solved() {
		t.Fatalf("sibling: %s %q", r.Status, r.Reason)
	}
	groups := readStream[schema.GroupDone](e, schema.StreamResults, schema.SubjectGroups, 1,
		func(g schema.GroupDone) string { return g.GroupID })
	if g := groups["g-lost"]; len(g.TrajIDs) != 2 || g.TrajIDs[0] != "gone" {
		t.Fatalf("group %+v", g)
	}
}

// A diff over ACTLOOP_MAX_DIFF_BYTES is not evaluated: the trajectory
// scores 0 with the reason, and keeps its diff cut to the limit, so its
// result stays small enough to publish.
func TestOversizedDiffScoresZero(t *testing.T) {
	e := newEnv(t, 1)
	startOneOfEach(t, e, e.stack.CoordinatorConfig(), func(c *envworker.Config) { c.MaxDiffBytes = 100_000 })
	s := demo.Samples(1, e.ws, "diff")[0]
	s.Script = []string{"THOUGHT: write a large file.\n\n```bash\nhead -c 2000000 /dev/zero | tr '\\0' a > big.txt\n```",
		"```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached\n```"}
	s.Env.Eval = "exit 0" // would pass: the diff is never evaluated
	e.submit(s)
	r := e.results(1)[s.ID]
	if r.Status != schema.StatusSubmitted || r.Reward != 0 || !strings.Contains(r.Reason, "over ACTLOOP_MAX_DIFF_BYTES") ||
		len(r.Diff) != 100_000 {
		t.Fatalf("%s: %s %q reward %g, diff of %d bytes", s.ID, r.Status, r.Reason, r.Reward, len(r.Diff))
	}
}

// startOneOfEach starts a coordinator with cfg, a gen-worker for r0 and
// env-worker env-0 (adjusted by tweak) whose simulated sandboxes take time
// only to `sleep`, and returns the coordinator.
func startOneOfEach(t *testing.T, e *env, cfg coordinator.Config, tweak func(*envworker.Config)) *coordinator.Coordinator {
	t.Helper()
	coord, err := e.stack.StartCoordinator(e.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.stack.StartGenWorker(e.ctx, "r0", nil); err != nil {
		t.Fatal(err)
	}
	envCfg := e.stack.EnvWorkerConfig("env-0")
	envCfg.SimStartLatency, envCfg.SimExecLatency, envCfg.SimEnvTimeScale = 0, 0, 1
	if tweak != nil {
		tweak(&envCfg)
	}
	if _, err := e.stack.StartEnvWorker(e.ctx, envCfg); err != nil {
		t.Fatal(err)
	}
	return coord
}
