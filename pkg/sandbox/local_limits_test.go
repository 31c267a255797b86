package sandbox_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
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

// newDiskLocal returns a Local enforcing its disk and file limits as disk
// says, skipping the test where a tmpfs cannot be mounted here.
func newDiskLocal(t *testing.T, cfg sandbox.LocalConfig, disk string, bwrap bool) *sandbox.Local {
	t.Helper()
	cfg.Disk = disk
	if disk == sandbox.DiskTmpfs {
		probe := cfg
		probe.Root, probe.Isolation, probe.AllowUnisolated = t.TempDir(), sandbox.IsolationNone, true
		if _, err := sandbox.NewLocal(probe); err != nil {
			t.Skipf("no tmpfs per sandbox here (the worker needs root or CAP_SYS_ADMIN to mount): %v", err)
		}
	}
	var l *sandbox.Local
	if bwrap {
		l = newBwrap(t, cfg)
	} else {
		l = newLocal(t, cfg)
	}
	if l.Disk() != disk {
		t.Fatalf("Disk() = %q, want %q", l.Disk(), disk)
	}
	return l
}

// forEachDisk runs fn on Locals with cfg enforcing their disk and file
// limits each way (the kernel's tmpfs where this host allows it, the
// watcher), unisolated and, where bubblewrap works, under bwrap.
func forEachDisk(t *testing.T, cfg sandbox.LocalConfig, fn func(t *testing.T, l *sandbox.Local)) {
	for _, disk := range []string{sandbox.DiskTmpfs, sandbox.DiskWatch} {
		t.Run(disk+"/none", func(t *testing.T) { fn(t, newDiskLocal(t, cfg, disk, false)) })
		t.Run(disk+"/bwrap", func(t *testing.T) { fn(t, newDiskLocal(t, cfg, disk, true)) })
	}
}

// A sandbox may not hold more than its disk limit, its working copy and
// its private /tmp together: the kernel refuses the write past it (tmpfs),
// or the watcher kills the command that went past it. Either way the
// output names the limit, the sandbox stays usable once the agent deletes
// files, and its diff can still be taken while it is full.
func TestLocalDiskLimit(t *testing.T) {
	forEachDisk(t, sandbox.LocalConfig{Limits: sandbox.Limits{DiskMB: 8}}, func(t *testing.T, l *sandbox.Local) {
		sb := sandboxtest.Start(t, l, "disk", sandbox.Spec{Workspace: gitRepo(t)})
		const note = "sandbox limit: disk: the sandbox may hold at most 8 MiB"
		for i, cmd := range []string{
			// Many files, each small: no file size limit helps here.
			"for i in $(seq 64); do head -c 1M /dev/zero > f$i; sleep 0.05; done; echo finished",
			// The private /tmp counts too.
			`head -c 16M /dev/zero > "$TMPDIR/t"; sleep 10; echo finished`,
		} {
			res := sandboxtest.Exec(t, sb, cmd)
			if l.Disk() == sandbox.DiskTmpfs {
				// Not stopped: its writes failed, and it went on.
				if res.Limit != sandbox.LimitDisk || !strings.Contains(res.Output, "No space left on device") ||
					!strings.Contains(lastLine(res.Output), note) {
					t.Fatalf("%s = %+v, want its writes refused and the disk limit named", cmd, res)
				}
				sandboxtest.WantOutput(t, sb, `du -sk --apparent-size . "$TMPDIR" | awk '{n += $1} END {print (n <= 8192)}'`, "1\n")
			} else {
				wantLimit(t, cmd, res, sandbox.LimitDisk, note)
				if strings.Contains(res.Output, "finished") || res.ReturnCode != 128+9 {
					t.Fatalf("%s = %+v, want it killed (137) before it finished", cmd, res)
				}
			}
			if d, err := sb.Diff(context.Background()); err != nil || (i == 0 && !strings.Contains(d, "b/f1")) {
				t.Fatalf("Diff of a sandbox at its disk limit: %v, %.200q", err, d)
			}
			// The sandbox stays usable: the agent can clean up, however long
			// it takes (measured past the limit, but not growing).
			sandboxtest.WantOutput(t, sb, `sleep 0.6; rm -f f* "$TMPDIR/t" && echo clean`, "clean\n")
		}
		sandboxtest.WantOutput(t, sb, "head -c 1M /dev/zero > again && echo ok", "ok\n")
	})
}

// Empty files take no bytes: the file limit bounds how many a sandbox
// holds (the reproduction: a million touched files, then gigabytes).
func TestLocalFileLimit(t *testing.T) {
	forEachDisk(t, sandbox.LocalConfig{Limits: sandbox.Limits{DiskMB: 64, Files: 200}}, func(t *testing.T, l *sandbox.Local) {
		sb := sandboxtest.Start(t, l, "files", sandbox.Spec{Workspace: gitRepo(t)})
		const note = "sandbox limit: files: the sandbox may hold at most 200 files and directories"
		cmd := "mkdir d && cd d && for i in $(seq 20000); do : > f$i || break; sleep 0.001; done; echo finished"
		res := sandboxtest.Exec(t, sb, cmd)
		if res.Limit != sandbox.LimitFiles || !strings.Contains(lastLine(res.Output), note) {
			t.Fatalf("%s = %+v, want it stopped by the file limit", cmd, res)
		}
		if l.Disk() == sandbox.DiskTmpfs && !strings.Contains(res.Output, "No space left on device") {
			t.Fatalf("%s: %q; want the file past the limit refused", cmd, res.Output)
		}
		if l.Disk() == sandbox.DiskWatch && res.ReturnCode != 128+9 {
			t.Fatalf("%s = %+v, want it killed (137)", cmd, res)
		}
		// The kernel allows not one more; the watcher stops the command
		// within a measurement or two, far before it finishes.
		most := 200
		if l.Disk() == sandbox.DiskWatch {
			most = 5000
		}
		n, err := strconv.Atoi(strings.TrimSpace(sandboxtest.Exec(t, sb, `ls d | wc -l`).Output))
		if err != nil || n > most {
			t.Fatalf("the command made %d files (%v), want at most %d (limit 200)", n, err, most)
		}
		if d, err := sb.Diff(context.Background()); err != nil || !strings.Contains(d, "b/d/f1") {
			t.Fatalf("Diff of a sandbox at its file limit: %v, %.200q", err, d)
		}
		sandboxtest.WantOutput(t, sb, "rm -rf d && touch again && echo ok", "ok\n")
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
		private   []string
	}{
		{"inside", []string{root}, ws, ws, nil},
		{"the root itself", []string{root}, root, root, nil},
		{"second root", []string{outside, root}, ws, ws, nil},
		{"root given by a symlink", []string{rootLink}, ws, ws, nil},
		{"symlink from outside into a root", []string{root}, into, ws, nil},
		{"everything under /", []string{"/"}, outside, outside, nil},
		{"outside", []string{root}, outside, "", nil},
		{"symlink in a root leading out", []string{root}, escape, "", nil},
		{"dot-dot out", []string{root}, ws + "/../../outside", "", nil},
		{"sibling with the root as prefix", []string{root}, root + "x", "", nil},
		{"no roots", nil, ws, "", nil},
		{"relative", []string{root}, "ws", "", nil},
		{"not a directory", []string{root}, filepath.Join(root, "file"), "", nil},
		{"missing", []string{root}, filepath.Join(root, "nope"), "", nil},
		// A root holding the sandbox root (or the state dir): workspaces
		// that overlap it are refused, others are not.
		{"inside a private dir", []string{root}, ws, "", []string{ws}},
		{"inside a private dir below it", []string{root}, ws, "", []string{root}},
		{"holding a private dir", []string{base}, root, "", []string{ws}},
		{"private dir by a symlink", []string{root}, ws, "", []string{into}},
		{"beside a private dir", []string{base}, outside, outside, []string{ws}},
		{"beside a private dir with its name as prefix", []string{base}, root + "x", root + "x", []string{root}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := sandbox.ResolveWorkspace(tt.roots, tt.workspace, tt.private...)
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
		// pipefail: the pipeline fails with tail, whether the kill took
		// the whole command or tail alone (then wc exits 0).
		cmd := "set -o pipefail; head -c 1G /dev/zero | tail -c 512M | wc -c"
		wantLimit(t, cmd, sandboxtest.Exec(t, sb, cmd), sandbox.LimitMemory, "sandbox limit: memory")
		cmd = "for i in $(seq 40); do sleep 1 & done; wait"
		res := sandboxtest.Exec(t, sb, cmd)
		if res.Limit != sandbox.LimitProcs || !strings.Contains(res.Output, "sandbox limit: processes") {
			t.Fatalf("%s = %+v, want it stopped by the process limit", cmd, res)
		}
		sandboxtest.WantOutput(t, sb, "echo alive", "alive\n")
	})
}
