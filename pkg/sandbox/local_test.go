package sandbox_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/actloop/actloop/pkg/sandbox"
	"github.com/actloop/actloop/pkg/sandbox/sandboxtest"
)

// runGit runs git in dir, independent of the user's git config.
func runGit(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=test", "-c", "user.email=test@example.com"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL="+os.DevNull, "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func writeFile(t testing.TB, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

// gitRepo returns a git repository with one commit: a.txt, an executable
// script, a symlink, a file in a subdirectory and a .gitignore for *.log.
func gitRepo(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	runGit(t, dir, "init", "-q")
	writeFile(t, filepath.Join(dir, "a.txt"), "original\n", 0o644)
	writeFile(t, filepath.Join(dir, "run.sh"), "#!/bin/sh\necho ran\n", 0o755)
	writeFile(t, filepath.Join(dir, "sub", "b.txt"), "b\n", 0o644)
	writeFile(t, filepath.Join(dir, ".gitignore"), "*.log\n", 0o644)
	if err := os.Symlink("a.txt", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	runGit(t, dir, "add", "-A")
	runGit(t, dir, "commit", "-q", "-m", "initial")
	return dir
}

// dirOf returns the directory of a Local sandbox, from its documented handle.
func dirOf(t testing.TB, sb sandbox.Sandbox) string {
	t.Helper()
	dir, ok := strings.CutPrefix(sb.Handle(), "local:")
	if !ok {
		t.Fatalf("handle %q is not local:", sb.Handle())
	}
	return dir
}

func TestLocalWorkspaceCopy(t *testing.T) {
	repo := gitRepo(t)
	l := newLocal(t, sandbox.LocalConfig{})
	sb := sandboxtest.Start(t, l, "copy", sandbox.Spec{Workspace: repo})

	sandboxtest.WantOutput(t, sb, "cat a.txt sub/b.txt", "original\nb\n")
	sandboxtest.WantOutput(t, sb, "./run.sh", "ran\n")
	sandboxtest.WantOutput(t, sb, "readlink link", "a.txt\n")
	sandboxtest.WantOutput(t, sb, "git log --format=%s", "initial\n")
	sandboxtest.WantOutput(t, sb, "git status --porcelain", "")
	sandboxtest.WantOutput(t, sb, "pwd", dirOf(t, sb)+"\n")

	// The sandbox is a copy: the workspace does not change with it.
	sandboxtest.WantOutput(t, sb, "echo changed > a.txt && rm sub/b.txt", "")
	if b, err := os.ReadFile(filepath.Join(repo, "a.txt")); err != nil || string(b) != "original\n" {
		t.Fatalf("workspace a.txt = %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(repo, "sub", "b.txt")); err != nil {
		t.Fatalf("workspace sub/b.txt: %v", err)
	}
}

func TestLocalEmptyWorkspace(t *testing.T) {
	sb := sandboxtest.Start(t, newLocal(t, sandbox.LocalConfig{}), "empty", sandbox.Spec{})
	sandboxtest.WantOutput(t, sb, "ls -A", "")
	if d, err := sb.Diff(context.Background()); d != "" || err != nil {
		t.Fatalf("Diff of an empty sandbox = %q, %v", d, err)
	}
}

func TestLocalRootInsideWorkspace(t *testing.T) {
	repo := gitRepo(t)
	l := newLocal(t, sandbox.LocalConfig{Root: filepath.Join(repo, "sandboxes")})
	first := sandboxtest.Start(t, l, "first", sandbox.Spec{Workspace: repo})
	sandboxtest.WantOutput(t, first, "echo x > marker", "")
	second := sandboxtest.Start(t, l, "second", sandbox.Spec{Workspace: repo})
	sandboxtest.WantOutput(t, second, "test -e sandboxes || echo absent", "absent\n")
}

func TestLocalSetup(t *testing.T) {
	l := newLocal(t, sandbox.LocalConfig{})
	sb := sandboxtest.Start(t, l, "setup", sandbox.Spec{
		Setup: []string{"echo hi > setup.txt", "test -f setup.txt", `echo "$GREETING" >> setup.txt`},
		Env:   map[string]string{"GREETING": "hello"},
	})
	sandboxtest.WantOutput(t, sb, "cat setup.txt", "hi\nhello\n")
}

func TestLocalSetupFailure(t *testing.T) {
	root := t.TempDir()
	l := newLocal(t, sandbox.LocalConfig{Root: root})
	sb, err := l.Start(context.Background(), "broken", sandbox.Spec{
		Setup: []string{"true", "echo boom-marker; exit 7"},
	})
	if sb != nil {
		t.Fatal("Start succeeded")
	}
	var se *sandbox.SetupError
	if !errors.As(err, &se) || se.Index != 1 || se.Result.ReturnCode != 7 {
		t.Fatalf("Start: error %v, want a *SetupError for command 1 with code 7", err)
	}
	for _, want := range []string{"setup command 1", "boom-marker", "exit 7"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "broken")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("sandbox dir after a failed Start: %v, want it gone", err)
	}
}

// Setup is bounded as a whole, by its total timeout and by its deadline
// (a trajectory's wall clock), not only command by command; each stop
// says which bound it was, and leaves nothing behind.
func TestLocalSetupBounded(t *testing.T) {
	root := t.TempDir()
	l := newLocal(t, sandbox.LocalConfig{Root: root})
	sleeps := []string{"sleep 5", "sleep 5", "sleep 5", "sleep 5"}
	tests := []struct {
		name      string
		spec      sandbox.Spec
		index     int
		stopped   string
		inMessage string
	}{
		{"total", sandbox.Spec{Setup: sleeps, SetupTotalTimeout: time.Second}, 0, sandbox.SetupStoppedTotal, "total time ran out"},
		{"deadline", sandbox.Spec{Setup: sleeps, SetupDeadline: time.Now().Add(time.Second)}, 0, sandbox.SetupStoppedDeadline, "deadline passed"},
		{"deadline before the total", sandbox.Spec{Setup: sleeps, SetupTotalTimeout: time.Hour,
			SetupDeadline: time.Now().Add(time.Second)}, 0, sandbox.SetupStoppedDeadline, "deadline passed"},
		{"deadline passed already", sandbox.Spec{Setup: []string{"touch ran"}, SetupDeadline: time.Now().Add(-time.Second)},
			0, sandbox.SetupStoppedDeadline, "deadline passed"},
		{"the first commands fit", sandbox.Spec{Setup: []string{"true", "true", "sleep 5"}, SetupTotalTimeout: 2 * time.Second},
			2, sandbox.SetupStoppedTotal, "setup command 2 \"sleep 5\" (of 3, from 0)"},
		{"own timeout first", sandbox.Spec{Setup: sleeps, SetupTimeout: 500 * time.Millisecond, SetupTotalTimeout: time.Hour},
			0, "", "timed out"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb, err := l.Start(context.Background(), "bounded", tt.spec)
			var se *sandbox.SetupError
			if sb != nil || !errors.As(err, &se) || se.Index != tt.index || se.Stopped != tt.stopped {
				t.Fatalf("Start = %v, %v; want a *SetupError at command %d, stopped %q", sb, err, tt.index, tt.stopped)
			}
			if !strings.Contains(err.Error(), tt.inMessage) {
				t.Errorf("error %q does not say %q", err, tt.inMessage)
			}
			if _, err := os.Stat(filepath.Join(root, "bounded")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("sandbox dir after a stopped setup: %v, want it gone", err)
			}
		})
	}
}

// A Start whose ctx ends (its trajectory was aborted) stops its setup and
// leaves nothing behind.
func TestLocalSetupStopsWithCtx(t *testing.T) {
	root := t.TempDir()
	l := newLocal(t, sandbox.LocalConfig{Root: root})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := l.Start(ctx, "aborted", sandbox.Spec{Setup: []string{"touch started; sleep 60", "sleep 60"}})
		done <- err
	}()
	waitFor(t, "the setup to start", func() bool {
		_, err := os.Stat(filepath.Join(root, "aborted", "started"))
		return err == nil
	})
	cancel()
	var err error
	waitFor(t, "Start to return", func() bool {
		select {
		case err = <-done:
			return true
		default:
			return false
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Start after its ctx ended: %v, want context.Canceled", err)
	}
	if _, err := os.Stat(filepath.Join(root, "aborted")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("sandbox dir after a stopped setup: %v, want it gone", err)
	}
}

// Output that is not valid UTF-8 reads with U+FFFD in its place, and says
// so: Replaced is set and a line names it.
func TestLocalInvalidUTF8(t *testing.T) {
	sb := sandboxtest.Start(t, newLocal(t, sandbox.LocalConfig{}), "utf8", sandbox.Spec{})
	res := sandboxtest.Exec(t, sb, `printf 'a\377b\n'`)
	if want := "a\uFFFDb\n" + sandbox.ReplacedNote + "\n"; res.Output != want || !res.Replaced {
		t.Fatalf("invalid UTF-8: %+v, want output %q and Replaced", res, want)
	}
	res = sandboxtest.Exec(t, sb, `printf 'h\303\251\n'`)
	if res.Output != "hé\n" || res.Replaced {
		t.Fatalf("valid UTF-8: %+v, want it as is, not Replaced", res)
	}
}

func TestLocalPatch(t *testing.T) {
	ctx := context.Background()
	repo := gitRepo(t)
	l := newLocal(t, sandbox.LocalConfig{})
	agent := sandboxtest.Start(t, l, "traj-1", sandbox.Spec{Workspace: repo})
	sandboxtest.WantOutput(t, agent, strings.Join([]string{
		"echo changed > a.txt",
		"echo new > new.txt",
		"printf '\\000\\001\\377' > bin.dat",
		"rm sub/b.txt",
		"chmod -x run.sh",
	}, " && "), "")
	diff, err := agent.Diff(ctx)
	if err != nil {
		t.Fatalf("Diff: %v", err)
	}
	for _, want := range []string{"a/a.txt", "b/new.txt", "bin.dat", "GIT binary patch", "deleted file", "old mode 100755"} {
		if !strings.Contains(diff, want) {
			t.Errorf("diff lacks %q:\n%s", want, diff)
		}
	}

	eval := sandboxtest.Start(t, l, "traj-1-eval", sandbox.Spec{Workspace: repo, Patch: diff})
	sandboxtest.WantOutput(t, eval, "cat a.txt new.txt", "changed\nnew\n")
	sandboxtest.WantOutput(t, eval, "od -An -tx1 bin.dat", " 00 01 ff\n")
	sandboxtest.WantOutput(t, eval, "test -e sub/b.txt || echo gone", "gone\n")
	sandboxtest.WantOutput(t, eval, "test -x run.sh || echo not-executable", "not-executable\n")
	again, err := eval.Diff(ctx)
	if err != nil {
		t.Fatalf("Diff of the eval sandbox: %v", err)
	}
	if again != diff {
		t.Fatalf("eval sandbox diff differs from the applied patch:\n%s\n---\n%s", again, diff)
	}
}

func TestLocalPatchDoesNotApply(t *testing.T) {
	repo := gitRepo(t)
	l := newLocal(t, sandbox.LocalConfig{})
	conflicting := "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-something else\n+x\n"
	for name, patch := range map[string]string{"garbage": "not a patch\n", "conflict": conflicting} {
		t.Run(name, func(t *testing.T) {
			sb, err := l.Start(context.Background(), "bad-"+name, sandbox.Spec{Workspace: repo, Patch: patch})
			if sb != nil {
				t.Fatal("Start succeeded")
			}
			if !errors.Is(err, sandbox.ErrPatch) {
				t.Fatalf("Start: error %v, want ErrPatch", err)
			}
		})
	}
}

func TestLocalDiff(t *testing.T) {
	ctx := context.Background()
	repo := gitRepo(t)
	l := newLocal(t, sandbox.LocalConfig{})
	sb := sandboxtest.Start(t, l, "diff", sandbox.Spec{Workspace: repo})

	if d, err := sb.Diff(ctx); d != "" || err != nil {
		t.Fatalf("Diff with no changes = %q, %v", d, err)
	}
	sandboxtest.WantOutput(t, sb, "echo untracked > new.txt && echo noise > build.log", "")
	d, err := sb.Diff(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(d, "+++ b/new.txt") || strings.Contains(d, "build.log") {
		t.Fatalf("Diff: want new.txt and not the ignored build.log:\n%s", d)
	}
	// Diff stages into a scratch index: the agent's view is unchanged.
	sandboxtest.WantOutput(t, sb, "git status --porcelain", "?? new.txt\n")
	sandboxtest.WantOutput(t, sb, "ls .git | grep -c actloop || true", "0\n")
}

func TestLocalDiffUnbornHead(t *testing.T) {
	ws := t.TempDir()
	runGit(t, ws, "init", "-q")
	sb := sandboxtest.Start(t, newLocal(t, sandbox.LocalConfig{}), "unborn", sandbox.Spec{Workspace: ws})
	sandboxtest.WantOutput(t, sb, "echo first > first.txt", "")
	d, err := sb.Diff(context.Background())
	if err != nil || !strings.Contains(d, "+++ b/first.txt") {
		t.Fatalf("Diff = %q, %v; want first.txt", d, err)
	}
}

func TestLocalDiffNotGit(t *testing.T) {
	ws := t.TempDir()
	writeFile(t, filepath.Join(ws, "f.txt"), "x\n", 0o644)
	sb := sandboxtest.Start(t, newLocal(t, sandbox.LocalConfig{}), "not-git", sandbox.Spec{Workspace: ws})
	sandboxtest.WantOutput(t, sb, "echo y >> f.txt", "")
	if d, err := sb.Diff(context.Background()); d != "" || err != nil {
		t.Fatalf("Diff of a non-git sandbox = %q, %v", d, err)
	}
}

func TestLocalTruncation(t *testing.T) {
	sb := sandboxtest.Start(t, newLocal(t, sandbox.LocalConfig{OutputLimit: 100}), "trunc", sandbox.Spec{})
	res := sandboxtest.Exec(t, sb, "seq 1 10000")
	if !res.Truncated || res.ReturnCode != 0 {
		t.Fatalf("seq 1 10000 = %+v, want Truncated", res)
	}
	if !strings.HasPrefix(res.Output, "1\n2\n3\n") || !strings.HasSuffix(res.Output, "9999\n10000\n") ||
		!strings.Contains(res.Output, " bytes elided ...]\n") {
		t.Fatalf("truncated output lacks head, tail or marker:\n%s", res.Output)
	}
	small := sandboxtest.Exec(t, sb, "seq 1 3")
	if small.Truncated || small.Output != "1\n2\n3\n" {
		t.Fatalf("seq 1 3 = %+v", small)
	}
}

func TestLocalOutputOrderAndStderr(t *testing.T) {
	sb := sandboxtest.Start(t, newLocal(t, sandbox.LocalConfig{}), "order", sandbox.Spec{})
	res := sandboxtest.Exec(t, sb, "echo out1; echo err1 >&2; echo out2; echo err2 >&2; exit 4")
	if res.Output != "out1\nerr1\nout2\nerr2\n" || res.ReturnCode != 4 {
		t.Fatalf("got %+v", res)
	}
}

func TestLocalKilledBySignal(t *testing.T) {
	sb := sandboxtest.Start(t, newLocal(t, sandbox.LocalConfig{}), "signal", sandbox.Spec{})
	res := sandboxtest.Exec(t, sb, "kill -9 $$")
	if res.ReturnCode != 128+9 || res.TimedOut {
		t.Fatalf("kill -9 $$ = %+v, want return code 137", res)
	}
}

// execTimingOut runs cmd, which must time out, with growing timeouts until
// ready holds afterwards: on a loaded machine even `echo` can take longer
// than the first timeout.
func execTimingOut(t testing.TB, sb sandbox.Sandbox, cmd string, ready func(sandbox.ExecResult) bool) sandbox.ExecResult {
	t.Helper()
	for _, timeout := range []time.Duration{300 * time.Millisecond, 2 * time.Second, 10 * time.Second} {
		res, err := sb.Exec(context.Background(), cmd, timeout)
		if err != nil || !res.TimedOut || res.ReturnCode != -1 {
			t.Fatalf("Exec(%q) = %+v, %v; want TimedOut, return code -1, no error", cmd, res, err)
		}
		if ready(res) {
			return res
		}
	}
	t.Fatalf("Exec(%q) never got ready before its timeout", cmd)
	return sandbox.ExecResult{}
}

func TestLocalTimeoutKeepsPartialOutput(t *testing.T) {
	sb := sandboxtest.Start(t, newLocal(t, sandbox.LocalConfig{}), "partial", sandbox.Spec{})
	execTimingOut(t, sb, "echo started; sleep 100", func(res sandbox.ExecResult) bool {
		if res.Output != "" && res.Output != "started\n" {
			t.Fatalf("output %q, want %q", res.Output, "started\n")
		}
		return res.Output == "started\n"
	})
}

func TestLocalKillsProcessGroup(t *testing.T) {
	tests := []struct {
		name    string
		cmd     string
		timeout bool
	}{
		// The foreground sleep times out; the background one must die too.
		{"timeout", "sleep 100 & echo $! > bg.pid; echo $$ > leader.pid; echo ready; sleep 100", true},
		// The command finishes, leaving a child that holds the output pipe.
		{"finished", "sleep 100 & echo $! > bg.pid; echo $$ > leader.pid", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb := sandboxtest.Start(t, newLocal(t, sandbox.LocalConfig{}), "pgroup", sandbox.Spec{})
			if tt.timeout {
				execTimingOut(t, sb, tt.cmd, func(res sandbox.ExecResult) bool { return res.Output == "ready\n" })
			} else if res := sandboxtest.Exec(t, sb, tt.cmd); res.ReturnCode != 0 || res.TimedOut {
				t.Fatalf("got %+v", res)
			}
			bg := readPid(t, filepath.Join(dirOf(t, sb), "bg.pid"))
			leader := readPid(t, filepath.Join(dirOf(t, sb), "leader.pid"))
			waitFor(t, "background sleep to die", func() bool { return !alive(bg) })
			waitFor(t, "process group to be empty", func() bool { return len(groupMembers(leader)) == 0 })
		})
	}
}

func TestLocalEnvironment(t *testing.T) {
	t.Setenv("ACTLOOP_SECRET", "hunter2")
	root := t.TempDir()
	l := newLocal(t, sandbox.LocalConfig{Root: root})
	sb := sandboxtest.Start(t, l, "env", sandbox.Spec{Env: map[string]string{"FOO": "bar", "PAGER": "less"}})
	dir := dirOf(t, sb)
	check := func(sb sandbox.Sandbox) {
		t.Helper()
		sandboxtest.WantOutput(t, sb, `echo "${ACTLOOP_SECRET-unset}"`, "unset\n")
		sandboxtest.WantOutput(t, sb, `env | grep -c SECRET || true`, "0\n")
		sandboxtest.WantOutput(t, sb, `echo "$LANG|$TERM|$PAGER|$GIT_PAGER|$FOO"`, "C.UTF-8|dumb|less|cat|bar\n")
		// HOME is private to the sandbox but outside its workspace, so
		// dotfiles written there stay out of the diff.
		sandboxtest.WantOutput(t, sb, `test "$HOME" = "$TMPDIR" && test -d "$HOME" && echo ok`, "ok\n")
		sandboxtest.WantOutput(t, sb, `case "$HOME" in "`+dir+`"*) echo inside;; *) echo outside;; esac`, "outside\n")
		sandboxtest.WantOutput(t, sb, `test "$PATH" = "`+os.Getenv("PATH")+`" && echo same`, "same\n")
	}
	check(sb)

	// A restarted worker re-attaches with the same environment.
	attached, err := newLocal(t, sandbox.LocalConfig{Root: root}).Attach(context.Background(), sb.Handle())
	if err != nil {
		t.Fatal(err)
	}
	check(attached)
	if b, err := os.ReadFile(filepath.Join(root, "+meta", "env.json")); err == nil && strings.Contains(string(b), "hunter2") {
		t.Fatal("host environment written to metadata")
	}
}

func TestLocalAttachAfterRestart(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	first := newLocal(t, sandbox.LocalConfig{Root: root})
	sb := sandboxtest.Start(t, first, "survivor", sandbox.Spec{})
	sandboxtest.WantOutput(t, sb, "echo kept > state.txt", "")

	second := newLocal(t, sandbox.LocalConfig{Root: root})
	again, err := second.Attach(ctx, sb.Handle())
	if err != nil {
		t.Fatal(err)
	}
	sandboxtest.WantOutput(t, again, "cat state.txt", "kept\n")
	if err := again.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Attach(ctx, sb.Handle()); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("Attach after Close through another Local: %v, want ErrNotFound", err)
	}
	if _, err := sb.Exec(ctx, "true", time.Minute); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("Exec after Close through another Local: %v, want ErrNotFound", err)
	}
}

func TestLocalAttachInvalidHandle(t *testing.T) {
	root := t.TempDir()
	l := newLocal(t, sandbox.LocalConfig{Root: root})
	sandboxtest.Start(t, l, "real", sandbox.Spec{})
	tests := []struct {
		handle string
		want   error
	}{
		{"sim:real", sandbox.ErrInvalidHandle},
		{"local:real", sandbox.ErrInvalidHandle},
		{"local:/etc", sandbox.ErrInvalidHandle},
		{"local:" + root, sandbox.ErrInvalidHandle},
		{"local:" + root + "/../real", sandbox.ErrInvalidHandle},
		{"local:" + root + "/real/", sandbox.ErrInvalidHandle},
		{"local:" + root + "/real/sub", sandbox.ErrInvalidHandle},
		{"local:" + root + "/+meta", sandbox.ErrInvalidHandle},
		{"local:" + root + "/missing", sandbox.ErrNotFound},
	}
	for _, tt := range tests {
		if _, err := l.Attach(context.Background(), tt.handle); !errors.Is(err, tt.want) {
			t.Errorf("Attach(%q): error %v, want %v", tt.handle, err, tt.want)
		}
	}
}

func TestLocalContextEndsExec(t *testing.T) {
	sb := sandboxtest.Start(t, newLocal(t, sandbox.LocalConfig{}), "ctx", sandbox.Spec{})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	res, err := sb.Exec(ctx, "echo started; sleep 100", 0)
	if !errors.Is(err, context.DeadlineExceeded) || res.TimedOut {
		t.Fatalf("got %+v, %v; want context.DeadlineExceeded and not TimedOut", res, err)
	}
	sandboxtest.WantOutput(t, sb, "echo alive", "alive\n")
}

func TestLocalCloseInterruptsExec(t *testing.T) {
	sb := sandboxtest.Start(t, newLocal(t, sandbox.LocalConfig{}), "interrupt", sandbox.Spec{})
	started := filepath.Join(dirOf(t, sb), "started")
	errc := make(chan error, 1)
	go func() {
		_, err := sb.Exec(context.Background(), "touch started; sleep 100", 0)
		errc <- err
	}()
	waitFor(t, "command to start", func() bool {
		_, err := os.Stat(started)
		return err == nil
	})
	if err := sb.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("Exec interrupted by Close: error %v, want ErrNotFound", err)
	}
}

func TestLocalStartReplacesLeftover(t *testing.T) {
	root := t.TempDir()
	// What a worker that crashed during Start leaves behind.
	writeFile(t, filepath.Join(root, "crashed", "junk"), "x", 0o644)
	sb := sandboxtest.Start(t, newLocal(t, sandbox.LocalConfig{Root: root}), "crashed", sandbox.Spec{})
	sandboxtest.WantOutput(t, sb, "ls -A", "")
}

func TestLocalCloseReadOnlyTree(t *testing.T) {
	root := t.TempDir()
	sb, err := newLocal(t, sandbox.LocalConfig{Root: root}).Start(context.Background(), "ro", sandbox.Spec{
		Setup: []string{"mkdir -p cache/mod && echo x > cache/mod/f && chmod -R a-w cache"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "+") {
			t.Errorf("left behind in root: %s", e.Name())
		}
		if sub, _ := os.ReadDir(filepath.Join(root, e.Name())); strings.HasPrefix(e.Name(), "+") && len(sub) != 0 {
			t.Errorf("left behind in %s: %v", e.Name(), sub)
		}
	}
}

func TestNewLocalErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  sandbox.LocalConfig
		want string
	}{
		{"no root", sandbox.LocalConfig{}, "root is empty"},
		{"negative limit", sandbox.LocalConfig{Root: t.TempDir(), OutputLimit: -1}, "negative"},
		{"unknown isolation", sandbox.LocalConfig{Root: t.TempDir(), Isolation: "docker"}, `isolation "docker"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := sandbox.NewLocal(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("NewLocal: error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestNewLocalBwrapMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := sandbox.NewLocal(sandbox.LocalConfig{Root: t.TempDir(), Isolation: sandbox.IsolationBwrap})
	if err == nil || !strings.Contains(err.Error(), "bubblewrap not found") {
		t.Fatalf("NewLocal without bwrap: error %v, want one saying bubblewrap is not found", err)
	}
}

func TestLocalBwrapIsolation(t *testing.T) {
	skipWithoutBwrap(t)
	host := t.TempDir()
	repo := gitRepo(t)
	l := newLocal(t, sandbox.LocalConfig{Isolation: sandbox.IsolationBwrap})
	other := sandboxtest.Start(t, l, "other", sandbox.Spec{})
	sb := sandboxtest.Start(t, l, "jailed", sandbox.Spec{Workspace: repo})

	sandboxtest.WantOutput(t, sb, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '", "lo\n")
	if res := sandboxtest.Exec(t, sb, "touch "+host+"/escaped"); res.ReturnCode == 0 {
		t.Fatalf("writing outside the sandbox succeeded: %+v", res)
	}
	if _, err := os.Stat(filepath.Join(host, "escaped")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("file outside the sandbox: %v", err)
	}
	sandboxtest.WantOutput(t, sb, "ls -A ..", "jailed\n")
	sandboxtest.WantOutput(t, other, "echo mine > /tmp/f", "")
	sandboxtest.WantOutput(t, other, "cat /tmp/f", "mine\n")
	sandboxtest.WantOutput(t, sb, "cat /tmp/f 2>/dev/null || echo private", "private\n")

	sandboxtest.WantOutput(t, sb, "echo edited > a.txt", "")
	d, err := sb.Diff(context.Background())
	if err != nil || !strings.Contains(d, "+edited") {
		t.Fatalf("Diff under bwrap = %q, %v", d, err)
	}
}

func readPid(t testing.TB, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// procStat returns the state and process group of pid; ok is false when
// the process does not exist.
func procStat(pid int) (state byte, pgrp int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// pid (comm) state ppid pgrp ...; comm may contain spaces.
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(fields) < 3 {
		return 0, 0, false
	}
	pgrp, _ = strconv.Atoi(fields[2])
	return fields[0][0], pgrp, true
}

// alive reports whether pid runs; a zombie waiting for its reaper does not.
func alive(pid int) bool {
	state, _, ok := procStat(pid)
	return ok && state != 'Z' && state != 'X'
}

// groupMembers returns the live processes of process group pgid.
func groupMembers(pgid int) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, pgrp, ok := procStat(pid); ok && pgrp == pgid && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitFor polls cond until it holds, failing the test after a deadline far
// beyond what a loaded machine needs.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}
