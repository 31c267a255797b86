package sandboxtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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

// Options describe the backend under test.
type Options struct {
	// OutputLimit is the backend's output limit in bytes (> 0).
	OutputLimit int
	// Shell says the backend runs real bash with files and git, so Diff
	// and Spec.Patch are checked on a real git workspace (made with the
	// host's git, which must then be on PATH).
	Shell bool
	// Kill, if set, kills the sandbox's processes from outside (a
	// container's main process, say) for the CloseAfterDeath test; without
	// it the test runs a command that kills its own shell.
	Kill func(t testing.TB, sb sandbox.Sandbox)
}

// Run runs the conformance suite. newBackend returns a fresh backend for
// each subtest; it should register its own cleanup with t.Cleanup.
func Run(t *testing.T, newBackend func(t *testing.T) sandbox.Backend, opts Options) {
	if opts.OutputLimit <= 0 {
		t.Fatalf("sandboxtest.Options.OutputLimit = %d, want > 0", opts.OutputLimit)
	}
	tests := []struct {
		name string
		fn   func(*testing.T, sandbox.Backend, Options)
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
		{"OutputCap", testOutputCap},
		{"DiffEmpty", testDiffEmpty},
		{"DiffAndPatch", testDiffAndPatch},
		{"DiffCap", testDiffCap},
		{"CloseAfterDeath", testCloseAfterDeath},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fn(t, newBackend(t), opts)
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

func testEchoHello(t *testing.T, b sandbox.Backend, _ Options) {
	sb := Start(t, b, "echo-hello", sandbox.Spec{})
	WantOutput(t, sb, "echo hello", "hello\n")
}

func testSubmission(t *testing.T, b sandbox.Backend, _ Options) {
	sb := Start(t, b, "submission", sandbox.Spec{})
	WantOutput(t, sb, "echo "+Submission, Submission+"\n")
	WantOutput(t, sb, "echo '"+Submission+"'", Submission+"\n")
	WantOutput(t, sb, `echo "`+Submission+`"`, Submission+"\n")
}

func testExitCode(t *testing.T, b sandbox.Backend, _ Options) {
	sb := Start(t, b, "exit-code", sandbox.Spec{})
	for _, code := range []int{0, 1, 3, 255} {
		res := Exec(t, sb, fmt.Sprintf("exit %d", code))
		if res.ReturnCode != code || res.TimedOut {
			t.Errorf("exit %d: got %+v", code, res)
		}
	}
}

func testTimeout(t *testing.T, b sandbox.Backend, _ Options) {
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

func testCancelledContext(t *testing.T, b sandbox.Backend, _ Options) {
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

func testAttachHandle(t *testing.T, b sandbox.Backend, _ Options) {
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

func testAttachUnknown(t *testing.T, b sandbox.Backend, _ Options) {
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

func testCloseIdempotent(t *testing.T, b sandbox.Backend, _ Options) {
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

func testInvalidID(t *testing.T, b sandbox.Backend, _ Options) {
	ctx := context.Background()
	for _, id := range []string{"", ".", "..", "..a", ".x", "-x", "_x", "a/b", "../x", "a b", "a:b", "ü", "a\x00", "a\n",
		strings.Repeat("a", sandbox.MaxIDBytes+1)} {
		sb, err := b.Start(ctx, id, sandbox.Spec{})
		if !errors.Is(err, sandbox.ErrInvalidID) {
			t.Errorf("Start(%q): error %v, want ErrInvalidID", id, err)
		}
		if sb != nil {
			_ = sb.Close(ctx)
		}
	}
	for _, id := range []string{"a", "traj-1.eval_2", "a..b", strings.Repeat("Z", 128) + "-eval-12",
		strings.Repeat("Z", sandbox.MaxIDBytes)} {
		sb := Start(t, b, id, sandbox.Spec{})
		WantOutput(t, sb, "echo ok", "ok\n")
	}
}

func testDuplicateID(t *testing.T, b sandbox.Backend, _ Options) {
	Start(t, b, "dup", sandbox.Spec{})
	sb, err := b.Start(context.Background(), "dup", sandbox.Spec{})
	if !errors.Is(err, sandbox.ErrExists) {
		t.Errorf("second Start(dup): error %v, want ErrExists", err)
	}
	if sb != nil {
		_ = sb.Close(context.Background())
	}
}

func testSetupRuns(t *testing.T, b sandbox.Backend, _ Options) {
	sb := Start(t, b, "setup-ok", sandbox.Spec{Setup: []string{"echo one", "exit 0"}})
	WantOutput(t, sb, "echo ready", "ready\n")
}

func testSetupFailure(t *testing.T, b sandbox.Backend, _ Options) {
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

func testConcurrentSandboxes(t *testing.T, b sandbox.Backend, _ Options) {
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

func testConcurrentExecOneSandbox(t *testing.T, b sandbox.Backend, _ Options) {
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

func testOutputCap(t *testing.T, b sandbox.Backend, opts Options) {
	sb := Start(t, b, "output-cap", sandbox.Spec{})
	// Well over the limit: each number takes at least 2 bytes.
	n := opts.OutputLimit
	res := Exec(t, sb, fmt.Sprintf("seq 1 %d", n))
	if !res.Truncated || res.ReturnCode != 0 {
		t.Fatalf("seq 1 %d: Truncated %v, return code %d; want truncated, 0", n, res.Truncated, res.ReturnCode)
	}
	if !strings.HasPrefix(res.Output, "1\n2\n3\n") {
		t.Errorf("capped output lost its head: %.40q", res.Output)
	}
	if want := fmt.Sprintf("\n%d\n%d\n", n-1, n); !strings.HasSuffix(res.Output, want) {
		t.Errorf("capped output lost its tail %q: ...%q", want, res.Output[max(0, len(res.Output)-40):])
	}
	if !strings.Contains(res.Output, " bytes elided ...]\n") {
		t.Errorf("capped output has no elision marker")
	}
	// The limit plus the marker line.
	if len(res.Output) > opts.OutputLimit+100 {
		t.Errorf("capped output is %d bytes, limit %d", len(res.Output), opts.OutputLimit)
	}
	small := Exec(t, sb, "seq 1 3")
	if small.Truncated || small.Output != "1\n2\n3\n" {
		t.Errorf("seq 1 3 = %+v, want all of it", small)
	}
}

func testDiffEmpty(t *testing.T, b sandbox.Backend, _ Options) {
	sb := Start(t, b, "diff-empty", sandbox.Spec{})
	if d, err := sb.Diff(context.Background()); d != "" || err != nil {
		t.Fatalf("Diff of a fresh empty sandbox = %q, %v; want \"\", nil", d, err)
	}
}

func testDiffAndPatch(t *testing.T, b sandbox.Backend, opts Options) {
	if !opts.Shell {
		t.Skip("backend runs no shell: no files to diff")
	}
	ctx := context.Background()
	repo := GitRepo(t)
	sb := Start(t, b, "diff", sandbox.Spec{Workspace: repo})
	WantOutput(t, sb, "cat a.txt", "original\n")
	if d, err := sb.Diff(ctx); d != "" || err != nil {
		t.Fatalf("Diff before any change = %q, %v", d, err)
	}
	WantOutput(t, sb, "echo changed > a.txt && echo new > new.txt && echo x > ignored.log", "")
	diff, err := sb.Diff(ctx)
	if err != nil {
		t.Fatalf("Diff: %v", err)
	}
	for _, want := range []string{"--- a/a.txt", "+changed", "+++ b/new.txt", "+new"} {
		if !strings.Contains(diff, want) {
			t.Errorf("diff lacks %q:\n%s", want, diff)
		}
	}
	if strings.Contains(diff, "ignored.log") {
		t.Errorf("diff holds an ignored file:\n%s", diff)
	}
	// The agent's own index is left alone.
	WantOutput(t, sb, "git status --porcelain", " M a.txt\n?? new.txt\n")

	eval := Start(t, b, "diff-eval", sandbox.Spec{Workspace: repo, Patch: diff})
	WantOutput(t, eval, "cat a.txt new.txt", "changed\nnew\n")
	again, err := eval.Diff(ctx)
	if err != nil || again != diff {
		t.Fatalf("Diff after applying the diff = %q, %v; want the same diff %q", again, err, diff)
	}
	if _, err := b.Start(ctx, "diff-bad-patch", sandbox.Spec{Workspace: repo, Patch: "not a patch\n"}); !errors.Is(err, sandbox.ErrPatch) {
		t.Fatalf("Start with a broken patch: error %v, want ErrPatch", err)
	}
}

// testDiffCap checks the cap every backend puts on a diff it hands over
// (sandbox.DiffCapped; a CappedDiffer also reads no further, which the
// backends' own tests measure).
func testDiffCap(t *testing.T, b sandbox.Backend, opts Options) {
	ctx := context.Background()
	if !opts.Shell {
		sb := Start(t, b, "diff-cap", sandbox.Spec{})
		if d, over, err := sandbox.DiffCapped(ctx, sb, 10); d != "" || over || err != nil {
			t.Fatalf("DiffCapped of a fresh sandbox = %q, %v, %v; want \"\", false, nil", d, over, err)
		}
		return
	}
	sb := Start(t, b, "diff-cap", sandbox.Spec{Workspace: GitRepo(t)})
	WantOutput(t, sb, "seq 1 20000 > big.txt", "")
	full, err := sb.Diff(ctx)
	if err != nil || len(full) < 100000 {
		t.Fatalf("Diff = %d bytes, %v; want over 100000", len(full), err)
	}
	for _, max := range []int{1, 1000, len(full) - 1} {
		d, over, err := sandbox.DiffCapped(ctx, sb, max)
		if err != nil || !over || d != full[:max] {
			t.Fatalf("DiffCapped(%d) = %d bytes, over %v, %v; want the diff's first %d bytes, over", max, len(d), over, err, max)
		}
	}
	for _, max := range []int{len(full), len(full) + 1, 1 << 30} {
		d, over, err := sandbox.DiffCapped(ctx, sb, max)
		if err != nil || over || d != full {
			t.Fatalf("DiffCapped(%d) of a %d-byte diff = %d bytes, over %v, %v; want all of it", max, len(full), len(d), over, err)
		}
	}
}

func testCloseAfterDeath(t *testing.T, b sandbox.Backend, opts Options) {
	ctx := context.Background()
	sb, err := b.Start(ctx, "died", sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if opts.Kill != nil {
		opts.Kill(t, sb)
	} else if _, err := sb.Exec(ctx, "kill -9 $$", execTimeout); err != nil {
		t.Fatalf("Exec(kill -9 $$): %v", err)
	}
	for i := range 2 {
		if err := sb.Close(ctx); err != nil {
			t.Fatalf("Close #%d after the sandbox's process died: %v", i+1, err)
		}
	}
	if _, err := sb.Exec(ctx, "echo hi", execTimeout); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("Exec after Close: error %v, want ErrNotFound", err)
	}
	// The id is free again.
	again := Start(t, b, "died", sandbox.Spec{})
	WantOutput(t, again, "echo again", "again\n")
}

// GitRepo returns a git repository (made with the host's git) with one
// commit: a.txt ("original\n") and a .gitignore for *.log. It skips the
// test when git is missing.
func GitRepo(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skipf("git not on PATH: %v", err)
	}
	dir := t.TempDir()
	for _, f := range []struct{ name, content string }{{"a.txt", "original\n"}, {".gitignore", "*.log\n"}} {
		if err := os.WriteFile(filepath.Join(dir, f.name), []byte(f.content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"commit", "-q", "-m", "initial"}} {
		cmd := exec.Command("git", append([]string{"-c", "user.name=test", "-c", "user.email=test@example.com"}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL="+os.DevNull, "GIT_CONFIG_NOSYSTEM=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	// Readable by an unprivileged sandbox user too.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
