package genworker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/devstack"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/sim"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/llm"
	"github.com/actloop/actloop/pkg/priority"
	"github.com/actloop/actloop/pkg/schema"
)

// seen is a request the simulator received: its rid and input ids.
type seen struct {
	RID      string  `json:"rid"`
	InputIDs []int32 `json:"input_ids"`
}

// recorder serves a simulator and records every /generate it receives.
type recorder struct {
	srv *sim.Server
	mu  sync.Mutex
	got []seen
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path == "/generate" {
		b, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var s seen
		if json.Unmarshal(b, &s) == nil {
			r.mu.Lock()
			r.got = append(r.got, s)
			r.mu.Unlock()
		}
		req.Body = io.NopCloser(bytes.NewReader(b))
	}
	r.srv.ServeHTTP(w, req)
}

func (r *recorder) requests() []seen {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// decoding reports whether a generation with at least n tokens runs.
func (r *recorder) decoding(n int) bool {
	for _, info := range r.srv.Requests() {
		if info.Generated >= n {
			return true
		}
	}
	return false
}

// recordedStack starts the infrastructure of one replica of one slot
// (services are started by the test) with common's settings, a pull wait of
// 100ms, and a simulator at timeScale behind a recorder, served at ts.
func recordedStack(t *testing.T, common service.Common, timeScale float64) (context.Context, *devstack.Stack, *service.Deps, *recorder, *httptest.Server) {
	t.Helper()
	common.PullWait, common.ShutdownTimeout = 100*time.Millisecond, 5*time.Second
	ctx, cancel := context.WithCancel(context.Background())
	stack, err := devstack.StartInfra(ctx, devstack.Options{Dir: testkit.SearchableTempDir(t), RedisKind: testkit.PreferredRedis(t),
		Replicas: 1, Slots: 1, EnvSlots: 2, Common: common, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := stack.Wait(); err != nil {
			t.Errorf("services: %v", err)
		}
		stack.Close()
	})
	rec := &recorder{srv: sim.New(sim.Config{TimeScale: timeScale, Tokenizer: stack.Template.Tokenizer()})}
	ts := httptest.NewServer(rec)
	t.Cleanup(ts.Close)
	d, err := stack.Deps(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return ctx, stack, d, rec, ts
}

// ridSample is a scripted task of len(turns)+1 turns: each of turns, then
// the submission; each reply is long enough to catch it generating.
func ridSample(id string, turns int) schema.Sample {
	var script []string
	for i := range turns {
		script = append(script, "THOUGHT: "+strings.Repeat("let me look at this part of the code. ", 25)+
			"\n\n```bash\necho step "+string(rune('a'+i))+"\n```")
	}
	script = append(script, "THOUGHT: done.\n\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```")
	s := schema.Sample{V: schema.Version, ID: id, Task: "task " + id, Script: script,
		Env: schema.Env{Backend: schema.BackendSim, Eval: "exit 0"}, Sampling: schema.Sampling{MaxNewTokens: 4096}}
	s.Normalize()
	return s
}

// Every generation of a trajectory, across its turns, a preemption and a
// pause, reaches the server under one request id, the one its state keeps
// (from before its first generation is sent); distinct trajectories have
// distinct ids.
func TestOneRequestIDPerTrajectory(t *testing.T) {
	const wait = 2 * time.Minute
	ctx, stack, d, rec, ts := recordedStack(t, service.CommonDefaults(), 0.3)

	// "hi" is high priority, so it preempts "lo" (no snapshot of the
	// coordinator's own comes within the test).
	kv, err := d.JS.KeyValue(ctx, bus.BucketPriority)
	if err != nil {
		t.Fatal(err)
	}
	snap := &priority.Snapshot{Replica: "r0", Version: math.MaxInt64, High: map[string]bool{"hi": true}}
	b, err := snap.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "r0", b); err != nil {
		t.Fatal(err)
	}
	ccfg := stack.CoordinatorConfig()
	ccfg.PredictTimeout, ccfg.SnapshotInterval, ccfg.KVBudget = 0, time.Hour, 0
	coord, err := stack.StartCoordinator(ctx, ccfg)
	if err != nil {
		t.Fatal(err)
	}
	gcfg := stack.GenWorkerConfig("r0")
	gcfg.LLMURL, gcfg.KVBudget = ts.URL, 0 // one generation at a time
	gcfg.Preempt = true
	if _, err := stack.StartGenWorkerWith(ctx, gcfg, nil); err != nil {
		t.Fatal(err)
	}
	ecfg := stack.EnvWorkerConfig("env-0")
	ecfg.SimEnvTimeScale = 0
	if _, err := stack.StartEnvWorker(ctx, ecfg); err != nil {
		t.Fatal(err)
	}
	submit := func(s schema.Sample) {
		if err := d.Pub.Publish(ctx, schema.SubjectSamples, s.ID, s); err != nil {
			t.Fatal(err)
		}
	}

	submit(ridSample("lo", 3))
	testkit.Eventually(t, wait, "lo generating", func() bool { return rec.decoding(5) })
	// Its first generation's rid is in its state while the generation
	// runs: a retry after this worker died would abort it by name.
	if tr, err := d.Store.Load(ctx, "lo", 0); err != nil {
		t.Fatal(err)
	} else if reqs := rec.requests(); len(reqs) != 1 || tr.RID != reqs[0].RID {
		t.Fatalf("during lo's first generation: state's rid %q, requests %+v", tr.RID, reqs)
	}
	submit(ridSample("hi", 2))
	testkit.Eventually(t, wait, "a preemption", func() bool { return stack.GenWorker("r0").Stats().Preemptions >= 1 })
	testkit.Eventually(t, wait, "a generation after the preemption", func() bool { return rec.decoding(3) })
	// A pause while generations run (the one running may end before the
	// abort reaches it: the rid check below holds either way).
	if reply, err := coord.Pause(ctx, schema.PauseRequest{Mode: schema.PauseAbort}); err != nil {
		t.Fatalf("pause: %+v, %v", reply, err)
	}
	v := int64(1)
	if _, err := coord.Resume(ctx, schema.ResumeRequest{WeightVersion: &v}); err != nil {
		t.Fatal(err)
	}

	states := map[string]*traj.Trajectory{}
	finished := func(ids ...string) func() bool {
		return func() bool {
			for _, id := range ids {
				tr, err := d.Store.Load(ctx, id, traj.WithTokenIDs)
				if err != nil || !tr.Status.Terminal() {
					return false
				}
				states[id] = tr
			}
			return true
		}
	}
	testkit.Eventually(t, wait, "lo and hi to finish", finished("lo", "hi"))
	// One whose turns nothing interrupts: its id, too, serves them all.
	submit(ridSample("plain", 2))
	testkit.Eventually(t, wait, "plain to finish", finished("plain"))
	reqs := rec.requests()
	rids := map[string][]string{} // by trajectory
	for _, r := range reqs {
		owner := ""
		for id, tr := range states {
			if len(r.InputIDs) >= tr.PromptLen && slices.Equal(r.InputIDs[:tr.PromptLen], tr.Tokens[:tr.PromptLen]) {
				owner = id
			}
		}
		if owner == "" {
			t.Fatalf("a request of no trajectory: rid %s, %d input ids", r.RID, len(r.InputIDs))
		}
		if !slices.Contains(rids[owner], r.RID) {
			rids[owner] = append(rids[owner], r.RID)
		}
	}
	calls := 0
	for id, tr := range states {
		if tr.Status != traj.StatusTerminated || tr.Reason != traj.ReasonSubmitted {
			t.Fatalf("%s: %s %q", id, tr.Status, tr.Reason)
		}
		if got := rids[id]; len(got) != 1 || got[0] != tr.RID || !llm.ValidRID(tr.RID) {
			t.Fatalf("%s: request ids %v, state's %q: want that one, 32 hex digits, for every generation", id, got, tr.RID)
		}
		calls += tr.Calls
	}
	if lo, hi, plain := states["lo"].RID, states["hi"].RID, states["plain"].RID; lo == hi || lo == plain || hi == plain {
		t.Fatalf("trajectories share request ids: lo %s, hi %s, plain %s", lo, hi, plain)
	}
	// The preempted generation was resumed: more requests than turns, all
	// under their trajectory's id. (The paused one may have ended on its
	// own before the abort reached it, so it need not add one.)
	if len(reqs) < calls+1 || states["lo"].Preempts < 1 || states["plain"].Preempts != 0 || states["plain"].Calls < 3 {
		t.Fatalf("%d requests for %d turns, lo preempted %d times, plain %d in %d turns: want a preemption resumed, "+
			"and plain's turns uninterrupted", len(reqs), calls, states["lo"].Preempts, states["plain"].Preempts, states["plain"].Calls)
	}
}
