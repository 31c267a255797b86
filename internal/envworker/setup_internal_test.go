package envworker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/agent"
	"github.com/actloop/actloop/internal/localredis"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/sandbox"
	"github.com/actloop/actloop/pkg/schema"
)

// newTestWorker is a Worker with the simulated backend (real time: `sleep
// N` takes N seconds) and the local one, unisolated, on an in-process
// Redis, without NATS: enough to run its start step.
func newTestWorker(t *testing.T, edit func(*Config)) *Worker {
	t.Helper()
	var cfg Config
	service.Defaults(&cfg)
	cfg.ID, cfg.SandboxRoot, cfg.AllowUnisolated, cfg.Isolation = "w1", filepath.Join(t.TempDir(), "sandboxes"), true, sandbox.IsolationNone
	if edit != nil {
		edit(&cfg)
	}
	local, err := sandbox.NewLocal(cfg.local())
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := cfg.Chat.Template()
	if err != nil {
		t.Fatal(err)
	}
	agents, err := agent.LoadAgents("")
	if err != nil {
		t.Fatal(err)
	}
	rdb, _ := testkit.StartRedis(t, localredis.KindInProcess)
	d := &service.Deps{Store: traj.New(rdb, time.Now), Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: time.Now}
	w := &Worker{cfg: cfg, d: d, tmpl: tmpl, agents: agents, m: newEnvMetrics(), boxes: map[string]sandbox.Sandbox{},
		rewards: newRewardCaller(),
		backends: map[string]sandbox.Backend{schema.BackendLocal: local,
			schema.BackendSim: sandbox.NewSim(sandbox.SimConfig{TimeScale: 1})}}
	t.Cleanup(w.rewards.hc.CloseIdleConnections)
	t.Cleanup(func() { // a sandbox on a tmpfs must be unmounted before its dir goes
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, sb := range w.boxes {
			_ = sb.Close(context.Background())
		}
	})
	return w
}

// admit stores a new trajectory of s, as the coordinator does, and loads it.
func admit(t *testing.T, w *Worker, s schema.Sample) *traj.Trajectory {
	t.Helper()
	s.V, s.Task = schema.Version, "do it"
	s.Normalize()
	ctx := context.Background()
	if err := w.d.Store.Create(ctx, traj.Admission{Sample: s, Replica: "r0"}); err != nil {
		t.Fatal(err)
	}
	tr, err := w.d.Store.Load(ctx, s.ID, traj.WithAll)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// startAsync runs w's start step of tr in the background.
func startAsync(w *Worker, tr *traj.Trajectory) <-chan startOutcome {
	done := make(chan startOutcome, 1)
	go func() {
		next, err := w.startStep(context.Background(), tr)
		done <- startOutcome{next, err}
	}()
	return done
}

type startOutcome struct {
	next traj.Transition
	err  error
}

// await waits for a start step's outcome; within is a generous bound, far
// below what the setup would take unstopped.
func await(t *testing.T, done <-chan startOutcome, within time.Duration) startOutcome {
	t.Helper()
	var got startOutcome
	testkit.Eventually(t, within, "the start step to return", func() bool {
		select {
		case got = <-done:
			return true
		default:
			return false
		}
	})
	return got
}

func sleeps(n int, cmd string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = cmd
	}
	return out
}

// limits.wall_clock_ms covers setup: 8 setup commands of 20 s under a wall
// clock of 1 s end the trajectory limit_exceeded, the limit wall_clock, as
// the wall clock running out between turns ends it, instead of running
// 160 s of setup; its result says so (issue 31, item 7).
func TestSetupWithinWallClock(t *testing.T) {
	w := newTestWorker(t, nil)
	tr := admit(t, w, schema.Sample{ID: "wall", Env: schema.Env{Backend: schema.BackendSim, Setup: sleeps(8, "sleep 20")},
		Limits: schema.Limits{WallClockMS: 1000}})
	got := await(t, startAsync(w, tr), 30*time.Second)
	l, ok := got.next.(traj.LimitReached)
	if got.err != nil || !ok || l.Limit != schema.LimitWallClock ||
		!strings.Contains(l.Reason, "limits exceeded: wall_clock 1s reached during setup") {
		t.Fatalf("start step = %#v, %v; want the wall clock reached", got.next, got.err)
	}
	ctx := context.Background()
	if err := w.d.Store.Commit(ctx, tr, l); err != nil {
		t.Fatal(err)
	}
	end, err := w.d.Store.Load(ctx, tr.ID, traj.WithAll)
	if err != nil {
		t.Fatal(err)
	}
	r := traj.Result(end, schema.Control{})
	if end.Status != traj.StatusTerminated || r.Status != schema.StatusLimitExceeded || r.Limit != schema.LimitWallClock ||
		r.Reason != l.Reason {
		t.Fatalf("after the commit: %s, result %s (limit %q): %q; want terminated, limit_exceeded naming wall_clock",
			end.Status, r.Status, r.Limit, r.Reason)
	}
	if err := r.Validate(); err != nil {
		t.Fatalf("result: %v", err)
	}
}

// ACTLOOP_SETUP_TOTAL_TIMEOUT bounds all setup commands together.
func TestSetupTotalTimeout(t *testing.T) {
	w := newTestWorker(t, func(c *Config) { c.SetupTotalTimeout = time.Second })
	tr := admit(t, w, schema.Sample{ID: "total", Env: schema.Env{Backend: schema.BackendSim, Setup: sleeps(8, "sleep 20")}})
	got := await(t, startAsync(w, tr), 30*time.Second)
	f, ok := got.next.(traj.Failed)
	if got.err != nil || !ok || !strings.Contains(f.Reason, "ACTLOOP_SETUP_TOTAL_TIMEOUT") {
		t.Fatalf("start step = %#v, %v; want failed, naming ACTLOOP_SETUP_TOTAL_TIMEOUT", got.next, got.err)
	}
}

// ACTLOOP_SETUP_MAX_COMMANDS bounds how many setup commands a sample
// lists: more end it failed before any runs.
func TestSetupMaxCommands(t *testing.T) {
	w := newTestWorker(t, func(c *Config) { c.SetupMaxCommands = 3 })
	tr := admit(t, w, schema.Sample{ID: "many", Env: schema.Env{Backend: schema.BackendSim, Setup: sleeps(4, "true")}})
	got := await(t, startAsync(w, tr), 30*time.Second)
	f, ok := got.next.(traj.Failed)
	if got.err != nil || !ok || !strings.Contains(f.Reason, "ACTLOOP_SETUP_MAX_COMMANDS allows 3") {
		t.Fatalf("start step = %#v, %v; want failed, naming ACTLOOP_SETUP_MAX_COMMANDS", got.next, got.err)
	}
	// The setting may lower schema.MaxSetupCommands, which every sample
	// is checked against at submit, never raise it.
	var cfg Config
	service.Defaults(&cfg)
	if cfg.SetupMaxCommands != schema.MaxSetupCommands {
		t.Errorf("ACTLOOP_SETUP_MAX_COMMANDS defaults to %d, want schema.MaxSetupCommands (%d)", cfg.SetupMaxCommands,
			schema.MaxSetupCommands)
	}
	cfg.NATSURL, cfg.SandboxRoot, cfg.SetupMaxCommands = "nats://127.0.0.1:4222", t.TempDir(), schema.MaxSetupCommands+1
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "ACTLOOP_SETUP_MAX_COMMANDS: must be in [1, 256]") {
		t.Errorf("Validate with ACTLOOP_SETUP_MAX_COMMANDS past schema.MaxSetupCommands: %v", err)
	}
	tr = admit(t, w, schema.Sample{ID: "few", Env: schema.Env{Backend: schema.BackendSim, Setup: sleeps(3, "true")}})
	if got := await(t, startAsync(w, tr), 30*time.Second); got.err != nil {
		t.Fatalf("start step with 3 setup commands: %v", got.err)
	} else if _, ok := got.next.(traj.Started); !ok {
		t.Fatalf("start step with 3 setup commands = %#v, want started", got.next)
	}
}

// A trajectory aborted while its setup runs stops the setup: the start
// step gives up (nothing to commit) and leaves no sandbox.
func TestSetupStopsOnAbort(t *testing.T) {
	w := newTestWorker(t, nil)
	tr := admit(t, w, schema.Sample{ID: "abort", Env: schema.Env{Backend: schema.BackendLocal, Setup: []string{"touch started; sleep 120"}}})
	done := startAsync(w, tr)
	dir := filepath.Join(w.cfg.SandboxRoot, "abort")
	testkit.Eventually(t, 30*time.Second, "the setup to start", func() bool {
		_, err := os.Stat(filepath.Join(dir, "started"))
		return err == nil
	})
	ctx := context.Background()
	cur, err := w.d.Store.Load(ctx, tr.ID, traj.WithAll)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.d.Store.Commit(ctx, cur, traj.Aborted{End: schema.StatusAborted, Reason: "aborted by the trainer"}); err != nil {
		t.Fatal(err)
	}
	got := await(t, done, 30*time.Second)
	if !errors.Is(got.err, traj.ErrSkip) {
		t.Fatalf("start step of an aborted trajectory = %#v, %v; want traj.ErrSkip", got.next, got.err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("sandbox dir after the abort: %v, want it gone", err)
	}
}

// No workspace may overlap ACTLOOP_SANDBOX_ROOT (another trajectory's
// sandbox, or a directory holding them all, like actloop dev's state dir),
// and no workspace root may lie inside it.
func TestWorkspaceOverlappingSandboxRoot(t *testing.T) {
	base := t.TempDir()
	w := newTestWorker(t, func(c *Config) {
		c.SandboxRoot = filepath.Join(base, "sandboxes")
		c.WorkspaceRoots = []string{base}
	})
	other := admit(t, w, schema.Sample{ID: "other", Env: schema.Env{Backend: schema.BackendLocal, Setup: []string{"echo secret > s"}}})
	if got := await(t, startAsync(w, other), 30*time.Second); got.err != nil {
		t.Fatal(got.err)
	}
	ws := filepath.Join(base, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ id, workspace string }{
		{"sandbox", filepath.Join(w.cfg.SandboxRoot, "other")},
		{"its-tmp", filepath.Join(w.cfg.SandboxRoot, "+tmp", "other")},
		{"state", base},
	} {
		tr := admit(t, w, schema.Sample{ID: tt.id, Env: schema.Env{Backend: schema.BackendLocal, Workspace: tt.workspace}})
		got := await(t, startAsync(w, tr), 30*time.Second)
		f, ok := got.next.(traj.Failed)
		if got.err != nil || !ok || !strings.Contains(f.Reason, "ACTLOOP_SANDBOX_ROOT") {
			t.Errorf("workspace %s: start step = %#v, %v; want failed, naming ACTLOOP_SANDBOX_ROOT", tt.workspace, got.next, got.err)
		}
	}
	tr := admit(t, w, schema.Sample{ID: "fine", Env: schema.Env{Backend: schema.BackendLocal, Workspace: ws}})
	if got := await(t, startAsync(w, tr), 30*time.Second); got.err != nil {
		t.Fatal(got.err)
	} else if _, ok := got.next.(traj.Started); !ok {
		t.Fatalf("workspace beside the sandbox root: %#v, want started", got.next)
	}

	var cfg Config
	service.Defaults(&cfg)
	cfg.NATSURL, cfg.SandboxRoot, cfg.WorkspaceRoots = "nats://127.0.0.1:4222", filepath.Join(base, "sandboxes"),
		[]string{filepath.Join(base, "sandboxes", "x")}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "ACTLOOP_WORKSPACE_ROOTS") ||
		!strings.Contains(err.Error(), "ACTLOOP_SANDBOX_ROOT") {
		t.Fatalf("Validate with a workspace root inside the sandbox root: %v, want an error naming both settings", err)
	}
}

func TestMain(m *testing.M) { testkit.VerifyNoLeaks(m) }
