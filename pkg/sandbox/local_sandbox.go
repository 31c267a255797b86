package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// localSandbox is one directory of a Local. Several values may point at the
// same directory (Start and Attach each make one); Close on any removes it.
type localSandbox struct {
	l      *Local
	id     string
	dir    string
	tmpDir string
	env    []string // for agent and setup commands
	gitEnv []string // for the git commands Local runs itself
	tmpfs  bool     // on a tmpfs of its own (DiskTmpfs): the kernel caps it

	mu       sync.Mutex
	closed   bool
	nextOp   uint64
	running  map[uint64]context.CancelCauseFunc
	inflight sync.WaitGroup
	serving  *serving // the handler it serves (Serve), or nil
}

var (
	_ Sandbox      = (*localSandbox)(nil)
	_ CappedDiffer = (*localSandbox)(nil)
)

// errClosed is the cancel cause of operations that Close interrupts.
var errClosed = errors.New("sandbox closed")

const gitTimeout = 10 * time.Minute

func (l *Local) newSandbox(id string, meta localMeta) *localSandbox {
	dir, tmpDir := l.dirOf(id), l.tmpOf(id)
	tmpfs := meta.Disk == DiskTmpfs
	if tmpfs {
		tmpDir = l.diskTmp(id)
	}
	base := map[string]string{
		"PATH": l.path,
		// HOME is the sandbox's private temp dir, not the workspace, so what
		// tools write under ~ stays out of the diff.
		"HOME":      tmpDir,
		"LANG":      "C.UTF-8",
		"TERM":      "dumb",
		"PAGER":     "cat",
		"GIT_PAGER": "cat",
		"TMPDIR":    tmpDir,
		// Without this, git in a non-git sandbox would find a repository
		// that happens to contain Root.
		"GIT_CEILING_DIRECTORIES": l.root,
	}
	if l.bwrap != "" {
		base["TMPDIR"], base["HOME"] = "/tmp", "/tmp"
	}
	git := map[string]string{
		"GIT_CONFIG_NOSYSTEM": "1",
		"GIT_CONFIG_GLOBAL":   os.DevNull,
		"GIT_TERMINAL_PROMPT": "0",
	}
	return &localSandbox{
		l:       l,
		id:      id,
		dir:     dir,
		tmpDir:  tmpDir,
		env:     envList(base, meta.Env),
		gitEnv:  envList(base, git),
		tmpfs:   tmpfs,
		running: make(map[uint64]context.CancelCauseFunc),
	}
}

// envList merges maps, later ones winning, into a sorted KEY=value list.
func envList(maps ...map[string]string) []string {
	merged := make(map[string]string)
	for _, m := range maps {
		for k, v := range m {
			merged[k] = v
		}
	}
	env := make([]string, 0, len(merged))
	for k, v := range merged {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	return env
}

func (s *localSandbox) Handle() string { return localHandlePrefix + s.dir }

// begin registers an operation so that Close can interrupt it and wait for
// it; the returned ctx is cancelled with errClosed by Close.
func (s *localSandbox) begin(ctx context.Context) (context.Context, func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, fmt.Errorf("sandbox %s: %w", s.id, ErrNotFound)
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("sandbox %s: %w", s.id, err)
	}
	if _, err := os.Stat(s.dir); errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("sandbox %s: %w", s.id, ErrNotFound)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	op := s.nextOp
	s.nextOp++
	s.running[op] = cancel
	s.inflight.Add(1)
	end := func() {
		s.mu.Lock()
		delete(s.running, op)
		s.mu.Unlock()
		cancel(nil)
		s.inflight.Done()
	}
	return ctx, end, nil
}

// opErr turns the error of an interrupted operation into the error to return.
func (s *localSandbox) opErr(ctx context.Context, err error) error {
	if errors.Is(context.Cause(ctx), errClosed) {
		return fmt.Errorf("sandbox %s closed: %w", s.id, ErrNotFound)
	}
	return fmt.Errorf("sandbox %s: %w", s.id, err)
}

func (s *localSandbox) Exec(ctx context.Context, cmd string, timeout time.Duration) (ExecResult, error) {
	ctx, end, err := s.begin(ctx)
	if err != nil {
		return ExecResult{}, err
	}
	defer end()
	fullBefore := s.l.fullOf(s)
	out := newHeadTail(s.l.outputLimit)
	argv, forward := s.servedArgv([]string{"bash", "-c", cmd})
	res, err := s.l.run(ctx, runOpts{
		dir: s.dir, tmpDir: s.tmpDir, env: s.env,
		argv:   argv,
		stdout: out, combined: true, timeout: timeout, id: s.id,
		watch: !s.tmpfs, forward: forward,
	})
	r := ExecResult{
		ReturnCode: res.code,
		TimedOut:   res.timedOut,
		Duration:   res.duration,
		Limit:      res.limit,
	}
	r.Output, r.Truncated, r.Replaced = out.output()
	if r.Limit == "" && !r.TimedOut {
		r.Limit = limitFromExit(r.ReturnCode)
	}
	if r.Limit == "" {
		// The command filled the tmpfs to a cap: the kernel refused what
		// went past it (ENOSPC), which did not stop the command. (A
		// sandbox full before the command is not its doing: its writes
		// fail, and it reports so itself.)
		if full := s.l.fullOf(s); full != fullBefore {
			r.Limit = full
		}
	}
	if note := s.l.limitNote(r.Limit); note != "" {
		r.Output = appendLine(r.Output, note)
	}
	if err != nil {
		return r, s.opErr(ctx, err)
	}
	return r, nil
}

// Diff stages everything into a throwaway copy of the index, so the agent's
// own index (what `git status` shows it) is left alone, and diffs that
// against HEAD with options that repository config cannot change.
func (s *localSandbox) Diff(ctx context.Context) (string, error) {
	d, _, err := s.diff(ctx, -1)
	return d, err
}

// DiffCapped is Diff read up to max+1 bytes: git is killed as soon as the
// diff passes max, so a huge file in the sandbox costs the worker no more
// than max bytes.
func (s *localSandbox) DiffCapped(ctx context.Context, max int) (string, bool, error) {
	if max <= 0 {
		return "", false, fmt.Errorf("diff sandbox %s: cap %d is not positive", s.id, max)
	}
	return s.diff(ctx, max)
}

// diff takes the diff, capped at max bytes unless max < 0.
func (s *localSandbox) diff(ctx context.Context, max int) (string, bool, error) {
	ctx, end, err := s.begin(ctx)
	if err != nil {
		return "", false, err
	}
	defer end()
	gitDir := filepath.Join(s.dir, ".git")
	fi, err := os.Lstat(gitDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("diff sandbox %s: %w", s.id, err)
	case !fi.IsDir():
		return "", false, fmt.Errorf("diff sandbox %s: .git is not a directory (linked worktrees and submodules are not supported)", s.id)
	}
	// The index and the objects git add writes go to a scratch dir outside
	// the sandbox: a sandbox full to its disk or file limit still has its
	// diff taken, and the agent's own index and object store are left
	// alone.
	scratch, err := os.MkdirTemp(s.l.gitScratchRoot(), s.id+"-")
	if err != nil {
		return "", false, fmt.Errorf("diff sandbox %s: %w", s.id, err)
	}
	defer func() { _ = removeAll(scratch) }()
	index, err := tempIndex(gitDir, scratch)
	if err != nil {
		return "", false, fmt.Errorf("diff sandbox %s: %w", s.id, err)
	}
	objects := filepath.Join(scratch, "objects")
	if err := os.Mkdir(objects, 0o700); err != nil {
		return "", false, fmt.Errorf("diff sandbox %s: %w", s.id, err)
	}
	if err := s.l.own(scratch); err != nil {
		return "", false, fmt.Errorf("diff sandbox %s: %w", s.id, err)
	}
	// Under bwrap the scratch is mounted at a fixed path of its own, not
	// at its host path: that may lie under /tmp (as Root by default does),
	// and bwrap would make its mount point in the sandbox's /tmp, which
	// may be full.
	at := scratch
	if s.l.bwrap != "" {
		at = bwrapScratch
		index, objects = filepath.Join(at, filepath.Base(index)), filepath.Join(at, "objects")
	}
	env := append(slices.Clone(s.gitEnv), "GIT_INDEX_FILE="+index, "GIT_OBJECT_DIRECTORY="+objects,
		"GIT_ALTERNATE_OBJECT_DIRECTORIES="+filepath.Join(gitDir, "objects"))

	if _, err := s.git(ctx, env, scratch, nil, "add", "--all"); err != nil {
		return "", false, s.diffErr(ctx, err)
	}
	args := []string{"diff", "--cached", "--binary", "--no-color", "--no-ext-diff", "--no-textconv",
		"--src-prefix=a/", "--dst-prefix=b/"}
	// An unborn HEAD (no commit yet): diff against the empty tree.
	if _, err := s.git(ctx, env, scratch, nil, "rev-parse", "--verify", "--quiet", "HEAD^{commit}"); err == nil {
		args = append(args, "HEAD")
	} else if ctx.Err() != nil {
		return "", false, s.opErr(ctx, ctx.Err())
	}
	if max < 0 {
		out, err := s.git(ctx, env, scratch, nil, args...)
		if err != nil {
			return "", false, s.diffErr(ctx, err)
		}
		return out, false, nil
	}
	gctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	w := &capWriter{max: max, full: func() { stop(errDiffFull) }}
	err = s.gitTo(gctx, env, scratch, nil, w, args...)
	if w.over {
		if err := ctx.Err(); err != nil {
			return "", false, s.opErr(ctx, err)
		}
		return string(w.buf), true, nil
	}
	if err != nil {
		return "", false, s.diffErr(ctx, err)
	}
	return string(w.buf), false, nil
}

// errDiffFull stops git once the diff has passed its cap.
var errDiffFull = errors.New("diff over its cap")

// capWriter keeps the first max bytes written to it; at the first byte
// past them it calls full and fails that write and every later one.
type capWriter struct {
	buf  []byte
	max  int
	over bool
	full func()
}

func (w *capWriter) Write(p []byte) (int, error) {
	if w.over {
		return 0, errDiffFull
	}
	if room := w.max - len(w.buf); len(p) > room {
		w.buf = append(w.buf, p[:room]...)
		w.over = true
		w.full()
		return room, errDiffFull
	}
	w.buf = append(w.buf, p...)
	return len(p), nil
}

func (s *localSandbox) diffErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return s.opErr(ctx, ctx.Err())
	}
	return fmt.Errorf("diff sandbox %s: %w", s.id, err)
}

// tempIndex returns the path of a copy of gitDir's index in dir; starting
// from the real index lets git reuse its cached file stats instead of
// hashing every file.
func tempIndex(gitDir, dir string) (string, error) {
	f, err := os.CreateTemp(dir, "actloop-diff-*.index")
	if err != nil {
		return "", fmt.Errorf("temporary index: %w", err)
	}
	path := f.Name()
	src, err := os.Open(filepath.Join(gitDir, "index"))
	if errors.Is(err, fs.ErrNotExist) {
		// No index yet; git creates one, but not over an empty file.
		_ = f.Close()
		return path, os.Remove(path)
	}
	if err == nil {
		_, err = io.Copy(f, src)
		_ = src.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return "", fmt.Errorf("temporary index: %w", err)
	}
	return path, nil
}

// apply applies a git-format patch to the working tree.
func (s *localSandbox) apply(ctx context.Context, patch string) error {
	ctx, end, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer end()
	_, err = s.git(ctx, s.gitEnv, "", strings.NewReader(patch), "apply", "--whitespace=nowarn")
	if ge := (*gitError)(nil); errors.As(err, &ge) {
		return fmt.Errorf("%w: %v", ErrPatch, err)
	}
	if err != nil {
		return s.opErr(ctx, err)
	}
	return nil
}

// gitError is a git command that ran and failed.
type gitError struct {
	args   []string
	code   int
	stderr string
}

func (e *gitError) Error() string {
	return fmt.Sprintf("git %s exited with code %d: %s", e.args[0], e.code, strings.TrimSpace(e.stderr))
}

// git runs a git command in the sandbox (under the same isolation as the
// agent's commands: repository config and .gitattributes in the sandbox are
// the agent's to write) and returns its stdout. bind, when not "", is a
// directory outside the sandbox it may write (the diff's scratch).
func (s *localSandbox) git(ctx context.Context, env []string, bind string, stdin io.Reader, args ...string) (string, error) {
	var stdout bytes.Buffer
	if err := s.gitTo(ctx, env, bind, stdin, &stdout, args...); err != nil {
		return "", err
	}
	return stdout.String(), nil
}

// gitTo is git writing its stdout to stdout.
func (s *localSandbox) gitTo(ctx context.Context, env []string, bind string, stdin io.Reader, stdout io.Writer, args ...string) error {
	argv := append([]string{"git",
		"-c", "user.name=actloop", "-c", "user.email=actloop@localhost",
		"-c", "safe.directory=*", "-c", "core.fsmonitor=false", "-c", "core.pager=cat",
	}, args...)
	timeout := time.Duration(0)
	if _, ok := ctx.Deadline(); !ok {
		timeout = gitTimeout
	}
	stderr := newHeadTail(4000)
	res, err := s.l.run(ctx, runOpts{
		dir: s.dir, tmpDir: s.tmpDir, env: env, argv: argv, stdin: stdin,
		stdout: stdout, stderr: stderr, timeout: timeout, id: s.id, internal: true, bind: bind,
	})
	if err != nil {
		return err
	}
	if res.timedOut {
		return fmt.Errorf("git %s timed out after %s", args[0], timeout)
	}
	if res.code != 0 {
		return &gitError{args: args, code: res.code, stderr: stderr.String()}
	}
	return nil
}

// Close interrupts running commands, waits for them, and removes the
// sandbox's directory, metadata and private /tmp.
func (s *localSandbox) Close(context.Context) error {
	s.mu.Lock()
	s.closed = true
	for _, cancel := range s.running {
		cancel(errClosed)
	}
	s.mu.Unlock()
	s.inflight.Wait()
	s.stopServing()
	err := s.l.remove(s.id)
	s.l.release(s.id)
	return err
}
