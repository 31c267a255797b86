package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
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
}

// runResult is how a process ended.
type runResult struct {
	code     int // exit status, 128+N for signal N, -1 when killed by us
	timedOut bool
	duration time.Duration
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
	argv := l.command(o)
	cmd := exec.CommandContext(runCtx, argv[0], argv[1:]...)
	cmd.Dir = o.dir
	cmd.Env = o.env
	cmd.Stdin = o.stdin
	// A new session: the group can be killed as one, and no controlling
	// terminal is inherited.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
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
		res.code = -1
		if err := ctx.Err(); err != nil {
			return res, err
		}
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

// command returns the argv to execute: o.argv, wrapped in bwrap when
// isolation is on. Under bwrap the host is mounted read-only, Root is
// replaced by an empty tmpfs (hiding other sandboxes and their metadata)
// into which only this sandbox is bound read-write, and the sandbox's
// private tmp dir becomes /tmp.
func (l *Local) command(o runOpts) []string {
	if l.bwrap == "" {
		return o.argv
	}
	args := []string{l.bwrap,
		"--ro-bind", "/", "/",
		"--dev", "/dev",
		"--proc", "/proc",
		// /tmp before Root: Root may lie under /tmp.
		"--bind", o.tmpDir, "/tmp",
		"--tmpfs", l.root,
		"--bind", o.dir, o.dir,
		"--unshare-net",
		"--unshare-pid",
		"--die-with-parent",
		"--chdir", o.dir,
		"--",
	}
	return append(args, o.argv...)
}
