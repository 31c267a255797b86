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
// private /tmp under bwrap, its TMPDIR otherwise), "+disk" (each sandbox's
// tmpfs under DiskTmpfs, holding its working copy, bound at Root/<id>, and
// its private /tmp instead), "+git" (scratch object stores for the diff)
// and "+trash" (directories being removed). '+' cannot occur in an id, so
// these never clash with one.
//
// Every command, including the git commands Local runs itself, runs in its
// own session and process group with stdin from /dev/null and a minimal
// environment (never the host's): PATH from the host, HOME and TMPDIR set to
// the sandbox's private temp dir, LANG=C.UTF-8, TERM=dumb, PAGER=GIT_PAGER=cat, then
// Spec.Env. When a command ends, times out or its ctx ends, the whole
// process group is killed, so background processes (a server started with
// `&`) do not outlive the command that started them; under bwrap the pid
// namespace ends with the command, taking along processes that left the
// group. See LocalConfig and IsolationBwrap for what bwrap isolates, and
// Limits for the rlimits set before each command.
//
// HOME is not the workspace, so what tools write under ~ (pip's cache,
// ~/.gitconfig) stays out of Diff.
type Local struct {
	root          string
	outputLimit   int
	isolation     string // IsolationBwrap or IsolationNone, after IsolationAuto is resolved
	bwrapErr      error  // why bubblewrap is not used under IsolationAuto
	bwrap         string // absolute path of bwrap; "" without isolation
	bwrapArgs     []string
	roBinds       []string // bwrap arguments of LocalConfig.ReadOnlyBinds
	limits        string   // the shell prelude that sets the rlimits; "" for none
	gitLimits     string   // the same without the file size limit, for Local's own git commands
	seccomp       []byte   // the compiled seccomp filter bwrap loads; nil without bwrap
	disableUserns bool     // bwrap has --disable-userns (0.8.0 and later)
	diskBytes     int64    // Limits.DiskMB in bytes; 0: no disk limit
	disk          string   // DiskTmpfs or DiskWatch, after DiskAuto is resolved
	diskErr       error    // why DiskAuto did not pick DiskTmpfs
	cg            *cgroups
	cgErr         error     // why no cgroup is used
	limitsCfg     Limits    // for the notes that name a limit
	uid           int       // the user commands run as under bwrap; -1: the worker's own
	path          string    // PATH for commands, taken from the host
	network       bool      // bwrap sandboxes share the host's network (LocalConfig.Network)
	forwarder     forwarder // mounted in a sandbox that serves (see Serve)

	mu   sync.Mutex
	live map[string]bool // ids started by this Local and not yet closed
}

var (
	_ Backend = (*Local)(nil)
	_ Server  = (*localSandbox)(nil)
)

const (
	localHandlePrefix = "local:"
	metaDirName       = "+meta"
	tmpDirName        = "+tmp"
	trashDirName      = "+trash"
	gitDirName        = "+git"
	binDirName        = "+bin"
	defaultPath       = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	bwrapProbeTimeout = 30 * time.Second
)

// NewLocal creates Root and its bookkeeping directories, finishes removals
// an earlier process left half done, and resolves the isolation: for
// IsolationBwrap and IsolationAuto it checks that bubblewrap is installed
// and works here. Running commands unisolated (IsolationNone, or
// IsolationAuto without a working bubblewrap) fails with ErrUnisolated
// unless cfg.AllowUnisolated is set; Isolation tells which mode was chosen.
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
		isolation:   IsolationNone,
		uid:         -1,
		path:        os.Getenv("PATH"),
		live:        make(map[string]bool),
	}
	if l.outputLimit == 0 {
		l.outputLimit = DefaultOutputLimit
	}
	if l.path == "" {
		l.path = defaultPath
	}
	for _, d := range []string{l.metaDir(), l.tmpRoot(), l.trashDir(), l.gitScratchRoot()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("local sandbox root: %w", err)
		}
	}
	if err := l.emptyTrash(); err != nil {
		return nil, err
	}
	switch cfg.Isolation {
	case IsolationBwrap:
		if err := l.initBwrap(cfg); err != nil {
			return nil, err
		}
	case IsolationNone:
		if !cfg.AllowUnisolated {
			return nil, fmt.Errorf("isolation %q: %w", IsolationNone, ErrUnisolated)
		}
	default: // IsolationAuto
		if err := l.initBwrap(cfg); err != nil {
			if !cfg.AllowUnisolated {
				return nil, fmt.Errorf("isolation %q: %w: %w", IsolationAuto, ErrUnisolated, err)
			}
			l.bwrapErr = err
		}
	}
	// The process limit only under bwrap: in the sandbox's own user
	// namespace RLIMIT_NPROC counts the sandbox's processes; on the host it
	// would count every process of the worker's user.
	nproc := cfg.Limits.MaxProcs
	if l.bwrap == "" {
		nproc = 0
	}
	l.diskBytes = int64(cfg.Limits.DiskMB) << 20
	l.limitsCfg = cfg.Limits
	// A cgroup bounds memory and processes per command, and better: its
	// memory.max counts memory used, where RLIMIT_AS counts address space
	// reserved (which breaks runtimes that reserve much and use little).
	rl := cfg.Limits
	if l.cg, l.cgErr = newCgroups(root, cfg.Limits, cfg.CPUs); l.cg != nil {
		rl.MemoryMB, nproc = 0, 0
	}
	l.limits = limitPrelude(rl, nproc, true)
	l.gitLimits = limitPrelude(rl, nproc, false)
	if err := l.initDisk(cfg); err != nil {
		return nil, err
	}
	return l, nil
}

// Disk returns how the disk and file limits are enforced: DiskTmpfs (by
// the kernel) or DiskWatch (measured while a command runs).
func (l *Local) Disk() string { return l.disk }

// DiskError says why DiskAuto measures instead of using a tmpfs; nil when
// it uses one, or was not asked to (DiskWatch, or no disk limit).
func (l *Local) DiskError() error { return l.diskErr }

// Isolation returns the isolation in force: IsolationBwrap or
// IsolationNone.
func (l *Local) Isolation() string { return l.isolation }

// Cgroups says where each command's cgroup is made (cgroup v2, or the
// cgroup v1 fallback and its controllers) and what it bounds (memory as a
// whole, processes, CPU share); "" when no cgroup is used,
// and then CgroupError says why and only the per-process rlimits apply.
func (l *Local) Cgroups() string {
	if l.cg == nil {
		return ""
	}
	return l.cg.String()
}

// CgroupError says why commands run in no cgroup; nil when they do.
func (l *Local) CgroupError() error { return l.cgErr }

// Seccomp reports whether commands run under the seccomp filter (bwrap
// only; see DeniedSyscalls).
func (l *Local) Seccomp() bool { return l.seccomp != nil }

// BwrapError says why IsolationAuto fell back to IsolationNone; nil when
// it did not.
func (l *Local) BwrapError() error { return l.bwrapErr }

// initBwrap finds bwrap, builds the mount arguments and runs `true` under
// it with the options commands will get, because bwrap is often installed
// but unusable in containers.
func (l *Local) initBwrap(cfg LocalConfig) error {
	bin, err := exec.LookPath("bwrap")
	if err != nil {
		return fmt.Errorf("isolation %q: bubblewrap not found on PATH: %w", IsolationBwrap, err)
	}
	args, err := bwrapSystemArgs()
	if err != nil {
		return fmt.Errorf("isolation %q: %w", IsolationBwrap, err)
	}
	binds, err := roBindArgs(cfg.ReadOnlyBinds)
	if err != nil {
		return fmt.Errorf("isolation %q: %w", IsolationBwrap, err)
	}
	if !cfg.Network {
		args = append(args, "--unshare-net")
		l.forwarder.path = filepath.Join(l.root, binDirName, ForwarderName)
	}
	l.network = cfg.Network
	uid := -1
	if os.Geteuid() == 0 {
		uid = cfg.SandboxUID
		if uid == 0 {
			uid = DefaultSandboxUID
		}
	}
	// Without a filter for this architecture bwrap still isolates; Seccomp
	// says so.
	filter, _ := seccompFilter()
	help, _ := exec.Command(bin, "--help").CombinedOutput()
	probe, err := os.MkdirTemp(l.tmpRoot(), "+probe-")
	if err != nil {
		return fmt.Errorf("isolation %q: %w", IsolationBwrap, err)
	}
	defer func() { _ = removeAll(probe) }()
	l.bwrap, l.bwrapArgs, l.roBinds, l.uid = bin, args, binds, uid
	l.seccomp, l.disableUserns = filter, bytes.Contains(help, []byte("--disable-userns"))
	if err := l.own(probe); err != nil {
		return fmt.Errorf("isolation %q: %w", IsolationBwrap, err)
	}
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
	if err != nil && uid >= 0 {
		err = fmt.Errorf("%w (commands run as uid %d: every parent of %s must be searchable by it)", err, uid, l.root)
	}
	if err != nil {
		l.bwrap, l.bwrapArgs, l.roBinds, l.uid, l.seccomp, l.disableUserns = "", nil, nil, -1, nil, false
		return fmt.Errorf("isolation %q: bubblewrap does not work here: %w", IsolationBwrap, err)
	}
	l.isolation = IsolationBwrap
	return nil
}

// bwrapSystemArgs mounts the system directories read-only: /usr and /etc,
// and the top-level bin and lib directories (as the symlinks they are on a
// merged-/usr system).
func bwrapSystemArgs() ([]string, error) {
	var args []string
	for _, p := range []string{"/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		fi, err := os.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return nil, err
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return nil, err
			}
			args = append(args, "--symlink", target, p)
		default:
			args = append(args, "--ro-bind", p, p)
		}
	}
	return args, nil
}

// roBindArgs mounts extra (LocalConfig.ReadOnlyBinds) read-only, each at
// its own path; they go after the sandbox's /tmp, so that one under the
// host's /tmp is not hidden by it.
func roBindArgs(extra []string) ([]string, error) {
	var args []string
	for _, p := range extra {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("read-only bind: %w", err)
		}
		args = append(args, "--ro-bind", p, p)
	}
	return args, nil
}

// own gives path to the user commands run as, when that is not the
// worker's own; recursively for a directory, not following symlinks.
func (l *Local) own(path string) error {
	if l.uid < 0 {
		return nil
	}
	return filepath.WalkDir(path, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, l.uid, l.uid)
	})
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
	meta := localMeta{V: 1, ID: id, Env: spec.Env}
	if l.disk == DiskTmpfs {
		meta.Disk = DiskTmpfs
	}
	if err := l.writeMeta(meta); err != nil {
		return nil, fmt.Errorf("start sandbox %s: %w", id, err)
	}
	sb := l.newSandbox(id, meta)
	if err := os.Mkdir(sb.dir, 0o755); err != nil {
		return nil, fmt.Errorf("start sandbox %s: %w", id, err)
	}
	if sb.tmpfs {
		if err := l.mountTmpfsFor(id); err != nil {
			return nil, fmt.Errorf("start sandbox %s: %w", id, err)
		}
	} else if err := os.Mkdir(sb.tmpDir, 0o700); err != nil {
		return nil, fmt.Errorf("start sandbox %s: %w", id, err)
	}
	if src != "" {
		if err := copyTree(ctx, src, sb.dir, l.root); err != nil {
			if full := l.fullOf(sb); full != "" {
				err = fmt.Errorf("%w (the workspace does not fit the sandbox's %s)", err, l.limitName(full))
			}
			return nil, fmt.Errorf("start sandbox %s: copy workspace: %w", id, err)
		}
	}
	if err := errors.Join(l.own(sb.tmpDir), l.own(sb.dir)); err != nil {
		return nil, fmt.Errorf("start sandbox %s: %w", id, err)
	}
	if strings.TrimSpace(spec.Patch) != "" {
		if err := sb.apply(ctx, spec.Patch); err != nil {
			return nil, fmt.Errorf("start sandbox %s: %w", id, err)
		}
	}
	if err := runSetup(ctx, sb, spec); err != nil {
		return nil, fmt.Errorf("start sandbox %s: %w", id, err)
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
	sb := l.newSandbox(id, meta)
	if sb.tmpfs {
		// Its tmpfs went with the host (or container) it was mounted on:
		// what is left is an empty mount point.
		if m, err := mounted(sb.dir); err != nil {
			return nil, fmt.Errorf("attach sandbox %s: %w", id, err)
		} else if !m {
			return nil, fmt.Errorf("attach sandbox %s: its tmpfs is gone (the host restarted): %w", id, ErrNotFound)
		}
	}
	// The private /tmp is the bwrap bind source; recreate it if it was lost.
	if err := os.MkdirAll(sb.tmpDir, 0o700); err != nil {
		return nil, fmt.Errorf("attach sandbox %s: %w", id, err)
	}
	if err := l.own(sb.tmpDir); err != nil {
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
func (l *Local) gitScratchRoot() string    { return filepath.Join(l.root, gitDirName) }

// localMeta is what Attach needs to rebuild a sandbox after a restart.
type localMeta struct {
	V   int               `json:"v"`
	ID  string            `json:"id"`
	Env map[string]string `json:"env,omitempty"`
	// Disk is DiskTmpfs for a sandbox on a tmpfs of its own, "" otherwise.
	Disk string `json:"disk,omitempty"`
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
	// A mount point cannot be renamed; unmounting its tmpfs drops what it
	// holds at once.
	if err := l.unmountFor(id); err != nil {
		return fmt.Errorf("remove sandbox %s: %w", id, err)
	}
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
	if err := removeAll(l.diskOf(id)); err != nil {
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

// ProbeBwrap reports whether bwrap isolation works on this machine, by
// starting a Local with IsolationBwrap in a temporary root that it removes.
// The error says why not.
func ProbeBwrap() error {
	root, err := os.MkdirTemp("", "actloop-bwrap-probe-")
	if err != nil {
		return err
	}
	defer func() { _ = removeAll(root) }()
	if err := os.Chmod(root, 0o755); err != nil { // reachable by the sandbox user
		return err
	}
	_, err = NewLocal(LocalConfig{Root: root, Isolation: IsolationBwrap})
	return err
}
