package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// cgroups puts each command a Local runs into a cgroup v2 of its own, a
// child of a directory under the worker's own cgroup (which must be
// delegated to the worker: writable, with the memory and pids controllers
// available): memory.max (and no swap) bounds the command's memory as a
// whole and memory.oom.group kills all of it on an OOM; pids.max bounds
// its processes; cpu.max its CPU share. The cgroup is killed and removed
// when the command ends.
//
// Where there is no such cgroup v2 but the cgroup v1 memory, pids and cpu
// hierarchies are writable at this process's cgroups, v1 is the fallback:
// the same limits in a cgroup per command in each (see newCgroupsV1); the
// v1 OOM killer kills one process, and a watch (oomWatch) the rest.
type cgroups struct {
	parent string // holds one cgroup per running command
	files  map[string]string
	next   atomic.Uint64
	v1     []cgroupV1 // set for cgroup v1; parent and files are unused then
}

// commandCgroup is the cgroup of one command: one directory in cgroup v2,
// with fd open on it for exec's CgroupFD; in cgroup v1 one per hierarchy
// and fd -1, the command entering them itself (see gate).
type commandCgroup struct {
	dirs []string
	fd   int
	oom  *oomWatch // cgroup v1 with a memory limit
}

// v1 reports whether cc is a cgroup v1 one.
func (cc commandCgroup) v1() bool { return cc.fd < 0 }

// cgroupFS is where the cgroup v2 hierarchy is found; a variable for tests.
var cgroupFS = struct{ procSelfCgroup, mountinfo string }{"/proc/self/cgroup", "/proc/self/mountinfo"}

// newCgroups sets up cgroups for the Local rooted at root, v2 first and
// else v1, or says why it cannot use either.
func newCgroups(root string, lim Limits, cpus float64) (*cgroups, error) {
	if lim.MemoryMB <= 0 && lim.MaxProcs <= 0 && cpus <= 0 {
		return nil, errors.New("no memory, process or CPU limit set")
	}
	c, err := newCgroupsV2(root, lim, cpus)
	if err == nil {
		return c, nil
	}
	c, errV1 := newCgroupsV1(root, lim, cpus)
	if errV1 == nil {
		return c, nil
	}
	return nil, fmt.Errorf("%w; and no cgroup v1 fallback: %w", err, errV1)
}

// newCgroupsV2 sets up cgroup v2 cgroups, or says why it cannot: no
// cgroup v2, no delegated subtree, or missing controllers.
func newCgroupsV2(root string, lim Limits, cpus float64) (*cgroups, error) {
	files := map[string]string{}
	if lim.MemoryMB > 0 {
		files["memory.max"] = strconv.FormatInt(int64(lim.MemoryMB)<<20, 10)
		files["memory.swap.max"] = "0"
		files["memory.oom.group"] = "1"
	}
	if lim.MaxProcs > 0 {
		files["pids.max"] = strconv.Itoa(lim.MaxProcs)
	}
	if cpus > 0 {
		const period = 100000
		files["cpu.max"] = fmt.Sprintf("%d %d", int64(cpus*period), period)
	}
	if len(files) == 0 {
		return nil, errors.New("no memory, process or CPU limit set")
	}
	own, nsRoot, err := ownCgroup()
	if err != nil {
		return nil, err
	}
	want := []string{"memory", "pids"}
	if cpus > 0 {
		want = append(want, "cpu")
	}
	if err := enableControllers(own, want, nsRoot); err != nil {
		return nil, err
	}
	parent := filepath.Join(own, parentCgroupName(root))
	if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("cgroup %s: %w", parent, err)
	}
	if err := enableControllers(parent, want, false); err != nil {
		return nil, err
	}
	c := &cgroups{parent: parent, files: files}
	// Leftovers of an earlier process with the same root.
	entries, _ := os.ReadDir(parent)
	for _, e := range entries {
		if e.IsDir() {
			removeCgroup(filepath.Join(parent, e.Name()))
		}
	}
	// Starting a process into a cgroup needs clone3; try it once.
	dir, fd, err := c.createV2("+probe")
	if err != nil {
		return nil, err
	}
	defer removeCgroup(dir)
	defer func() { _ = unix.Close(fd) }()
	cmd := exec.Command("true")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("cgroup %s: start a process in it: %w", parent, err)
	}
	return c, nil
}

// String says where the cgroups are and what they bound.
func (c *cgroups) String() string {
	if c.v1 != nil {
		var parts []string
		for _, h := range c.v1 {
			var set []string
			for _, kv := range h.files {
				if kv[0] != "memory.memsw.limit_in_bytes" && kv[0] != "cpu.cfs_period_us" {
					set = append(set, kv[0]+"="+kv[1])
				}
			}
			parts = append(parts, fmt.Sprintf("%s under %s (%s)", h.controller, h.parent, strings.Join(set, ", ")))
		}
		return "cgroup v1 fallback: " + strings.Join(parts, "; ")
	}
	var set []string
	for k, v := range c.files {
		if k != "memory.oom.group" && k != "memory.swap.max" {
			set = append(set, k+"="+v)
		}
	}
	slices.Sort(set)
	return fmt.Sprintf("cgroup v2 under %s (%s)", c.parent, strings.Join(set, ", "))
}

// ownCgroup returns the directory of this process's cgroup v2 and whether
// it is the root of the process's cgroup namespace (a container's own).
func ownCgroup() (string, bool, error) {
	dir, path, err := findOwnCgroup()
	return dir, path == "/", err
}

func findOwnCgroup() (string, string, error) {
	b, err := os.ReadFile(cgroupFS.procSelfCgroup)
	if err != nil {
		return "", "", fmt.Errorf("cgroup: %w", err)
	}
	path, ok := "", false
	for line := range strings.Lines(string(b)) {
		if p, found := strings.CutPrefix(strings.TrimSpace(line), "0::"); found {
			path, ok = p, true
		}
	}
	if !ok {
		return "", "", errors.New("cgroup: this process is in no cgroup v2 (the host uses cgroup v1 only)")
	}
	mi, err := os.ReadFile(cgroupFS.mountinfo)
	if err != nil {
		return "", "", fmt.Errorf("cgroup: %w", err)
	}
	for _, m := range cgroupMounts(mi) {
		if dir, ok := m.dir(path); ok && m.fstype == "cgroup2" {
			return dir, path, nil
		}
	}
	return "", "", fmt.Errorf("cgroup: no cgroup2 mount holds this process's cgroup %s (mount one, e.g. docker run --cgroupns=private)", path)
}

// parentCgroupName is the name of the cgroup, under the worker's own,
// that holds the commands of the sandboxes under root.
func parentCgroupName(root string) string {
	sum := sha256.Sum256([]byte(root))
	return "actloop-" + hex.EncodeToString(sum[:6])
}

// cgroupMount is a cgroup filesystem's mount, as /proc/self/mountinfo
// lists it.
type cgroupMount struct {
	fstype      string   // cgroup2, or cgroup (v1)
	superOpts   []string // its super options: a v1 mount's controllers among them
	root, point string   // the cgroup path it shows, and where
}

// cgroupMounts lists the cgroup and cgroup2 mounts of mountinfo.
func cgroupMounts(mountinfo []byte) []cgroupMount {
	var out []cgroupMount
	for line := range strings.Lines(string(mountinfo)) {
		// id parent major:minor root mountpoint options... - fstype source superoptions
		pre, post, found := strings.Cut(strings.TrimSuffix(line, "\n"), " - ")
		f, p := strings.Fields(pre), strings.Fields(post)
		if !found || len(f) < 5 || len(p) == 0 || p[0] != "cgroup" && p[0] != "cgroup2" {
			continue
		}
		m := cgroupMount{fstype: p[0], root: f[3], point: f[4]}
		if len(p) >= 3 {
			m.superOpts = strings.Split(p[2], ",")
		}
		out = append(out, m)
	}
	return out
}

// dir is the directory of the cgroup path (as /proc/self/cgroup names
// it) under m, when m shows it.
func (m cgroupMount) dir(path string) (string, bool) {
	rel, ok := strings.CutPrefix(path, m.root)
	if !ok || m.root != "/" && rel != "" && !strings.HasPrefix(rel, "/") {
		return "", false
	}
	return filepath.Join(m.point, rel), true
}

// enableControllers turns on the controllers want for dir's children. In
// cgroup v2 a cgroup with processes cannot do that; they must move to a
// leaf child first, as container runtimes do when nesting. That is done
// when the processes are this one alone (a systemd service with
// Delegate=yes) or move is set (dir is the root of the worker's cgroup
// namespace: its container's own), never to processes of others.
func enableControllers(dir string, want []string, move bool) error {
	avail, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("cgroup %s: %w", dir, err)
	}
	have := strings.Fields(string(avail))
	var add []string
	for _, c := range want {
		if !slices.Contains(have, c) {
			return fmt.Errorf("cgroup %s: controller %s is not available (available: %q)", dir, c, strings.TrimSpace(string(avail)))
		}
		add = append(add, "+"+c)
	}
	ctl := filepath.Join(dir, "cgroup.subtree_control")
	err = os.WriteFile(ctl, []byte(strings.Join(add, " ")), 0)
	if err != nil && errors.Is(err, unix.EBUSY) {
		procs, rerr := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if rerr != nil {
			return fmt.Errorf("cgroup %s: %w", dir, rerr)
		}
		pids := strings.Fields(string(procs))
		if !move && !slices.Equal(pids, []string{strconv.Itoa(os.Getpid())}) {
			return fmt.Errorf("cgroup %s holds other processes than this one (%d of them): give the worker a cgroup "+
				"of its own (a systemd unit with Delegate=yes, or a container with its own cgroup namespace)", dir, len(pids))
		}
		leaf := filepath.Join(dir, "actloop-worker")
		if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("cgroup %s: %w", leaf, err)
		}
		for _, pid := range pids {
			// A process that exited meanwhile is fine.
			if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(pid), 0); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("cgroup %s: move process %s: %w", leaf, pid, err)
			}
		}
		err = os.WriteFile(ctl, []byte(strings.Join(add, " ")), 0)
	}
	if err != nil {
		return fmt.Errorf("cgroup %s: enable %s (is the subtree delegated to this user and writable?): %w", dir, strings.Join(want, ", "), err)
	}
	return nil
}

// create makes the cgroup for one command, v2 or v1.
func (c *cgroups) create(name string) (commandCgroup, error) {
	if c.v1 != nil {
		return c.createV1(name)
	}
	dir, fd, err := c.createV2(name)
	if err != nil {
		return commandCgroup{}, err
	}
	return commandCgroup{dirs: []string{dir}, fd: fd}, nil
}

// createV2 makes the cgroup v2 for one command, with the limits set, and
// opens it for exec's CgroupFD.
func (c *cgroups) createV2(name string) (string, int, error) {
	dir := filepath.Join(c.parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", -1, fmt.Errorf("cgroup %s: %w", dir, err)
	}
	for file, v := range c.files {
		err := os.WriteFile(filepath.Join(dir, file), []byte(v), 0)
		if err != nil && !(file == "memory.swap.max" && errors.Is(err, fs.ErrNotExist)) { // no swap accounting
			removeCgroup(dir)
			return "", -1, fmt.Errorf("cgroup %s: set %s: %w", dir, file, err)
		}
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		removeCgroup(dir)
		return "", -1, fmt.Errorf("cgroup %s: %w", dir, err)
	}
	return dir, fd, nil
}

// forCommand makes the cgroup for a command of sandbox id; the caller
// closes its fd once the command started, and releases it.
func (c *cgroups) forCommand(id string) (commandCgroup, error) {
	return c.create(fmt.Sprintf("%s+%d", id, c.next.Add(1)))
}

// release kills what is left in the command's cgroups and removes them;
// best effort.
func (c *cgroups) release(cc commandCgroup) {
	if cc.oom != nil {
		cc.oom.stop()
	}
	for _, dir := range cc.dirs {
		removeCgroup(dir)
		if cc.v1() {
			// The parent goes with its last child; EBUSY while others
			// are left.
			_ = os.Remove(filepath.Dir(dir))
		}
	}
}

// kill kills every process in the command's cgroups.
func (cc commandCgroup) kill() {
	for _, dir := range cc.dirs {
		killCgroup(dir)
	}
}

// limitHit names the limit the command's processes ran into.
func (cc commandCgroup) limitHit() string {
	if cc.v1() {
		return limitHitV1(cc.dirs, cc.oom)
	}
	return limitHit(cc.dirs[0])
}

// limitHit names the limit the cgroup's processes ran into: an OOM kill
// (memory) or a refused fork (procs).
func limitHit(dir string) string {
	if eventCount(filepath.Join(dir, "memory.events"), "oom_kill") > 0 {
		return LimitMemory
	}
	if eventCount(filepath.Join(dir, "pids.events"), "max") > 0 {
		return LimitProcs
	}
	return ""
}

func eventCount(file, key string) int64 {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+" "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// cgroupRemoveWait bounds the wait for a killed cgroup to empty.
const cgroupRemoveWait = 5 * time.Second

// kill kills every process in the cgroup, also those that left the
// command's process group or session.
func killCgroup(dir string) {
	if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err == nil {
		return
	}
	// Before Linux 5.14: each process.
	procs, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	for p := range strings.FieldsSeq(string(procs)) {
		if pid, err := strconv.Atoi(p); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// removeCgroup kills what is left in the cgroup and removes it; best
// effort.
func removeCgroup(dir string) {
	deadline := time.Now().Add(cgroupRemoveWait)
	for {
		if err := os.Remove(dir); err == nil || errors.Is(err, fs.ErrNotExist) || time.Now().After(deadline) {
			return
		}
		killCgroup(dir)
		time.Sleep(10 * time.Millisecond)
	}
}
