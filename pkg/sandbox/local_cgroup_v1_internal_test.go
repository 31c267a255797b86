package sandbox

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/testkit"
)

const (
	// A hybrid host: memory nested, the rest at the root, cpu and cpuacct
	// mounted apart.
	hybridV1Cgroup = "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/abc\n2:cpuacct:/\n1:cpu:/\n0::/\n"
	hybridV1Mounts = "30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n" +
		"31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n" +
		"32 30 0:29 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n" +
		"34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n" +
		"38 30 0:35 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n" +
		"39 30 0:36 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n" +
		"40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
	// A container with its own cgroup namespace on a v1 host: the mounts'
	// roots are the container's cgroups.
	containerV1Cgroup = "5:cpu,cpuacct:/docker/abc\n4:pids:/docker/abc/sub\n3:memory:/docker/abc\n"
	containerV1Mounts = "40 30 0:31 /docker/abc /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory\n" +
		"41 30 0:35 /docker/abc /sys/fs/cgroup/pids ro,nosuid - cgroup cgroup rw,pids\n" +
		"42 30 0:28 /docker/abc /sys/fs/cgroup/cpu,cpuacct ro,nosuid - cgroup cgroup rw,cpu,cpuacct\n"
)

func TestParseCgroupV1(t *testing.T) {
	all := []string{"memory", "pids", "cpu"}
	tests := []struct {
		name, cgroup, mountinfo string
		want                    []string
		wantDirs                map[string]string // nil means an error
		wantErr                 string
	}{
		{"hybrid host", hybridV1Cgroup, hybridV1Mounts, all, map[string]string{
			"memory": "/sys/fs/cgroup/memory/process_api/abc",
			"pids":   "/sys/fs/cgroup/pids",
			"cpu":    "/sys/fs/cgroup/cpu",
		}, ""},
		{"only what is wanted", hybridV1Cgroup, hybridV1Mounts, []string{"pids"}, map[string]string{
			"pids": "/sys/fs/cgroup/pids",
		}, ""},
		{"container cgroup namespace, comounted cpu", containerV1Cgroup, containerV1Mounts, all, map[string]string{
			"memory": "/sys/fs/cgroup/memory",
			"pids":   "/sys/fs/cgroup/pids/sub",
			"cpu":    "/sys/fs/cgroup/cpu,cpuacct",
		}, ""},
		{"mount root a prefix of another cgroup", "3:memory:/docker/abcd\n", containerV1Mounts, []string{"memory"}, nil,
			"memory (no mount holds this process's cgroup /docker/abcd)"},
		{"cgroup v2 only", "0::/system.slice/w.service\n", "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", all, nil,
			"memory (this process is in no cgroup of it), pids (this process is in no cgroup of it)"},
		{"controller not mounted", hybridV1Cgroup, "38 30 0:35 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n", all, nil,
			"controller memory (no mount holds"},
		{"named hierarchy is no controller", "9:name=systemd:/\n", hybridV1Mounts, []string{"systemd"}, nil,
			"systemd (this process is in no cgroup of it)"},
		{"garbage", "x\n::\n1:memory\n", "nonsense - cgroup\n1 2 3 - cgroup cgroup rw,memory\n", []string{"memory"}, nil,
			"memory (this process is in no cgroup of it)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseCgroupV1([]byte(tt.cgroup), []byte(tt.mountinfo), tt.want)
			if tt.wantDirs == nil {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseCgroupV1() = %v, %v; want an error saying %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !maps.Equal(got, tt.wantDirs) {
				t.Fatalf("parseCgroupV1() = %v, %v; want %v", got, err, tt.wantDirs)
			}
		})
	}
}

func FuzzParseCgroupV1(f *testing.F) {
	f.Add(hybridV1Cgroup, hybridV1Mounts)
	f.Add(containerV1Cgroup, containerV1Mounts)
	f.Add("3:memory:/docker/abcd\n", containerV1Mounts)
	f.Add("0::/\n", "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
	want := []string{"memory", "pids", "cpu"}
	f.Fuzz(func(t *testing.T, cgroup, mountinfo string) {
		got, err := parseCgroupV1([]byte(cgroup), []byte(mountinfo), want)
		if err != nil {
			return
		}
		if len(got) != len(want) {
			t.Fatalf("parseCgroupV1() = %v, want a directory for each of %v", got, want)
		}
		for _, ctl := range want {
			if got[ctl] == "" {
				t.Fatalf("parseCgroupV1() = %v: no directory for %s", got, ctl)
			}
		}
	})
}

func TestLimitHitV1(t *testing.T) {
	mem, pids := t.TempDir(), t.TempDir()
	write := func(file, content string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dirs := []string{mem, pids}
	if got := limitHitV1(dirs, nil); got != "" {
		t.Fatalf("limitHitV1 without event files = %q", got)
	}
	write(filepath.Join(mem, "memory.oom_control"), "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n")
	write(filepath.Join(pids, "pids.events"), "max 2\n")
	if got := limitHitV1(dirs, nil); got != LimitProcs {
		t.Fatalf("limitHitV1 = %q, want %q", got, LimitProcs)
	}
	write(filepath.Join(mem, "memory.oom_control"), "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
	if got := limitHitV1(dirs, nil); got != LimitMemory {
		t.Fatalf("limitHitV1 = %q, want %q", got, LimitMemory)
	}
	// The watch killed the command before the OOM killer counted a kill.
	var w oomWatch
	w.fired.Store(true)
	if got := limitHitV1(nil, &w); got != LimitMemory {
		t.Fatalf("limitHitV1 after the OOM watch fired = %q, want %q", got, LimitMemory)
	}
}

// newV1Local returns a Local of isolation iso whose commands run in cgroup
// v1 cgroups, and those cgroups' parents; it skips where this process
// cannot make cgroup v1 cgroups.
func newV1Local(t *testing.T, iso string, lim Limits, cpus float64) (*Local, []string) {
	t.Helper()
	root := testkit.SearchableTempDir(t)
	l, err := NewLocal(LocalConfig{Root: root, Isolation: iso, AllowUnisolated: iso == IsolationNone, Limits: lim, CPUs: cpus})
	if err != nil {
		t.Skipf("isolation %s: %v", iso, err)
	}
	if l.cg == nil || l.cg.v1 == nil {
		t.Skipf("no cgroup v1 fallback here: %q, %v", l.Cgroups(), l.CgroupError())
	}
	var parents []string
	for _, h := range l.cg.v1 {
		parents = append(parents, h.parent)
	}
	return l, parents
}

// cgroupV1Path returns the path of controller's cgroup in the contents of
// a /proc/<pid>/cgroup.
func cgroupV1Path(procCgroup, controller string) string {
	for line := range strings.Lines(procCgroup) {
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(f) == 3 && slices.Contains(strings.Split(f[1], ","), controller) {
			return f[2]
		}
	}
	return ""
}

// wantNoCgroups checks that the commands' cgroups and their parents are
// gone.
func wantNoCgroups(t *testing.T, parents []string) {
	t.Helper()
	for _, p := range parents {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			entries, _ := os.ReadDir(p)
			var left []string
			for _, e := range entries {
				if e.IsDir() {
					left = append(left, e.Name())
				}
			}
			t.Fatalf("cgroup %s left after the commands (children %v): %v", p, left, err)
		}
	}
}

// TestCgroupV1PerCommand runs commands in cgroup v1 cgroups of their own
// wherever this process may make them and there is no cgroup v2 with the
// controllers: each command is in a memory, pids and cpu cgroup with the
// limits set before it runs anything, its processes, also those that
// left its session, end with it, and its cgroups are removed.
func TestCgroupV1PerCommand(t *testing.T) {
	before, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, iso := range []string{IsolationNone, IsolationBwrap} {
		t.Run(iso, func(t *testing.T) {
			l, parents := newV1Local(t, iso, Limits{MemoryMB: 64, MaxProcs: 32}, 0.5)
			if s := l.Cgroups(); !strings.HasPrefix(s, "cgroup v1 fallback: memory under ") ||
				!strings.Contains(s, "memory.limit_in_bytes=67108864") || !strings.Contains(s, "pids.max=32") ||
				!strings.Contains(s, "cpu.cfs_quota_us=50000") {
				t.Fatalf("Cgroups() = %q", s)
			}
			sb, err := l.Start(t.Context(), "cg", Spec{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sb.Close(t.Context()) })
			// The limits as the command sees them, read from the cgroup
			// it is in (under bwrap its cgroup namespace hides the path).
			cmd := `setsid sleep 1000 & echo $!; cat /proc/self/cgroup`
			res, err := sb.Exec(t.Context(), cmd, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if res.ReturnCode != 0 {
				t.Fatalf("%s = %+v", cmd, res)
			}
			for i, h := range l.cg.v1 {
				path := cgroupV1Path(res.Output, h.controller)
				want := "/" + filepath.Base(parents[i]) + "/cg+"
				if !strings.Contains(path, want) && !(iso == IsolationBwrap && path == "/") {
					t.Fatalf("command's %s cgroup: %q, want one under %s", h.controller, path, parents[i])
				}
			}
			wantNoCgroups(t, parents)
			if iso == IsolationNone {
				pid, err := strconv.Atoi(strings.SplitN(res.Output, "\n", 2)[0])
				if err != nil {
					t.Fatalf("output %q", res.Output)
				}
				if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && !strings.Contains(string(st), ") Z ") {
					t.Fatalf("the command's session-leaving child %d outlived it: %s", pid, st)
				}
			}
			// An OOM kills the whole command, not only the largest
			// process, as memory.oom.group does in cgroup v2.
			cmd = "sleep 1000 & head -c 1G /dev/zero | tail -c 512M | wc -c; wait"
			res, err = sb.Exec(t.Context(), cmd, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if res.Limit != LimitMemory || res.ReturnCode == 0 || res.TimedOut {
				t.Fatalf("%s = %+v, want it stopped by the memory limit", cmd, res)
			}
			wantNoCgroups(t, parents)
			cmd = "for i in $(seq 64); do sleep 1 & done; wait"
			res, err = sb.Exec(t.Context(), cmd, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if res.Limit != LimitProcs || res.TimedOut {
				t.Fatalf("%s = %+v, want it stopped by the process limit", cmd, res)
			}
			wantNoCgroups(t, parents)
		})
	}
	after, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(before) {
		t.Fatalf("the test process moved cgroups: %q, was %q", after, before)
	}
}

// Commands of many sandboxes at once each get cgroups of their own, made
// and removed concurrently under shared parents.
func TestCgroupV1Concurrent(t *testing.T) {
	l, parents := newV1Local(t, IsolationNone, Limits{MemoryMB: 64, MaxProcs: 32}, 0)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	errs := make(chan error, 8)
	for i := range cap(errs) {
		go func() {
			sb, err := l.Start(ctx, fmt.Sprintf("c%d", i), Spec{})
			if err != nil {
				errs <- err
				return
			}
			defer func() { _ = sb.Close(context.Background()) }()
			for range 5 {
				res, err := sb.Exec(ctx, "grep -c actloop- /proc/self/cgroup", time.Minute)
				if err != nil {
					errs <- err
					return
				}
				if res.Output != "2\n" {
					errs <- fmt.Errorf("command's cgroups: %q, want 2 under actloop-", res.Output)
					return
				}
			}
			errs <- nil
		}()
	}
	var failed []string
	for range cap(errs) {
		if err := <-errs; err != nil {
			failed = append(failed, err.Error())
		}
	}
	slices.Sort(failed)
	if len(failed) > 0 {
		t.Fatal(strings.Join(failed, "\n"))
	}
	wantNoCgroups(t, parents)
}
