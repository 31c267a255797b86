package sandbox_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/actloop/actloop/pkg/sandbox"
	"github.com/actloop/actloop/pkg/sandbox/sandboxtest"
)

// forEachIsolation runs fn on a Local with cfg unisolated and, where
// bubblewrap works, under bwrap.
func forEachIsolation(t *testing.T, cfg sandbox.LocalConfig, fn func(t *testing.T, l *sandbox.Local)) {
	t.Run("none", func(t *testing.T) { fn(t, newLocal(t, cfg)) })
	t.Run("bwrap", func(t *testing.T) { fn(t, newBwrap(t, cfg)) })
}

// wantLimit checks that a command was stopped by limit and that its output
// ends with the line naming it.
func wantLimit(t testing.TB, cmd string, res sandbox.ExecResult, limit, note string) {
	t.Helper()
	if res.Limit != limit || res.TimedOut || res.ReturnCode == 0 {
		t.Fatalf("%s = %+v, want it stopped by the %s limit", cmd, res, limit)
	}
	if !strings.Contains(lastLine(res.Output), note) {
		t.Fatalf("%s: output %q does not end with a line naming the limit (%q)", cmd, res.Output, note)
	}
}

func TestLocalFileSizeLimit(t *testing.T) {
	forEachIsolation(t, sandbox.LocalConfig{Limits: sandbox.Limits{FileSizeMB: 1}}, func(t *testing.T, l *sandbox.Local) {
		sb := sandboxtest.Start(t, l, "fsize", sandbox.Spec{Workspace: gitRepo(t)})
		cmd := "head -c 2M /dev/zero > big"
		res := sandboxtest.Exec(t, sb, cmd)
		wantLimit(t, cmd, res, sandbox.LimitFileSize, "sandbox limit: file size: a file may hold at most 1 MiB")
		if res.ReturnCode != 128+25 { // SIGXFSZ
			t.Errorf("%s: return code %d, want 153 (SIGXFSZ)", cmd, res.ReturnCode)
		}
		sandboxtest.WantOutput(t, sb, "stat -c %s big", "1048576\n")
		// Inside a script the shell's own report names it too.
		res = sandboxtest.Exec(t, sb, "head -c 2M /dev/zero > big2; echo after")
		if !strings.Contains(res.Output, "File size limit exceeded") || !strings.HasSuffix(res.Output, "after\n") {
			t.Errorf("a write past the limit in a script: %q", res.Output)
		}
		// A file at the limit is fine, and Local's own git may store it:
		// the diff is still taken.
		sandboxtest.WantOutput(t, sb, "head -c 1M /dev/urandom > at-limit.bin && echo ok", "ok\n")
		d, err := sb.Diff(context.Background())
		if err != nil || !strings.Contains(d, "b/at-limit.bin") {
			t.Fatalf("Diff with a file at the limit: %v, %.200q", err, d)
		}
		sandboxtest.WantOutput(t, sb, "echo alive", "alive\n")
	})
}

func TestLocalDiskLimit(t *testing.T) {
	forEachIsolation(t, sandbox.LocalConfig{Limits: sandbox.Limits{DiskMB: 8}}, func(t *testing.T, l *sandbox.Local) {
		sb := sandboxtest.Start(t, l, "disk", sandbox.Spec{Workspace: gitRepo(t)})
		const note = "sandbox limit: disk: the sandbox may hold at most 8 MiB"
		for _, cmd := range []string{
			// Many files, each small: no file size limit helps here.
			"for i in $(seq 64); do head -c 1M /dev/zero > f$i; sleep 0.05; done; echo finished",
			// The private /tmp counts too.
			`head -c 16M /dev/zero > "$TMPDIR/t"; sleep 10; echo finished`,
		} {
			res := sandboxtest.Exec(t, sb, cmd)
			wantLimit(t, cmd, res, sandbox.LimitDisk, note)
			if strings.Contains(res.Output, "finished") || res.ReturnCode != 128+9 {
				t.Fatalf("%s = %+v, want it killed (137) before it finished", cmd, res)
			}
			// The sandbox stays usable: the agent can clean up, however long
			// it takes (measured past the limit, but not growing).
			sandboxtest.WantOutput(t, sb, `sleep 0.6; rm -f f* "$TMPDIR/t" && echo clean`, "clean\n")
		}
	})
}

// TestLocalDiffAndOutputMemory checks that a 64 MiB file in the sandbox,
// diffed (86 MB of binary diff) or printed, costs the worker no more than
// the caps.
func TestLocalDiffAndOutputMemory(t *testing.T) {
	const blob = 64 << 20
	const diffCap = 1 << 20
	sb := sandboxtest.Start(t, newLocal(t, sandbox.LocalConfig{}), "blob", sandbox.Spec{Workspace: gitRepo(t)})
	sandboxtest.WantOutput(t, sb, "head -c 64M /dev/urandom > blob.bin && echo ok", "ok\n")
	ctx := context.Background()

	var diff string
	var over bool
	alloc := allocated(t, func() {
		var err error
		if diff, over, err = sandbox.DiffCapped(ctx, sb, diffCap); err != nil {
			t.Fatal(err)
		}
	})
	if !over || len(diff) != diffCap || !strings.HasPrefix(diff, "diff --git a/blob.bin b/blob.bin\n") {
		t.Fatalf("DiffCapped(%d) = %d bytes (%.40q), over %v; want the first %d bytes, over", diffCap, len(diff), diff, over, diffCap)
	}
	t.Logf("DiffCapped(%d) of a %d-byte file: %d bytes allocated", diffCap, blob, alloc)
	if alloc > blob/4 {
		t.Fatalf("DiffCapped of a %d-byte file allocated %d bytes in the worker, want about the cap (%d)", blob, alloc, diffCap)
	}

	var res sandbox.ExecResult
	alloc = allocated(t, func() { res = sandboxtest.Exec(t, sb, "cat blob.bin") })
	if !res.Truncated || len(res.Output) > 4*sandbox.DefaultOutputLimit {
		t.Fatalf("cat of a %d-byte file: %d bytes of output, truncated %v", blob, len(res.Output), res.Truncated)
	}
	t.Logf("cat of a %d-byte file: %d bytes allocated", blob, alloc)
	if alloc > blob/8 {
		t.Fatalf("cat of a %d-byte file allocated %d bytes in the worker", blob, alloc)
	}
}

// allocated returns the bytes the process allocated while fn ran.
func allocated(t testing.TB, fn func()) uint64 {
	t.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// syscallProbe builds testdata/syscallprobe statically into dir.
func syscallProbe(t testing.TB, dir string) {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go not on PATH, needed to build the system call probe: %v", err)
	}
	cmd := exec.Command(gobin, "build", "-o", filepath.Join(dir, "probe"), "./testdata/syscallprobe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the system call probe: %v\n%s", err, out)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestBwrapSeccompDenies(t *testing.T) {
	ws := t.TempDir()
	syscallProbe(t, ws)
	l := newBwrap(t, sandbox.LocalConfig{})
	if !l.Seccomp() {
		t.Fatal("Seccomp() = false under bwrap")
	}
	sb := sandboxtest.Start(t, l, "seccomp", sandbox.Spec{Workspace: ws})
	want := "ptrace EPERM\nkeyctl EPERM\nunshare_user EPERM\nbpf EPERM\nuserfaultfd EPERM\ngetpid ok\n"
	sandboxtest.WantOutput(t, sb, "./probe", want)
	// Nested user namespaces are refused whichever way they are asked for.
	if res := sandboxtest.Exec(t, sb, "unshare --user true"); res.ReturnCode == 0 {
		t.Errorf("unshare --user = %+v, want it refused", res)
	}

	// Unisolated, with no filter, the same calls get past it: the EPERMs
	// above are the filter's.
	plain := sandboxtest.Start(t, newLocal(t, sandbox.LocalConfig{}), "no-seccomp", sandbox.Spec{Workspace: ws})
	res := sandboxtest.Exec(t, plain, "./probe")
	if !strings.Contains(res.Output, "ptrace ok\n") || !strings.Contains(res.Output, "getpid ok\n") {
		t.Fatalf("probe unisolated: %q, want ptrace ok", res.Output)
	}
}

func TestResolveWorkspace(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "root")
	ws := filepath.Join(root, "ws")
	outside := filepath.Join(base, "outside")
	for _, d := range []string{ws, outside, root + "x"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(root, "file"), "x", 0o644)
	symlink := func(target, link string) string {
		t.Helper()
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		return link
	}
	escape := symlink(outside, filepath.Join(root, "escape"))
	into := symlink(ws, filepath.Join(base, "into"))
	rootLink := symlink(root, filepath.Join(base, "rootlink"))
	tests := []struct {
		name      string
		roots     []string
		workspace string
		want      string // "" means refused
	}{
		{"inside", []string{root}, ws, ws},
		{"the root itself", []string{root}, root, root},
		{"second root", []string{outside, root}, ws, ws},
		{"root given by a symlink", []string{rootLink}, ws, ws},
		{"symlink from outside into a root", []string{root}, into, ws},
		{"everything under /", []string{"/"}, outside, outside},
		{"outside", []string{root}, outside, ""},
		{"symlink in a root leading out", []string{root}, escape, ""},
		{"dot-dot out", []string{root}, ws + "/../../outside", ""},
		{"sibling with the root as prefix", []string{root}, root + "x", ""},
		{"no roots", nil, ws, ""},
		{"relative", []string{root}, "ws", ""},
		{"not a directory", []string{root}, filepath.Join(root, "file"), ""},
		{"missing", []string{root}, filepath.Join(root, "nope"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := sandbox.ResolveWorkspace(tt.roots, tt.workspace)
			if tt.want == "" {
				if !errors.Is(err, sandbox.ErrWorkspaceRefused) {
					t.Fatalf("ResolveWorkspace(%q, %q) = %q, %v; want ErrWorkspaceRefused", tt.roots, tt.workspace, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ResolveWorkspace(%q, %q) = %q, %v; want %q", tt.roots, tt.workspace, got, err, tt.want)
			}
		})
	}
}

// A symlink in the workspace that points out of it is copied as a link:
// the sandbox does not get what it points to.
func TestLocalWorkspaceSymlinkOutside(t *testing.T) {
	secretDir := t.TempDir()
	secret := filepath.Join(secretDir, "secret.txt")
	writeFile(t, secret, "TOKEN-SECRET\n", 0o644)
	if err := os.Chmod(secretDir, 0o755); err != nil {
		t.Fatal(err)
	}
	ws := gitRepo(t)
	if err := os.Symlink(secret, filepath.Join(ws, "leak")); err != nil {
		t.Fatal(err)
	}
	forEachIsolation(t, sandbox.LocalConfig{}, func(t *testing.T, l *sandbox.Local) {
		sb := sandboxtest.Start(t, l, "symlink-out", sandbox.Spec{Workspace: ws})
		sandboxtest.WantOutput(t, sb, "test -L leak && readlink leak", secret+"\n")
		if l.Isolation() == sandbox.IsolationBwrap {
			// The host path it names is not in the sandbox.
			if res := sandboxtest.Exec(t, sb, "cat leak"); res.ReturnCode == 0 || strings.Contains(res.Output, "TOKEN") {
				t.Fatalf("cat leak under bwrap = %+v", res)
			}
		}
	})
}

// The cgroup limits run where the host delegates a cgroup v2 subtree with
// the memory and pids controllers to the worker, else where the cgroup v1
// memory, pids and cpu hierarchies are writable at the worker's cgroups.
func TestLocalCgroupLimits(t *testing.T) {
	forEachIsolation(t, sandbox.LocalConfig{Limits: sandbox.Limits{MemoryMB: 128, MaxProcs: 16}, CPUs: 1}, func(t *testing.T, l *sandbox.Local) {
		if l.Cgroups() == "" {
			t.Skipf("no cgroup here, only per-process rlimits: %v", l.CgroupError())
		}
		sb := sandboxtest.Start(t, l, "cgroup", sandbox.Spec{})
		// tail buffers its whole input to print the last 512 MiB of it.
		cmd := "head -c 1G /dev/zero | tail -c 512M | wc -c"
		wantLimit(t, cmd, sandboxtest.Exec(t, sb, cmd), sandbox.LimitMemory, "sandbox limit: memory")
		cmd = "for i in $(seq 40); do sleep 1 & done; wait"
		res := sandboxtest.Exec(t, sb, cmd)
		if res.Limit != sandbox.LimitProcs || !strings.Contains(res.Output, "sandbox limit: processes") {
			t.Fatalf("%s = %+v, want it stopped by the process limit", cmd, res)
		}
		sandboxtest.WantOutput(t, sb, "echo alive", "alive\n")
	})
}
