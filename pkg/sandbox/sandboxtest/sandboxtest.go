package sandboxtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/actloop/actloop/pkg/sandbox"
)

// Submission is the command an agent runs to hand in its work.
const Submission = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"

// execTimeout is generous: the suite must pass on a loaded machine.
const execTimeout = time.Minute

// Run runs the conformance suite. newBackend returns a fresh backend for
// each subtest; it should register its own cleanup with t.Cleanup.
func Run(t *testing.T, newBackend func(t *testing.T) sandbox.Backend) {
	tests := []struct {
		name string
		fn   func(*testing.T, sandbox.Backend)
	}{
		{"EchoHello", testEchoHello},
		{"Submission", testSubmission},
		{"ExitCode", testExitCode},
		{"Timeout", testTimeout},
		{"CancelledContext", testCancelledContext},
		{"AttachHandle", testAttachHandle},
		{"AttachUnknown", testAttachUnknown},
		{"CloseIdempotent", testCloseIdempotent},
		{"InvalidID", testInvalidID},
		{"DuplicateID", testDuplicateID},
		{"SetupRuns", testSetupRuns},
		{"SetupFailure", testSetupFailure},
		{"ConcurrentSandboxes", testConcurrentSandboxes},
		{"ConcurrentExecOneSandbox", testConcurrentExecOneSandbox},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fn(t, newBackend(t))
		})
	}
}

// Start starts a sandbox and closes it when the test ends.
func Start(t testing.TB, b sandbox.Backend, id string, spec sandbox.Spec) sandbox.Sandbox {
	t.Helper()
	sb, err := b.Start(context.Background(), id, spec)
	if err != nil {
		t.Fatalf("Start(%q): %v", id, err)
	}
	t.Cleanup(func() {
		if err := sb.Close(context.Background()); err != nil {
			t.Errorf("Close(%q): %v", id, err)
		}
	})
	return sb
}

// Exec runs cmd with a generous timeout and fails the test on error.
func Exec(t testing.TB, sb sandbox.Sandbox, cmd string) sandbox.ExecResult {
	t.Helper()
	res, err := sb.Exec(context.Background(), cmd, execTimeout)
	if err != nil {
		t.Fatalf("Exec(%q): %v", cmd, err)
	}
	return res
}

// WantOutput runs cmd and checks its output and a zero return code.
func WantOutput(t testing.TB, sb sandbox.Sandbox, cmd, want string) {
	t.Helper()
	res := Exec(t, sb, cmd)
	if res.Output != want || res.ReturnCode != 0 || res.TimedOut {
		t.Fatalf("Exec(%q) = %+v, want output %q, return code 0", cmd, res, want)
	}
}

func testEchoHello(t *testing.T, b sandbox.Backend) {
	sb := Start(t, b, "echo-hello", sandbox.Spec{})
	WantOutput(t, sb, "echo hello", "hello\n")
}

func testSubmission(t *testing.T, b sandbox.Backend) {
	sb := Start(t, b, "submission", sandbox.Spec{})
	WantOutput(t, sb, "echo "+Submission, Submission+"\n")
	WantOutput(t, sb, "echo '"+Submission+"'", Submission+"\n")
	WantOutput(t, sb, `echo "`+Submission+`"`, Submission+"\n")
}

func testExitCode(t *testing.T, b sandbox.Backend) {
	sb := Start(t, b, "exit-code", sandbox.Spec{})
	for _, code := range []int{0, 1, 3, 255} {
		res := Exec(t, sb, fmt.Sprintf("exit %d", code))
		if res.ReturnCode != code || res.TimedOut {
			t.Errorf("exit %d: got %+v", code, res)
		}
	}
}

func testTimeout(t *testing.T, b sandbox.Backend) {
	sb := Start(t, b, "timeout", sandbox.Spec{})
	res, err := sb.Exec(context.Background(), "sleep 5", 200*time.Millisecond)
	if err != nil {
		t.Fatalf("Exec(sleep 5) with a timeout: error %v, want none", err)
	}
	if !res.TimedOut || res.ReturnCode != -1 {
		t.Fatalf("Exec(sleep 5) = %+v, want TimedOut and return code -1", res)
	}
	// The sandbox still works afterwards.
	WantOutput(t, sb, "echo after", "after\n")
}

func testCancelledContext(t *testing.T, b sandbox.Backend) {
	sb := Start(t, b, "cancelled", sandbox.Spec{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := sb.Exec(ctx, "echo hi", execTimeout); !errors.Is(err, context.Canceled) {
		t.Fatalf("Exec with a cancelled ctx: error %v, want context.Canceled", err)
	}
	if _, err := b.Start(ctx, "cancelled-start", sandbox.Spec{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Start with a cancelled ctx: error %v, want context.Canceled", err)
	}
}

func testAttachHandle(t *testing.T, b sandbox.Backend) {
	ctx := context.Background()
	sb := Start(t, b, "attach", sandbox.Spec{})
	got, err := b.Attach(ctx, sb.Handle())
	if err != nil {
		t.Fatalf("Attach(%q): %v", sb.Handle(), err)
	}
	if got.Handle() != sb.Handle() {
		t.Fatalf("Attach(%q).Handle() = %q", sb.Handle(), got.Handle())
	}
	WantOutput(t, got, "echo attached", "attached\n")
}

func testAttachUnknown(t *testing.T, b sandbox.Backend) {
	ctx := context.Background()
	sb := Start(t, b, "attach-unknown", sandbox.Spec{})
	// A handle of the same shape for an id that was never started, if the
	// backend's handles end with the id.
	if prefix, ok := strings.CutSuffix(sb.Handle(), "attach-unknown"); ok {
		unknown := prefix + "never-started"
		if _, err := b.Attach(ctx, unknown); !errors.Is(err, sandbox.ErrNotFound) {
			t.Fatalf("Attach(%q): error %v, want ErrNotFound", unknown, err)
		}
	}
	for _, h := range []string{"", "garbage", "nope:attach-unknown"} {
		if _, err := b.Attach(ctx, h); err == nil {
			t.Errorf("Attach(%q): no error", h)
		}
	}
}

func testCloseIdempotent(t *testing.T, b sandbox.Backend) {
	ctx := context.Background()
	sb, err := b.Start(ctx, "close", sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	handle := sb.Handle()
	for i := range 2 {
		if err := sb.Close(ctx); err != nil {
			t.Fatalf("Close #%d: %v", i+1, err)
		}
	}
	if _, err := b.Attach(ctx, handle); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("Attach after Close: error %v, want ErrNotFound", err)
	}
	if _, err := sb.Exec(ctx, "echo hi", execTimeout); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("Exec after Close: error %v, want ErrNotFound", err)
	}
	if _, err := sb.Diff(ctx); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("Diff after Close: error %v, want ErrNotFound", err)
	}
	// The id is free again.
	again := Start(t, b, "close", sandbox.Spec{})
	WantOutput(t, again, "echo again", "again\n")
}

func testInvalidID(t *testing.T, b sandbox.Backend) {
	ctx := context.Background()
	for _, id := range []string{"", ".", "..", "a/b", "../x", "a b", "a:b", "ü", "a\x00", "a\n", strings.Repeat("a", 129)} {
		sb, err := b.Start(ctx, id, sandbox.Spec{})
		if !errors.Is(err, sandbox.ErrInvalidID) {
			t.Errorf("Start(%q): error %v, want ErrInvalidID", id, err)
		}
		if sb != nil {
			_ = sb.Close(ctx)
		}
	}
	for _, id := range []string{"a", "traj-1.eval_2", "..a", strings.Repeat("Z", 128)} {
		sb := Start(t, b, id, sandbox.Spec{})
		WantOutput(t, sb, "echo ok", "ok\n")
	}
}

func testDuplicateID(t *testing.T, b sandbox.Backend) {
	Start(t, b, "dup", sandbox.Spec{})
	sb, err := b.Start(context.Background(), "dup", sandbox.Spec{})
	if !errors.Is(err, sandbox.ErrExists) {
		t.Errorf("second Start(dup): error %v, want ErrExists", err)
	}
	if sb != nil {
		_ = sb.Close(context.Background())
	}
}

func testSetupRuns(t *testing.T, b sandbox.Backend) {
	sb := Start(t, b, "setup-ok", sandbox.Spec{Setup: []string{"echo one", "exit 0"}})
	WantOutput(t, sb, "echo ready", "ready\n")
}

func testSetupFailure(t *testing.T, b sandbox.Backend) {
	ctx := context.Background()
	tests := []struct {
		name        string
		spec        sandbox.Spec
		wantIndex   int
		wantTimeout bool
	}{
		{"exit", sandbox.Spec{Setup: []string{"echo one", "exit 7", "echo never"}}, 1, false},
		{"timeout", sandbox.Spec{Setup: []string{"sleep 5"}, SetupTimeout: 200 * time.Millisecond}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := "setup-" + tt.name
			sb, err := b.Start(ctx, id, tt.spec)
			if sb != nil {
				_ = sb.Close(ctx)
				t.Fatal("Start succeeded")
			}
			var se *sandbox.SetupError
			if !errors.As(err, &se) {
				t.Fatalf("Start: error %v, want a *SetupError", err)
			}
			if se.Index != tt.wantIndex || se.Command != tt.spec.Setup[tt.wantIndex] || se.Result.TimedOut != tt.wantTimeout {
				t.Fatalf("SetupError = %+v, want index %d, timed out %v", se, tt.wantIndex, tt.wantTimeout)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("setup command %d", tt.wantIndex)) {
				t.Fatalf("error %q does not name the command index", err)
			}
			// Nothing is left behind: the id can be started again.
			again := Start(t, b, id, sandbox.Spec{})
			WantOutput(t, again, "echo fresh", "fresh\n")
		})
	}
}

func testConcurrentSandboxes(t *testing.T, b sandbox.Backend) {
	const n = 4
	ctx := context.Background()
	sbs := make([]sandbox.Sandbox, n)
	var g errgroup.Group
	for i := range n {
		g.Go(func() error {
			sb, err := b.Start(ctx, fmt.Sprintf("conc-%d", i), sandbox.Spec{})
			sbs[i] = sb
			return err
		})
	}
	err := g.Wait()
	for _, sb := range sbs {
		if sb != nil {
			t.Cleanup(func() { _ = sb.Close(ctx) })
		}
	}
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	for i, sb := range sbs {
		for j := range 3 {
			g.Go(func() error {
				want := fmt.Sprintf("sandbox-%d-cmd-%d", i, j)
				res, err := sb.Exec(ctx, "echo "+want, execTimeout)
				if err != nil {
					return err
				}
				if res.Output != want+"\n" || res.ReturnCode != 0 {
					return fmt.Errorf("echo %s: got %+v", want, res)
				}
				return nil
			})
		}
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

func testConcurrentExecOneSandbox(t *testing.T, b sandbox.Backend) {
	sb := Start(t, b, "conc-one", sandbox.Spec{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range cap(errs) {
		wg.Go(func() {
			want := fmt.Sprintf("cmd-%d", i)
			res, err := sb.Exec(context.Background(), "echo "+want, execTimeout)
			if err == nil && res.Output != want+"\n" {
				err = fmt.Errorf("echo %s: got %+v", want, res)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}
