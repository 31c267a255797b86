package sandbox

import (
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

	"golang.org/x/sys/unix"
)

// cgroupV1 is one cgroup v1 hierarchy (memory, pids or cpu) the commands'
// cgroups are made in, where the host has no usable cgroup v2: each
// command gets a child of parent in every hierarchy, with files set in
// order (memory.memsw.limit_in_bytes must follow memory.limit_in_bytes).
// parent exists only while it has children: these are hierarchies shared
// with the host, and the Local has no end at which to remove it.
type cgroupV1 struct {
	controller string
	parent     string
	files      [][2]string
}

// newCgroupsV1 sets up one cgroup v1 hierarchy per limit set, under this
// process's own cgroup in each, or says why it cannot.
func newCgroupsV1(root string, lim Limits, cpus float64) (*cgroups, error) {
	var want []string
	if lim.MemoryMB > 0 {
		want = append(want, "memory")
	}
	if lim.MaxProcs > 0 {
		want = append(want, "pids")
	}
	if cpus > 0 {
		want = append(want, "cpu")
	}
	if len(want) == 0 {
		return nil, errors.New("no memory, process or CPU limit set")
	}
	pc, err := os.ReadFile(cgroupFS.procSelfCgroup)
	if err != nil {
		return nil, fmt.Errorf("cgroup v1: %w", err)
	}
	mi, err := os.ReadFile(cgroupFS.mountinfo)
	if err != nil {
		return nil, fmt.Errorf("cgroup v1: %w", err)
	}
	dirs, err := parseCgroupV1(pc, mi, want)
	if err != nil {
		return nil, err
	}
	name := parentCgroupName(root)
	c := &cgroups{}
	for _, ctl := range want {
		h := cgroupV1{controller: ctl, parent: filepath.Join(dirs[ctl], name)}
		switch ctl {
		case "memory":
			b := strconv.FormatInt(int64(lim.MemoryMB)<<20, 10)
			h.files = [][2]string{{"memory.limit_in_bytes", b}, {"memory.memsw.limit_in_bytes", b}}
		case "pids":
			h.files = [][2]string{{"pids.max", strconv.Itoa(lim.MaxProcs)}}
		case "cpu":
			const period = 100000
			h.files = [][2]string{{"cpu.cfs_period_us", strconv.Itoa(period)}, {"cpu.cfs_quota_us", strconv.FormatInt(int64(cpus*period), 10)}}
		}
		c.v1 = append(c.v1, h)
	}
	// Leftovers of an earlier process with the same root.
	for _, h := range c.v1 {
		entries, _ := os.ReadDir(h.parent)
		for _, e := range entries {
			if e.IsDir() {
				removeCgroup(filepath.Join(h.parent, e.Name()))
			}
		}
		_ = os.Remove(h.parent)
	}
	// Try it once: make the cgroups, set the limits, start a process in.
	cc, err := c.create("+probe")
	if err != nil {
		return nil, err
	}
	defer c.release(cc)
	if err := probeGate(cc); err != nil {
		return nil, fmt.Errorf("cgroup v1: start a process in %s: %w", strings.Join(cc.dirs, ", "), err)
	}
	return c, nil
}

// probeGate runs true through gate into cc.
func probeGate(cc commandCgroup) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer func() { _ = w.Close() }()
	argv := gate(3, []string{"true"})
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.ExtraFiles = []*os.File{r}
	err = cmd.Start()
	_ = r.Close()
	if err != nil {
		return err
	}
	err = cc.enter(cmd.Process.Pid)
	if err == nil {
		_, err = w.Write([]byte("go\n"))
	}
	_ = w.Close()
	if err != nil {
		_ = cmd.Process.Kill()
	}
	return errors.Join(err, cmd.Wait())
}

// parseCgroupV1 finds, for each controller in want, the directory of this
// process's cgroup in that controller's cgroup v1 hierarchy, from the
// contents of /proc/self/cgroup and /proc/self/mountinfo.
func parseCgroupV1(procSelfCgroup, mountinfo []byte, want []string) (map[string]string, error) {
	paths := map[string]string{} // controller -> cgroup path
	for line := range strings.Lines(string(procSelfCgroup)) {
		// hierarchy-id:controller,list:path
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(f) != 3 || f[1] == "" {
			continue
		}
		for ctl := range strings.SplitSeq(f[1], ",") {
			paths[ctl] = f[2]
		}
	}
	dirs := map[string]string{}
	for _, m := range cgroupMounts(mountinfo) {
		if m.fstype != "cgroup" {
			continue
		}
		for _, opt := range m.superOpts {
			path, ok := paths[opt]
			if !ok || !slices.Contains(want, opt) || dirs[opt] != "" {
				continue
			}
			if dir, ok := m.dir(path); ok {
				dirs[opt] = dir
			}
		}
	}
	var missing []string
	for _, ctl := range want {
		if _, ok := paths[ctl]; !ok {
			missing = append(missing, ctl+" (this process is in no cgroup of it)")
		} else if dirs[ctl] == "" {
			missing = append(missing, ctl+" (no mount holds this process's cgroup "+paths[ctl]+")")
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("cgroup v1: controller %s", strings.Join(missing, ", "))
	}
	return dirs, nil
}

// createV1 makes the cgroups for one command, one per hierarchy, with the
// limits set.
func (c *cgroups) createV1(name string) (commandCgroup, error) {
	cc := commandCgroup{fd: -1}
	for _, h := range c.v1 {
		dir := filepath.Join(h.parent, name)
		if err := mkdirUnder(h.parent, dir); err != nil {
			c.release(cc)
			return commandCgroup{}, fmt.Errorf("cgroup v1 %s: %w", dir, err)
		}
		cc.dirs = append(cc.dirs, dir)
		for _, kv := range h.files {
			err := os.WriteFile(filepath.Join(dir, kv[0]), []byte(kv[1]), 0)
			if err != nil && !(kv[0] == "memory.memsw.limit_in_bytes" && errors.Is(err, fs.ErrNotExist)) { // no swap accounting
				c.release(cc)
				return commandCgroup{}, fmt.Errorf("cgroup v1 %s: set %s: %w", dir, kv[0], err)
			}
		}
		if h.controller == "memory" {
			// Every process of the command is in its memory cgroup.
			w, err := watchOOM(dir, func() { killCgroup(dir) })
			if err != nil {
				c.release(cc)
				return commandCgroup{}, err
			}
			cc.oom = w
		}
	}
	return cc, nil
}

// mkdirUnder makes dir in parent, making parent as needed, also when the
// last command of another goroutine removes parent meanwhile.
func mkdirUnder(parent, dir string) error {
	var err error
	for range 100 {
		if err = os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if err = os.Mkdir(dir, 0o755); !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return err
}

// oomWatch kills a command on its first OOM, as memory.oom.group does in
// cgroup v2: in v1 the OOM killer kills one process and the rest of the
// command would go on without it.
type oomWatch struct {
	ev    *os.File // eventfd signalled on an OOM in the cgroup
	done  chan struct{}
	fired atomic.Bool // the OOM killer may find its victim killed already and count no oom_kill
}

// watchOOM starts a watch that calls kill on an OOM in the memory cgroup
// dir (cgroup.event_control with memory.oom_control).
func watchOOM(dir string, kill func()) (*oomWatch, error) {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("cgroup v1 %s: eventfd: %w", dir, err)
	}
	ev := os.NewFile(uintptr(efd), "oom-event")
	ctl, err := os.Open(filepath.Join(dir, "memory.oom_control"))
	if err != nil {
		_ = ev.Close()
		return nil, fmt.Errorf("cgroup v1 %s: %w", dir, err)
	}
	defer func() { _ = ctl.Close() }()
	reg := fmt.Sprintf("%d %d", efd, ctl.Fd())
	if err := os.WriteFile(filepath.Join(dir, "cgroup.event_control"), []byte(reg), 0); err != nil {
		_ = ev.Close()
		return nil, fmt.Errorf("cgroup v1 %s: OOM notification: %w", dir, err)
	}
	w := &oomWatch{ev: ev, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		var b [8]byte
		if _, err := ev.Read(b[:]); err == nil {
			w.fired.Store(true)
			kill()
		}
	}()
	return w, nil
}

// stop ends the watch and waits for it.
func (w *oomWatch) stop() {
	_ = w.ev.Close()
	<-w.done
}

// enter moves pid into each of the command's cgroup v1 cgroups; its
// children inherit them. A pid gone meanwhile has nothing to contain.
func (cc commandCgroup) enter(pid int) error {
	for _, dir := range cc.dirs {
		err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
		if err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("cgroup v1 %s: add process %d: %w", dir, pid, err)
		}
	}
	return nil
}

// gate returns argv behind a shell that holds it until its pid is in its
// cgroups: the worker writes the pid, then a line to fd, and only then
// does argv run (exec keeps the pid, so everything it starts inherits the
// cgroups). EOF (the worker gone) runs nothing.
func gate(fd int, argv []string) []string {
	script := fmt.Sprintf(`read -r go <&%d || exit 125; exec "$@" %d<&-`, fd, fd)
	return append([]string{"/bin/sh", "-c", script, "actloop-cgroup"}, argv...)
}

// limitHitV1 names the limit a command's cgroup v1 cgroups ran into: an
// OOM (memory) or a refused fork (procs).
func limitHitV1(dirs []string, oom *oomWatch) string {
	if oom != nil && oom.fired.Load() {
		return LimitMemory
	}
	for _, dir := range dirs {
		if eventCount(filepath.Join(dir, "memory.oom_control"), "oom_kill") > 0 {
			return LimitMemory
		}
	}
	for _, dir := range dirs {
		if eventCount(filepath.Join(dir, "pids.events"), "max") > 0 {
			return LimitProcs
		}
	}
	return ""
}
