package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"sync/atomic"
	"syscall"
	"time"
)

// runOpts describes one process to run in a sandbox.
type runOpts struct {
	dir    string // working directory: the sandbox dir
	tmpDir string // the sandbox's private /tmp under bwrap
	env    []string
	argv   []string
	stdin  io.Reader // nil means /dev/null
	stdout io.Writer
	stderr io.Writer // ignored when combined
	// combined sends stderr to stdout through one pipe, keeping their order.
	combined bool
	timeout  time.Duration // <= 0: none
	// id is the sandbox the process belongs to, naming its cgroup; "" runs
	// it outside any (the bwrap probe).
	id string
	// internal marks the git commands Local runs itself: exempt from the
	// file size limit.
	internal bool
	// watch measures the sandbox's disk and files while it runs and stops
	// it past a limit (DiskWatch; a tmpfs caps itself).
	watch bool
	// bind is a host directory mounted read-write at bwrapScratch under
	// bwrap ("" for none): the diff's scratch.
	bind string
	// forward mounts the forwarder (Local.forwarder) read-only at
	// /ForwarderName under bwrap: argv runs under it (see Serve).
	forward bool
}

// bwrapScratch is where the diff's scratch directory is mounted under bwrap.
const bwrapScratch = "/actloop-git"

// runResult is how a process ended.
type runResult struct {
	code     int // exit status, 128+N for signal N, -1 when killed by us
	timedOut bool
	duration time.Duration
	limit    string // the limit that stopped it, when known (LimitDisk, ...)
}

// pipeGrace bounds the wait for output after the process group was killed;
// only processes that escaped the group (setsid) can hold the pipes longer.
const pipeGrace = 2 * time.Second

var errTimeout = errors.New("command timed out")

// run starts o.argv (under bwrap when configured) in a new session, copies
// its output, and kills its whole process group when it exits, times out or
// ctx ends. A timeout is reported in the result; ctx ending is the error.
func (l *Local) run(ctx context.Context, o runOpts) (runResult, error) {
	if err := ctx.Err(); err != nil {
		return runResult{}, err
	}
	runCtx := ctx
	if o.timeout > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeoutCause(ctx, o.timeout, errTimeout)
		defer cancel()
	}
	// The disk watcher stops a command by cancelling with errDiskLimit.
	runCtx, stopRun := context.WithCancelCause(runCtx)
	defer stopRun(nil)
	argv := l.command(o)
	var extra []*os.File // closed once the process has started
	defer func() {
		for _, f := range extra {
			_ = f.Close()
		}
	}()
	var files []*os.File // cmd.ExtraFiles, from fd 3
	if l.bwrap != "" && l.seccomp != nil {
		r, err := seccompPipe(l.seccomp)
		if err != nil {
			return runResult{}, err
		}
		extra = append(extra, r)
		files = append(files, r) // fd 3, see command
	}
	var cg *commandCgroup
	var gateW *os.File // releases a cgroup v1 command, see gate
	defer func() {
		if gateW != nil {
			_ = gateW.Close()
		}
	}()
	if l.cg != nil && o.id != "" {
		cc, err := l.cg.forCommand(o.id)
		if err != nil {
			return runResult{}, err
		}
		cg = &cc
		defer l.cg.release(cc)
		if cc.v1() {
			r, w, err := os.Pipe()
			if err != nil {
				return runResult{}, fmt.Errorf("pipe: %w", err)
			}
			extra, gateW = append(extra, r), w
			files = append(files, r)
			argv = gate(2+len(files), argv)
		} else {
			extra = append(extra, os.NewFile(uintptr(cc.fd), cc.dirs[0]))
		}
	}
	cmd := exec.CommandContext(runCtx, argv[0], argv[1:]...)
	cmd.Dir = o.dir
	cmd.Env = o.env
	cmd.Stdin = o.stdin
	cmd.ExtraFiles = files
	cmd.SysProcAttr = l.sysProcAttr()
	if cg != nil && !cg.v1() {
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, cg.fd
	}
	var killed atomic.Bool
	cmd.Cancel = func() error {
		killed.Store(true)
		killGroup(cmd.Process.Pid)
		return nil
	}
	cmd.WaitDelay = pipeGrace

	// Own pipes rather than exec's: exec would wait for the pipes to close
	// before reporting the exit, and background children hold them open;
	// here the group is killed as soon as the leader exits.
	var readers, writers []*os.File
	var dests []io.Writer
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			_ = f.Close()
		}
	}
	pipe := func(dst io.Writer) (*os.File, error) {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("pipe: %w", err)
		}
		readers, writers, dests = append(readers, r), append(writers, w), append(dests, dst)
		return w, nil
	}
	w, err := pipe(o.stdout)
	if err != nil {
		return runResult{}, err
	}
	cmd.Stdout, cmd.Stderr = w, w
	if !o.combined {
		if cmd.Stderr, err = pipe(o.stderr); err != nil {
			closeAll(readers)
			closeAll(writers)
			return runResult{}, err
		}
	}

	start := time.Now()
	if err := cmd.Start(); err != nil {
		closeAll(readers)
		closeAll(writers)
		return runResult{}, fmt.Errorf("start %s: %w", argv[0], err)
	}
	closeAll(writers)
	closeAll(extra)
	extra = nil
	if gateW != nil {
		err := cg.enter(cmd.Process.Pid)
		if err == nil {
			// A failed write means it is gone already (killed by a
			// timeout): Wait tells how.
			_, _ = gateW.Write([]byte("go\n"))
		}
		_ = gateW.Close()
		gateW = nil
		if err != nil {
			killGroup(cmd.Process.Pid)
			_ = cmd.Wait()
			closeAll(readers)
			return runResult{}, err
		}
	}
	if lim := l.watchLimits(); o.watch && !o.internal && o.id != "" && lim.any() {
		watchCtx, stopWatch := context.WithCancel(runCtx)
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			watchDisk(watchCtx, lim, stopRun, o.dir, o.tmpDir)
		}()
		defer func() { stopWatch(); <-watched }()
	}
	copied := make(chan struct{}, len(readers))
	for i, r := range readers {
		go func() {
			_, _ = io.Copy(dests[i], r) // the writers are in-memory buffers
			copied <- struct{}{}
		}()
	}
	waitErr := cmd.Wait()
	res := runResult{duration: time.Since(start)}
	killGroup(cmd.Process.Pid)
	if cg != nil {
		// Also what left the group, so that nothing holds the pipes.
		cg.kill()
		res.limit = cg.limitHit()
	}
	drain(copied, readers)

	st := cmd.ProcessState
	if st == nil {
		return res, fmt.Errorf("wait %s: %w", argv[0], waitErr)
	}
	ws, _ := st.Sys().(syscall.WaitStatus)
	switch {
	case ws.Exited():
		res.code = ws.ExitStatus()
	case ws.Signaled():
		res.code = 128 + int(ws.Signal())
	default:
		res.code = -1
	}
	// killed alone is not enough: the process may have exited by itself
	// just before the deadline fired.
	if killed.Load() && ws.Signaled() {
		if err := ctx.Err(); err != nil {
			res.code = -1
			return res, err
		}
		if errors.Is(context.Cause(runCtx), errDiskLimit) {
			res.limit = LimitDisk // killed: 128+SIGKILL
			return res, nil
		}
		if errors.Is(context.Cause(runCtx), errFilesLimit) {
			res.limit = LimitFiles
			return res, nil
		}
		res.code = -1
		res.timedOut = errors.Is(context.Cause(runCtx), errTimeout)
	}
	return res, nil
}

// drain waits for the output copiers, closing the pipes after pipeGrace
// if something outside the killed group still holds them open.
func drain(copied <-chan struct{}, readers []*os.File) {
	timer := time.NewTimer(pipeGrace)
	defer timer.Stop()
	for n := 0; n < len(readers); {
		select {
		case <-copied:
			n++
		case <-timer.C:
			for _, r := range readers {
				_ = r.Close()
			}
		}
	}
	for _, r := range readers {
		_ = r.Close()
	}
}

func killGroup(pgid int) {
	// ESRCH (nothing left in the group) is the normal case.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// command returns the argv to execute: o.argv, behind the rlimit prelude,
// wrapped in bwrap when isolation is on. Under bwrap only the system
// directories are mounted (read-only), the sandbox dir at its own path
// (read-write) and the sandbox's private tmp dir as /tmp; Root, the other
// sandboxes, home directories and the host's /tmp are not there at all.
// --die-with-parent and the pid namespace make killing bwrap kill every
// process of the command, also those that left its process group.
func (l *Local) command(o runOpts) []string {
	argv := o.argv
	prelude := l.limits
	if o.internal {
		prelude = l.gitLimits
	}
	if prelude != "" {
		argv = append([]string{"bash", "-c", prelude, "actloop-limits"}, argv...)
	}
	if l.bwrap == "" {
		return argv
	}
	args := []string{l.bwrap,
		// --unshare-all shares nothing (network unless re-shared, ipc, pid,
		// uts, cgroup); the user namespace is required, not "try": it is
		// what makes the process limit count this sandbox alone.
		"--unshare-all", "--unshare-user",
		"--die-with-parent",
		"--cap-drop", "ALL",
		"--hostname", "sandbox",
	}
	if l.seccomp != nil {
		args = append(args, "--seccomp", "3") // cmd.ExtraFiles[0], see run
	}
	if l.disableUserns {
		args = append(args, "--disable-userns")
	}
	args = append(args, l.bwrapArgs...)
	if !slices.Contains(l.bwrapArgs, "--unshare-net") {
		args = append(args, "--share-net")
	}
	args = append(args,
		"--dev", "/dev",
		"--proc", "/proc",
		// /tmp before the sandbox dir: Root may lie under /tmp.
		"--bind", o.tmpDir, "/tmp",
		"--bind", o.dir, o.dir,
	)
	if o.bind != "" {
		args = append(args, "--bind", o.bind, bwrapScratch)
	}
	args = append(args, l.roBinds...)
	if o.forward {
		args = append(args, "--ro-bind", l.forwarder.path, "/"+ForwarderName)
	}
	args = append(args,
		"--chdir", o.dir,
		"--",
	)
	return append(args, argv...)
}

// sysProcAttr starts the command in a new session (the group can be
// killed as one, and no controlling terminal is inherited) and, under
// bwrap, as the sandbox user.
func (l *Local) sysProcAttr() *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setsid: true}
	if l.bwrap != "" && l.uid >= 0 {
		attr.Credential = &syscall.Credential{Uid: uint32(l.uid), Gid: uint32(l.uid), Groups: []uint32{}}
	}
	return attr
}
