package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/pkg/sandbox"
	"github.com/actloop/actloop/pkg/sandbox/sandboxtest"
)

// newBwrap returns a Local under bwrap with the given limits, skipping the
// test where bubblewrap does not work.
func newBwrap(t testing.TB, cfg sandbox.LocalConfig) *sandbox.Local {
	t.Helper()
	skipWithoutBwrap(t)
	cfg.Isolation = sandbox.IsolationBwrap
	return newLocal(t, cfg)
}

func TestBwrapNoNetwork(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	// The kernel completes the handshake from the backlog; nothing needs
	// to accept.
	connect := fmt.Sprintf("(exec 3<>/dev/tcp/127.0.0.1/%d) 2>/dev/null && echo connected || echo refused", port)

	sb := sandboxtest.Start(t, newBwrap(t, sandbox.LocalConfig{}), "no-net", sandbox.Spec{})
	sandboxtest.WantOutput(t, sb, connect, "refused\n")
	// Only a loopback device, and no route anywhere.
	sandboxtest.WantOutput(t, sb, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '", "lo\n")

	// The same command reaches the listener where the network is allowed,
	// so the refusal above is the sandbox's doing.
	open := sandboxtest.Start(t, newBwrap(t, sandbox.LocalConfig{Network: true}), "net", sandbox.Spec{})
	sandboxtest.WantOutput(t, open, connect, "connected\n")
}

func TestBwrapHidesOtherSandboxesAndHost(t *testing.T) {
	l := newBwrap(t, sandbox.LocalConfig{})
	other := sandboxtest.Start(t, l, "other", sandbox.Spec{})
	sandboxtest.WantOutput(t, other, "echo TOKEN-OTHER > s.txt && echo TOKEN-TMP > /tmp/s.txt", "")
	sb := sandboxtest.Start(t, l, "jailed", sandbox.Spec{})

	// A real host directory outside the sandbox's mounts, and a file in it.
	hostDir := t.TempDir()
	hostFile := filepath.Join(hostDir, "h.txt")
	writeFile(t, hostFile, "TOKEN-HOST\n", 0o644)
	if err := os.Chmod(hostDir, 0o755); err != nil { // readable to anyone on the host
		t.Fatal(err)
	}
	unreadable := []string{
		filepath.Join(dirOf(t, other), "s.txt"), // another sandbox's files
		hostFile,                                // the host outside the mounts
		"/root", "/home",                        // home directories
	}
	if home, err := os.UserHomeDir(); err == nil && home != "/" {
		unreadable = append(unreadable, home)
	}
	for _, p := range unreadable {
		res := sandboxtest.Exec(t, sb, "cat "+p+" || ls -A "+p)
		if res.ReturnCode == 0 || strings.Contains(res.Output, "TOKEN") {
			t.Errorf("sandbox reads %s: %+v", p, res)
		}
	}
	// Its /tmp is its own; Root shows this sandbox alone.
	sandboxtest.WantOutput(t, sb, "cat /tmp/s.txt 2>/dev/null || echo private", "private\n")
	sandboxtest.WantOutput(t, sb, "ls -A ..", "jailed\n")
	// The system is there, read-only.
	sandboxtest.WantOutput(t, sb, "test -x /usr/bin/env && echo system", "system\n")
	if res := sandboxtest.Exec(t, sb, "touch /usr/escaped /etc/escaped"); res.ReturnCode == 0 {
		t.Fatalf("writing to the system directories succeeded: %+v", res)
	}
	// The workspace is writable.
	sandboxtest.WantOutput(t, sb, "echo mine > mine.txt && cat mine.txt", "mine\n")
}

// procCount counts the processes in the sandbox's pid namespace, with
// builtins only.
const procCount = "p=(/proc/[0-9]*); echo ${#p[@]}"

func TestBwrapForkBombContained(t *testing.T) {
	const maxProcs = 32
	l := newBwrap(t, sandbox.LocalConfig{Limits: sandbox.Limits{MaxProcs: maxProcs}})
	sb := sandboxtest.Start(t, l, "forkbomb", sandbox.Spec{})

	// A classic fork bomb in the background while the foreground counts
	// the sandbox's processes with builtins only (it cannot fork either).
	// A count is a scan of /proc while processes come and go, so one scan
	// may count a process that exited and the one that replaced it: the
	// test takes the lowest count once the bomb has reached the limit, and
	// stops early if the count passes twice the limit (no limit at all).
	bomb := fmt.Sprintf(`:(){ :|:& };: ; max=0; low=1000000; at=0
for ((i = 0; i < 1000000 && at < 2000; i++)); do
  p=(/proc/[0-9]*); n=${#p[@]}; ((n > max)) && max=$n
  if ((n >= %d)); then ((at++)); ((n < low)) && low=$n; fi
  ((max > %d)) && break
done
echo "max=$max low=$low"; sleep 1000`, maxProcs-1, 2*maxProcs)
	res, err := sb.Exec(context.Background(), bomb, 10*time.Second)
	if err != nil || !res.TimedOut {
		t.Fatalf("fork bomb = %+v, %v; want it to time out", res, err)
	}
	var most, low int
	line := ""
	for _, l := range strings.Split(res.Output, "\n") {
		if strings.HasPrefix(l, "max=") {
			line = l
		}
	}
	_, err = fmt.Sscanf(line, "max=%d low=%d", &most, &low)
	// bwrap's init is in the pid namespace but outside the limit.
	if err != nil || most > 2*maxProcs || low > maxProcs+1 || low < maxProcs-1 {
		t.Fatalf("processes during the fork bomb: %q, want the limit %d (+1 for bwrap's init)", line, maxProcs)
	}
	// The sandbox stays usable, its processes are gone, and it closes.
	sandboxtest.WantOutput(t, sb, "echo alive", "alive\n")
	sandboxtest.WantOutput(t, sb, procCount, "2\n") // bwrap's init and bash
	if err := sb.Close(context.Background()); err != nil {
		t.Fatalf("Close after a fork bomb: %v", err)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

func TestBwrapMemoryHogContained(t *testing.T) {
	l := newBwrap(t, sandbox.LocalConfig{Limits: sandbox.Limits{MemoryMB: 128}})
	sb := sandboxtest.Start(t, l, "memhog", sandbox.Spec{})
	// tail buffers its whole input to print the last 512 MiB of it.
	res := sandboxtest.Exec(t, sb, "head -c 1G /dev/zero | tail -c 512M | wc -c")
	if res.TimedOut || res.ReturnCode == 0 && strings.TrimSpace(lastLine(res.Output)) == strconv.Itoa(512<<20) {
		t.Fatalf("memory hog = %+v, want it stopped by the memory limit", res)
	}
	// A cgroup names its limit; RLIMIT_AS makes the allocation fail.
	if res.Limit != sandbox.LimitMemory && !strings.Contains(res.Output, "memory exhausted") && !strings.Contains(res.Output, "Cannot allocate") {
		t.Errorf("memory hog output %q does not say memory ran out", res.Output)
	}
	sandboxtest.WantOutput(t, sb, "echo alive", "alive\n")
}

func TestBwrapCPUTimeLimit(t *testing.T) {
	l := newBwrap(t, sandbox.LocalConfig{Limits: sandbox.Limits{CPUTime: time.Second}})
	sb := sandboxtest.Start(t, l, "cpu", sandbox.Spec{})
	res := sandboxtest.Exec(t, sb, "while :; do :; done")
	// SIGXCPU at the soft limit, which ulimit makes the hard one too.
	if res.TimedOut || (res.ReturnCode != 128+24 && res.ReturnCode != 128+9) {
		t.Fatalf("busy loop = %+v, want death by SIGXCPU (152) or SIGKILL (137)", res)
	}
	sandboxtest.WantOutput(t, sb, "echo alive", "alive\n")
}

func TestBwrapTimeoutKillsGrandchildren(t *testing.T) {
	sb := sandboxtest.Start(t, newBwrap(t, sandbox.LocalConfig{}), "grandchildren", sandbox.Spec{})
	// A duration no other process uses, to find the sleeps in /proc.
	arg := fmt.Sprintf("%d.%06d", 10000+rand.IntN(10000), rand.IntN(1000000))
	// A grandchild re-parented to init, one in a new session (out of the
	// process group), and the foreground sleep that times out.
	cmd := fmt.Sprintf("(sleep %[1]s &); (setsid sleep %[1]s &); echo ready; sleep %[1]s", arg)
	execTimingOut(t, sb, cmd, func(res sandbox.ExecResult) bool { return res.Output == "ready\n" })
	waitFor(t, "every sleep "+arg+" to die", func() bool { return len(processesWithArgs("sleep", arg)) == 0 })
}

// processesWithArgs returns the live processes whose command line is args.
func processesWithArgs(args ...string) []int {
	want := []byte(strings.Join(args, "\x00") + "\x00")
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && bytes.Equal(b, want) && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestLocalRefusesUnisolated(t *testing.T) {
	tests := []struct {
		name string
		cfg  sandbox.LocalConfig
		path string // PATH while NewLocal runs; "" keeps the host's
	}{
		{"none", sandbox.LocalConfig{Isolation: sandbox.IsolationNone}, ""},
		{"auto without bwrap", sandbox.LocalConfig{Isolation: sandbox.IsolationAuto}, t.TempDir()},
		{"default without bwrap", sandbox.LocalConfig{}, t.TempDir()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.path != "" {
				t.Setenv("PATH", tt.path)
			}
			tt.cfg.Root = t.TempDir()
			_, err := sandbox.NewLocal(tt.cfg)
			if !errors.Is(err, sandbox.ErrUnisolated) || !strings.Contains(err.Error(), "UNISOLATED") {
				t.Fatalf("NewLocal: error %v, want ErrUnisolated", err)
			}
			tt.cfg.AllowUnisolated = true
			l, err := sandbox.NewLocal(tt.cfg)
			if err != nil {
				t.Fatalf("NewLocal with AllowUnisolated: %v", err)
			}
			if l.Isolation() != sandbox.IsolationNone {
				t.Fatalf("Isolation() = %q, want %q", l.Isolation(), sandbox.IsolationNone)
			}
			if tt.path != "" && l.BwrapError() == nil {
				t.Fatal("BwrapError() = nil, want why bubblewrap is not used")
			}
		})
	}
}

func TestLocalAutoPicksBwrap(t *testing.T) {
	skipWithoutBwrap(t)
	l, err := sandbox.NewLocal(sandbox.LocalConfig{Root: testkit.SearchableTempDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	if l.Isolation() != sandbox.IsolationBwrap || l.BwrapError() != nil {
		t.Fatalf("Isolation() = %q, BwrapError() = %v; want bwrap", l.Isolation(), l.BwrapError())
	}
}

// A read-only bind is there, read-only, wherever it lies: one under the
// host's /tmp is not hidden by the sandbox's own /tmp, which stays the
// sandbox's.
func TestBwrapReadOnlyBinds(t *testing.T) {
	dir := testkit.SearchableTempDir(t) // under the host's /tmp
	if err := os.WriteFile(filepath.Join(dir, "tool.sh"), []byte("echo from the tool\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sb := sandboxtest.Start(t, newBwrap(t, sandbox.LocalConfig{ReadOnlyBinds: []string{dir}}), "binds", sandbox.Spec{})
	sandboxtest.WantOutput(t, sb, "bash "+filepath.Join(dir, "tool.sh"), "from the tool\n")
	sandboxtest.WantOutput(t, sb, "touch "+filepath.Join(dir, "new")+" 2>/dev/null && echo wrote || echo refused", "refused\n")
	sandboxtest.WantOutput(t, sb, "echo mine > /tmp/own && cat /tmp/own", "mine\n")
}
