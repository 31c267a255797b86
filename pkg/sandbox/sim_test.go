package sandbox_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/actloop/actloop/pkg/sandbox"
	"github.com/actloop/actloop/pkg/sandbox/sandboxtest"
)

func TestSimCommands(t *testing.T) {
	sb := sandboxtest.Start(t, sandbox.NewSim(sandbox.SimConfig{}), "cmds", sandbox.Spec{})
	tests := []struct {
		cmd     string
		timeout time.Duration
		want    sandbox.ExecResult
	}{
		{"echo hello", 0, sandbox.ExecResult{Output: "hello\n"}},
		{"  echo 'two words'  ", 0, sandbox.ExecResult{Output: "two words\n"}},
		{`echo "'nested'"`, 0, sandbox.ExecResult{Output: "'nested'\n"}},
		{`echo 'unbalanced`, 0, sandbox.ExecResult{Output: "'unbalanced\n"}},
		{"echo", 0, sandbox.ExecResult{Output: "\n"}},
		{"sleep 2", 0, sandbox.ExecResult{Duration: 2 * time.Second}},
		{"sleep 0.5s", time.Second, sandbox.ExecResult{Duration: 500 * time.Millisecond}},
		{"sleep 5", time.Second, sandbox.ExecResult{ReturnCode: -1, TimedOut: true, Duration: time.Second}},
		{"sleep x", 0, sandbox.ExecResult{Output: "sleep: invalid time interval\n", ReturnCode: 1}},
		{"exit 3", 0, sandbox.ExecResult{ReturnCode: 3}},
		{"exit 256", 0, sandbox.ExecResult{}},
		{"exit", 0, sandbox.ExecResult{}},
		{"ls -la /testbed", 0, sandbox.ExecResult{Output: "ok: ls\n"}},
		{"", 0, sandbox.ExecResult{}},
	}
	for _, tt := range tests {
		got, err := sb.Exec(context.Background(), tt.cmd, tt.timeout)
		if err != nil || got != tt.want {
			t.Errorf("Exec(%q, %s) = %+v, %v; want %+v", tt.cmd, tt.timeout, got, err, tt.want)
		}
	}
	if d, err := sb.Diff(context.Background()); d != "" || err != nil {
		t.Errorf("Diff = %q, %v", d, err)
	}
}

func TestSimJitterDeterministic(t *testing.T) {
	durations := func(seed int64) []time.Duration {
		s := sandbox.NewSim(sandbox.SimConfig{ExecLatency: time.Second, Jitter: 0.5, Seed: seed})
		var ds []time.Duration
		for _, id := range []string{"a", "b"} {
			sb := sandboxtest.Start(t, s, id, sandbox.Spec{})
			for _, cmd := range []string{"ls", "cat x", "ls"} {
				ds = append(ds, sandboxtest.Exec(t, sb, cmd).Duration)
			}
		}
		return ds
	}
	first, again, other := durations(1), durations(1), durations(2)
	distinct := make(map[time.Duration]bool)
	for i := range first {
		if first[i] != again[i] {
			t.Fatalf("same seed, different durations: %v vs %v", first, again)
		}
		if first[i] < 500*time.Millisecond || first[i] > 1500*time.Millisecond {
			t.Fatalf("duration %s outside 1s ± 50%%", first[i])
		}
		distinct[first[i]] = true
	}
	// Same id and command, same latency; otherwise they spread.
	if first[0] != first[2] || len(distinct) < 3 {
		t.Fatalf("durations %v: want equal for a repeated command, spread otherwise", first)
	}
	if slices.Equal(first, other) {
		t.Fatalf("seeds 1 and 2 gave the same durations %v", first)
	}
}

func TestSimContextEndsWait(t *testing.T) {
	// Real waiting: a simulated hour is a real hour unless ctx ends it.
	s := sandbox.NewSim(sandbox.SimConfig{TimeScale: 1})
	sb := sandboxtest.Start(t, s, "wait", sandbox.Spec{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := sb.Exec(ctx, "sleep 3600", 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Exec: error %v, want context.DeadlineExceeded", err)
	}
	if _, err := s.Start(ctx, "late", sandbox.Spec{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Start: error %v, want context.DeadlineExceeded", err)
	}
}

func TestSimCloseInterruptsExec(t *testing.T) {
	s := sandbox.NewSim(sandbox.SimConfig{TimeScale: 1})
	sb := sandboxtest.Start(t, s, "interrupt", sandbox.Spec{})
	errc := make(chan error, 1)
	go func() {
		_, err := sb.Exec(context.Background(), "sleep 3600", 0)
		errc <- err
	}()
	// Whether Close lands before or during the Exec, the answer is the same.
	if err := sb.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("Exec: error %v, want ErrNotFound", err)
	}
}

func TestSimAttachIsPerInstance(t *testing.T) {
	sb := sandboxtest.Start(t, sandbox.NewSim(sandbox.SimConfig{}), "mine", sandbox.Spec{})
	if sb.Handle() != "sim:mine" {
		t.Fatalf("Handle() = %q", sb.Handle())
	}
	if _, err := sandbox.NewSim(sandbox.SimConfig{}).Attach(context.Background(), sb.Handle()); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("Attach in another Sim: error %v, want ErrNotFound", err)
	}
	if _, err := sandbox.NewSim(sandbox.SimConfig{}).Attach(context.Background(), "local:/x"); !errors.Is(err, sandbox.ErrInvalidHandle) {
		t.Fatalf("Attach of a local handle: error %v, want ErrInvalidHandle", err)
	}
}

// `seq A B > FILE` is the one command that changes a simulated sandbox: it
// prints nothing, and Diff shows each such file as new, in name order; a
// later write of a file replaces it. Other redirections change nothing.
func TestSimDiff(t *testing.T) {
	sb := sandboxtest.Start(t, sandbox.NewSim(sandbox.SimConfig{}), "diff", sandbox.Spec{})
	ctx := context.Background()
	for _, cmd := range []string{"seq 5 6 > b.txt", "seq 1 2 > a.txt", "seq 1 3 > a.txt", "seq 1 2 > ../x", "seq 2 1 > c.txt"} {
		if _, err := sb.Exec(ctx, cmd, 0); err != nil {
			t.Fatal(err)
		}
	}
	want := "diff --git a/a.txt b/a.txt\nnew file mode 100644\n--- /dev/null\n+++ b/a.txt\n@@ -0,0 +1,3 @@\n+1\n+2\n+3\n" +
		"diff --git a/b.txt b/b.txt\nnew file mode 100644\n--- /dev/null\n+++ b/b.txt\n@@ -0,0 +1,2 @@\n+5\n+6\n"
	if d, err := sb.Diff(ctx); d != want || err != nil {
		t.Fatalf("Diff = %q, %v; want %q", d, err, want)
	}
}
