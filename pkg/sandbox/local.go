package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Local is a Backend that keeps each sandbox as the directory Root/<id> and
// runs its commands with bash on this host, optionally under bubblewrap.
//
// Besides the sandbox directories, Root holds "+meta" (each sandbox's
// environment, so Attach works after a restart), "+tmp" (each sandbox's
// private /tmp under bwrap, its TMPDIR otherwise) and "+trash" (directories
// being removed). '+' cannot occur in an id, so these never clash with one.
//
// Every command, including the git commands Local runs itself, runs in its
// own session and process group with stdin from /dev/null and a minimal
// environment (never the host's): PATH from the host, HOME and TMPDIR set to
// the sandbox's private temp dir, LANG=C.UTF-8, TERM=dumb, PAGER=GIT_PAGER=cat, then
// Spec.Env. When a command ends, times out or its ctx ends, the whole
// process group is killed, so background processes (a server started with
// `&`) do not outlive the command that started them.
//
// HOME is not the workspace, so what tools write under ~ (pip's cache,
// ~/.gitconfig) stays out of Diff.
type Local struct {
	root        string
	outputLimit int
	bwrap       string // absolute path of bwrap; "" without isolation
	path        string // PATH for commands, taken from the host

	mu   sync.Mutex
	live map[string]bool // ids started by this Local and not yet closed
}

var _ Backend = (*Local)(nil)

const (
	localHandlePrefix = "local:"
	metaDirName       = "+meta"
	tmpDirName        = "+tmp"
	trashDirName      = "+trash"
	defaultPath       = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	bwrapProbeTimeout = 30 * time.Second
)

// NewLocal creates Root and its bookkeeping directories, finishes removals
// an earlier process left half done, and, for bwrap isolation, checks that
// bubblewrap is installed and works here.
func NewLocal(cfg LocalConfig) (*Local, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("local sandbox config: %w", err)
	}
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("local sandbox root: %w", err)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("local sandbox root: %w", err)
	}
	// The real path: bwrap mounts and GIT_CEILING_DIRECTORIES want it.
	if root, err = filepath.EvalSymlinks(root); err != nil {
		return nil, fmt.Errorf("local sandbox root: %w", err)
	}
	l := &Local{
		root:        root,
		outputLimit: cfg.OutputLimit,
		path:        os.Getenv("PATH"),
		live:        make(map[string]bool),
	}
	if l.outputLimit == 0 {
		l.outputLimit = DefaultOutputLimit
	}
	if l.path == "" {
		l.path = defaultPath
	}
	for _, d := range []string{l.metaDir(), l.tmpRoot(), l.trashDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("local sandbox root: %w", err)
		}
	}
	if err := l.emptyTrash(); err != nil {
		return nil, err
	}
	if cfg.Isolation == IsolationBwrap {
		if err := l.initBwrap(); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// initBwrap finds bwrap and runs `true` under it with the options commands
// will get, because bwrap is often installed but unusable in containers.
func (l *Local) initBwrap() error {
	bin, err := exec.LookPath("bwrap")
	if err != nil {
		return fmt.Errorf("isolation %q: bubblewrap not found on PATH: %w", IsolationBwrap, err)
	}
	probe, err := os.MkdirTemp(l.tmpRoot(), "+probe-")
	if err != nil {
		return fmt.Errorf("isolation %q: %w", IsolationBwrap, err)
	}
	defer func() { _ = removeAll(probe) }()
	l.bwrap = bin
	ctx, cancel := context.WithTimeout(context.Background(), bwrapProbeTimeout)
	defer cancel()
	var out bytes.Buffer
	res, err := l.run(ctx, runOpts{
		dir: probe, tmpDir: probe, env: []string{"PATH=" + l.path},
		argv: []string{"true"}, stdout: &out, combined: true, timeout: bwrapProbeTimeout,
	})
	if err == nil && (res.timedOut || res.code != 0) {
		err = fmt.Errorf("exit code %d: %s", res.code, strings.TrimSpace(out.String()))
	}
	if err != nil {
		l.bwrap = ""
		return fmt.Errorf("isolation %q: bubblewrap does not work here: %w", IsolationBwrap, err)
	}
	return nil
}

// Start copies the workspace into Root/<id>, applies the patch and runs the
// setup commands. A directory left at Root/<id> by a Start or Close that
// never finished (possibly in an earlier process) is replaced; an id live in
// this Local fails with ErrExists. On failure nothing is left behind.
func (l *Local) Start(ctx context.Context, id string, spec Spec) (Sandbox, error) {
	if err := ValidateID(id); err != nil {
		return nil, err
	}
	if err := validateEnv(spec.Env); err != nil {
		return nil, fmt.Errorf("start sandbox %s: %w", id, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("start sandbox %s: %w", id, err)
	}
	l.mu.Lock()
	if l.live[id] {
		l.mu.Unlock()
		return nil, fmt.Errorf("start sandbox %s: %w", id, ErrExists)
	}
	l.live[id] = true
	l.mu.Unlock()

	sb, err := l.start(ctx, id, spec)
	if err != nil {
		l.release(id)
		return nil, err
	}
	return sb, nil
}

func (l *Local) start(ctx context.Context, id string, spec Spec) (_ *localSandbox, err error) {
	var src string
	if spec.Workspace != "" {
		if src, err = filepath.EvalSymlinks(spec.Workspace); err != nil {
			return nil, fmt.Errorf("start sandbox %s: workspace: %w", id, err)
		}
		if fi, err := os.Stat(src); err != nil {
			return nil, fmt.Errorf("start sandbox %s: workspace: %w", id, err)
		} else if !fi.IsDir() {
			return nil, fmt.Errorf("start sandbox %s: workspace %s is not a directory", id, spec.Workspace)
		}
	}
	if err := l.remove(id); err != nil {
		return nil, fmt.Errorf("start sandbox %s: remove leftover: %w", id, err)
	}
	defer func() {
		if err == nil {
			return
		}
		if rerr := l.remove(id); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}()
	// The metadata goes first: a directory at Root/<id> always has it.
	if err := l.writeMeta(localMeta{V: 1, ID: id, Env: spec.Env}); err != nil {
		return nil, fmt.Errorf("start sandbox %s: %w", id, err)
	}
	sb := l.newSandbox(id, spec.Env)
	if err := os.Mkdir(sb.tmpDir, 0o700); err != nil {
		return nil, fmt.Errorf("start sandbox %s: %w", id, err)
	}
	if err := os.Mkdir(sb.dir, 0o755); err != nil {
		return nil, fmt.Errorf("start sandbox %s: %w", id, err)
	}
	if src != "" {
		if err := copyTree(ctx, src, sb.dir, l.root); err != nil {
			return nil, fmt.Errorf("start sandbox %s: copy workspace: %w", id, err)
		}
	}
	if strings.TrimSpace(spec.Patch) != "" {
		if err := sb.apply(ctx, spec.Patch); err != nil {
			return nil, fmt.Errorf("start sandbox %s: %w", id, err)
		}
	}
	timeout := spec.SetupTimeout
	if timeout <= 0 {
		timeout = DefaultSetupTimeout
	}
	for i, cmd := range spec.Setup {
		res, err := sb.Exec(ctx, cmd, timeout)
		if err != nil {
			return nil, fmt.Errorf("start sandbox %s: setup command %d: %w", id, i, err)
		}
		if res.TimedOut || res.ReturnCode != 0 {
			return nil, fmt.Errorf("start sandbox %s: %w", id, &SetupError{Index: i, Command: cmd, Result: res})
		}
	}
	return sb, nil
}

// Attach returns the sandbox named by a handle from this Local or from an
// earlier Local with the same Root. It wraps ErrInvalidHandle when the
// handle does not name a sandbox under Root, ErrNotFound when it is gone.
func (l *Local) Attach(ctx context.Context, handle string) (Sandbox, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("attach sandbox: %w", err)
	}
	dir, ok := strings.CutPrefix(handle, localHandlePrefix)
	id := filepath.Base(dir)
	if !ok || !filepath.IsAbs(dir) || filepath.Clean(dir) != dir || filepath.Dir(dir) != l.root || ValidateID(id) != nil {
		return nil, fmt.Errorf("attach %q: %w (want %s<root %s>/<id>)", handle, ErrInvalidHandle, localHandlePrefix, l.root)
	}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("attach sandbox %s: %w", id, ErrNotFound)
	case err != nil:
		return nil, fmt.Errorf("attach sandbox %s: %w", id, err)
	case !fi.IsDir():
		return nil, fmt.Errorf("attach sandbox %s: %s is not a directory: %w", id, dir, ErrNotFound)
	}
	meta, err := l.readMeta(id)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("attach sandbox %s: metadata missing: %w", id, ErrNotFound)
	} else if err != nil {
		return nil, fmt.Errorf("attach sandbox %s: %w", id, err)
	}
	sb := l.newSandbox(id, meta.Env)
	// The private /tmp is the bwrap bind source; recreate it if it was lost.
	if err := os.MkdirAll(sb.tmpDir, 0o700); err != nil {
		return nil, fmt.Errorf("attach sandbox %s: %w", id, err)
	}
	return sb, nil
}

func (l *Local) release(id string) {
	l.mu.Lock()
	delete(l.live, id)
	l.mu.Unlock()
}

func (l *Local) dirOf(id string) string    { return filepath.Join(l.root, id) }
func (l *Local) metaDir() string           { return filepath.Join(l.root, metaDirName) }
func (l *Local) metaPath(id string) string { return filepath.Join(l.metaDir(), id+".json") }
func (l *Local) tmpRoot() string           { return filepath.Join(l.root, tmpDirName) }
func (l *Local) tmpOf(id string) string    { return filepath.Join(l.tmpRoot(), id) }
func (l *Local) trashDir() string          { return filepath.Join(l.root, trashDirName) }

// localMeta is what Attach needs to rebuild a sandbox after a restart.
type localMeta struct {
	V   int               `json:"v"`
	ID  string            `json:"id"`
	Env map[string]string `json:"env,omitempty"`
}

func (l *Local) writeMeta(m localMeta) error {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode metadata: %w", err)
	}
	// Env may hold secrets: owner-only, and renamed into place whole.
	tmp := l.metaPath(m.ID) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write metadata: %w", err)
	}
	if err := os.Rename(tmp, l.metaPath(m.ID)); err != nil {
		return fmt.Errorf("write metadata: %w", err)
	}
	return nil
}

func (l *Local) readMeta(id string) (localMeta, error) {
	var m localMeta
	b, err := os.ReadFile(l.metaPath(id))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("decode metadata %s: %w", l.metaPath(id), err)
	}
	return m, nil
}

// remove deletes everything that belongs to id; it is a no-op when nothing
// does. The directory is first renamed into +trash so that Attach fails at
// once even if removing a large tree fails half way.
func (l *Local) remove(id string) error {
	var errs []error
	trash, err := os.MkdirTemp(l.trashDir(), id+"-")
	if err != nil {
		return fmt.Errorf("remove sandbox %s: %w", id, err)
	}
	if err := os.Rename(l.dirOf(id), filepath.Join(trash, id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	for _, meta := range []string{l.metaPath(id), l.metaPath(id) + ".tmp"} {
		if err := os.Remove(meta); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := removeAll(l.tmpOf(id)); err != nil {
		errs = append(errs, err)
	}
	if err := removeAll(trash); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove sandbox %s: %w", id, err)
	}
	return nil
}

func (l *Local) emptyTrash() error {
	entries, err := os.ReadDir(l.trashDir())
	if err != nil {
		return fmt.Errorf("local sandbox trash: %w", err)
	}
	for _, e := range entries {
		if err := removeAll(filepath.Join(l.trashDir(), e.Name())); err != nil {
			return fmt.Errorf("local sandbox trash: %w", err)
		}
	}
	return nil
}

func validateEnv(env map[string]string) error {
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return fmt.Errorf("invalid environment variable %q", k)
		}
	}
	return nil
}
