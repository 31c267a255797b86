package devstack_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/llm"
	"github.com/actloop/actloop/pkg/priority"
	"github.com/actloop/actloop/pkg/schema"
)

// A small batch under ACTLOOP_SCHEDULING=trajectory on both the
// coordinator and the gen-worker runs to completion: each trajectory
// holds a slot for its life, admission is exactly the slots, and every
// result is complete.
func TestTrajectorySchedulingEndToEnd(t *testing.T) {
	e := newEnv(t, 1)
	cfg := e.stack.CoordinatorConfig()
	cfg.Scheduling = priority.SchedulingTrajectory
	cfg.MaxActive, cfg.MaxActiveCeiling = 0, 0
	coord, err := e.stack.StartCoordinator(e.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	gcfg := e.stack.GenWorkerConfig("r0")
	gcfg.Scheduling = priority.SchedulingTrajectory
	if _, err := e.stack.StartGenWorkerWith(e.ctx, gcfg, nil); err != nil {
		t.Fatal(err)
	}
	ecfg := e.stack.EnvWorkerConfig("env-0")
	ecfg.SimStartLatency, ecfg.SimExecLatency, ecfg.SimEnvTimeScale = 0, 0, 1
	if _, err := e.stack.StartEnvWorker(e.ctx, ecfg); err != nil {
		t.Fatal(err)
	}
	var samples []schema.Sample
	for _, id := range []string{"tr-a", "tr-b", "tr-c", "tr-d", "tr-e"} {
		samples = append(samples, simSample(id, "```bash\necho hello\n```",
			"```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"))
	}
	e.submit(samples...)
	got := e.results(len(samples))
	for _, s := range samples {
		r := got[s.ID]
		if r.Status != schema.StatusSubmitted || !r.Solved() || r.Turns != 2 || r.Commands != 2 {
			t.Errorf("%s: %s %q reward %g, %d turns, %d commands", s.ID, r.Status, r.Reason, r.Reward, r.Turns, r.Commands)
			continue
		}
		checkConsistent(t, r)
	}
	st, err := coord.Status(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if slots := e.stack.Opts.Slots; st.MaxActive != slots || st.MaxActiveCeiling != slots {
		t.Errorf("admission limit %d (ceiling %d), want exactly the %d slots", st.MaxActive, st.MaxActiveCeiling, slots)
	}
	if got := coord.Control().Control.Scheduling; got != priority.SchedulingTrajectory {
		t.Errorf("control state names scheduling %q, want trajectory", got)
	}
}

// countingGen counts the generations asked of it.
type countingGen struct {
	llm.Generator
	calls atomic.Int64
}

func (g *countingGen) Generate(ctx context.Context, req llm.Request) (llm.Result, error) {
	g.calls.Add(1)
	return g.Generator.Generate(ctx, req)
}

// A gen-worker whose ACTLOOP_SCHEDULING differs from the coordinator's
// takes no step: its /readyz answers 503 naming both values, it exports
// actloop_scheduling_mismatch 1, and its replica's gen step waits until a
// worker that agrees serves the replica, which then runs the trajectory
// to its end. The mismatched worker's server is never called.
func TestMismatchedGenWorkerTakesNoStep(t *testing.T) {
	e := newEnv(t, 1)
	if _, err := e.stack.StartCoordinator(e.ctx, e.stack.CoordinatorConfig()); err != nil { // action, the default
		t.Fatal(err)
	}
	wrongCfg := e.stack.GenWorkerConfig("r0")
	wrongCfg.Scheduling, wrongCfg.WorkerID = priority.SchedulingTrajectory, "gen-r0-wrong"
	wrong := &countingGen{Generator: llm.NewSGLang(e.stack.SimURLs["r0"], llm.SGLangOptions{})}
	if _, err := e.stack.StartGenWorkerWith(e.ctx, wrongCfg, wrong); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.stack.GenWorker("r0").Handler())
	t.Cleanup(srv.Close)
	ecfg := e.stack.EnvWorkerConfig("env-0")
	ecfg.SimStartLatency, ecfg.SimExecLatency, ecfg.SimEnvTimeScale = 0, 0, 1
	if _, err := e.stack.StartEnvWorker(e.ctx, ecfg); err != nil {
		t.Fatal(err)
	}
	s := simSample("mismatch", "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```")
	e.submit(s)

	var body string
	testkit.Eventually(t, wait, "the mismatched worker's /readyz to say why it is not ready", func() bool {
		resp, err := http.Get(srv.URL + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == http.StatusServiceUnavailable
	})
	if !strings.Contains(body, "ACTLOOP_SCHEDULING") || !strings.Contains(body, "this gen-worker has trajectory, the coordinator action") {
		t.Errorf("/readyz: %q, want both modes named", body)
	}
	if v := value(scrape(t, srv.URL+"/metrics")["actloop_scheduling_mismatch"], map[string]string{"replica": "r0"}); v != 1 {
		t.Errorf("actloop_scheduling_mismatch = %g, want 1", v)
	}
	testkit.Eventually(t, wait, "the trajectory's first gen step to be waiting", func() bool {
		tr, err := e.st.Load(e.ctx, s.ID, 0)
		return err == nil && tr.Status == traj.StatusNeedsGeneration
	})

	// A worker that agrees serves the replica: the step it waited for runs.
	if _, err := e.stack.StartGenWorkerWith(e.ctx, e.stack.GenWorkerConfig("r0"), nil); err != nil {
		t.Fatal(err)
	}
	r := e.results(1)[s.ID]
	if r.Status != schema.StatusSubmitted || r.Turns != 1 {
		t.Fatalf("%s: %s %q, %d turns", s.ID, r.Status, r.Reason, r.Turns)
	}
	if n := wrong.calls.Load(); n != 0 {
		t.Fatalf("the mismatched gen-worker called its server %d times, want none", n)
	}
}
