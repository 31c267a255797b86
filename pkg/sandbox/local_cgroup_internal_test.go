package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/testkit"
)

func TestOwnCgroup(t *testing.T) {
	const hybrid = "12:memory:/docker/abc\n1:name=systemd:/\n0::/docker/abc\n"
	const mountsV2 = "30 25 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n"
	const nsRoot = "30 25 0:26 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
	tests := []struct {
		name, cgroup, mountinfo string
		want                    string // "" means an error
		wantNSRoot              bool
		wantErr                 string
	}{
		{"unified", "0::/system.slice/w.service\n", mountsV2, "/sys/fs/cgroup/system.slice/w.service", false, ""},
		{"hybrid", hybrid, "22 1 0:20 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n" +
			"23 1 0:21 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n", "/sys/fs/cgroup/unified/docker/abc", false, ""},
		{"container cgroup namespace", "0::/\n", "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", "/sys/fs/cgroup", true, ""},
		{"mount of a subtree", "0::/docker/abc/sub\n", nsRoot, "/sys/fs/cgroup/sub", false, ""},
		{"mount root a prefix of another cgroup", "0::/docker/abcd\n", nsRoot, "", false, "no cgroup2 mount"},
		{"v1 only", "4:memory:/x\n1:name=systemd:/x\n", mountsV2, "", false, "cgroup v1 only"},
		{"no cgroup2 mount", "0::/x\n", "22 1 0:20 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n", "", false, "no cgroup2 mount"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			cg, mi := filepath.Join(dir, "cgroup"), filepath.Join(dir, "mountinfo")
			if err := os.WriteFile(cg, []byte(tt.cgroup), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(mi, []byte(tt.mountinfo), 0o644); err != nil {
				t.Fatal(err)
			}
			saved := cgroupFS
			cgroupFS.procSelfCgroup, cgroupFS.mountinfo = cg, mi
			t.Cleanup(func() { cgroupFS = saved })
			got, nsRoot, err := ownCgroup()
			if tt.want == "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ownCgroup() = %q, %v; want an error saying %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want || nsRoot != tt.wantNSRoot {
				t.Fatalf("ownCgroup() = %q, %v, %v; want %q, %v", got, nsRoot, err, tt.want, tt.wantNSRoot)
			}
		})
	}
}

func TestLimitHit(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := limitHit(dir); got != "" {
		t.Fatalf("limitHit without event files = %q", got)
	}
	write("memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 0\n")
	write("pids.events", "max 2\n")
	if got := limitHit(dir); got != LimitProcs {
		t.Fatalf("limitHit = %q, want %q", got, LimitProcs)
	}
	write("memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
	if got := limitHit(dir); got != LimitMemory {
		t.Fatalf("limitHit = %q, want %q", got, LimitMemory)
	}
}

func TestSeccompFilterCompiles(t *testing.T) {
	prog, err := seccompFilter()
	if err != nil {
		t.Skipf("no seccomp filter on this architecture: %v", err)
	}
	// struct sock_filter is 8 bytes; the kernel takes at most 4096 of them.
	if len(prog) == 0 || len(prog)%8 != 0 || len(prog)/8 > 4096 {
		t.Fatalf("filter of %d bytes is not a valid BPF program", len(prog))
	}
}

// TestCgroupPerCommand runs commands in a cgroup of their own wherever
// this process may make a child cgroup v2, even one without the memory and
// pids controllers: each command's processes, also those that left its
// session, end with it, and its cgroup is removed.
func TestCgroupPerCommand(t *testing.T) {
	own, _, err := ownCgroup()
	if err != nil {
		t.Skipf("no cgroup v2: %v", err)
	}
	for _, iso := range []string{IsolationNone, IsolationBwrap} {
		t.Run(iso, func(t *testing.T) {
			parent, err := os.MkdirTemp(own, "actloop-test-")
			if err != nil {
				t.Skipf("cannot make a child cgroup of %s: %v", own, err)
			}
			t.Cleanup(func() { _ = os.Remove(parent) })
			root := testkit.SearchableTempDir(t)
			l, err := NewLocal(LocalConfig{Root: root, Isolation: iso, AllowUnisolated: iso == IsolationNone})
			if err != nil {
				t.Skipf("isolation %s: %v", iso, err)
			}
			l.cg = &cgroups{parent: parent, files: map[string]string{}}
			sb, err := l.Start(t.Context(), "cg", Spec{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sb.Close(t.Context()) })
			res, err := sb.Exec(t.Context(), "setsid sleep 1000 & echo $!; grep '^0::' /proc/self/cgroup", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			// Under bwrap the cgroup namespace shows the command's own
			// cgroup as /.
			rel, _ := filepath.Rel(own, parent)
			if !strings.Contains(res.Output, "/"+rel+"/cg+") && !(iso == IsolationBwrap && strings.Contains(res.Output, "0::/\n")) {
				t.Fatalf("command's cgroup: %q, want one under %s", res.Output, parent)
			}
			entries, _ := os.ReadDir(parent)
			for _, e := range entries {
				if e.IsDir() {
					t.Fatalf("cgroup %s left after the command", e.Name())
				}
			}
			if iso == IsolationBwrap {
				return // the pid is the sandbox's pid namespace's
			}
			pid, err := strconv.Atoi(strings.SplitN(res.Output, "\n", 2)[0])
			if err != nil {
				t.Fatalf("output %q", res.Output)
			}
			// Gone, or a zombie until its reaper (init here) waits for it.
			if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && !strings.Contains(string(st), ") Z ") {
				t.Fatalf("the command's session-leaving child %d outlived it: %s", pid, st)
			}
		})
	}
}
