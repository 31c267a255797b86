package sandbox

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"time"
)

// Isolation modes for LocalConfig.Isolation.
const (
	// IsolationAuto uses bubblewrap when it works here and otherwise falls
	// back to IsolationNone, which needs LocalConfig.AllowUnisolated.
	IsolationAuto = "auto"
	// IsolationNone runs commands directly on the host, in the sandbox dir,
	// with the worker's privileges. It needs LocalConfig.AllowUnisolated.
	IsolationNone = "none"
	// IsolationBwrap runs commands under bubblewrap in their own user, pid,
	// network, IPC and UTS namespaces: the system directories (/usr, /etc
	// and the /bin, /lib links) are read-only, the sandbox dir is the only
	// writable host path, /tmp is private to the sandbox, nothing else of
	// the host (home directories, other sandboxes, /tmp) is visible, and
	// there is no network unless LocalConfig.Network is set.
	IsolationBwrap = "bwrap"
)

// Default resource limits (see Limits).
const (
	DefaultMaxProcs = 512
	DefaultMemoryMB = 8192
	DefaultCPUTime  = 10 * time.Minute
	// DefaultFileSizeMB bounds any one file a command writes.
	DefaultFileSizeMB = 1024
	// DefaultDiskMB bounds what a sandbox holds on disk.
	DefaultDiskMB = 4096
	// DefaultFiles bounds the files (inodes: files, directories, links) a
	// sandbox holds: a large repository with its dependencies installed
	// has tens of thousands.
	DefaultFiles = 262144
	// DefaultSandboxUID is the user commands run as under bwrap when the
	// worker runs as root.
	DefaultSandboxUID = 65534
)

// Limits bound what one command may use; a zero field means no limit.
type Limits struct {
	// MaxProcs bounds the number of processes. Local enforces it with its
	// cgroup's pids.max (v2 or v1) where it has cgroups (Local.Cgroups), else under
	// bwrap only (RLIMIT_NPROC, counted per sandbox in its own user
	// namespace; unisolated it would count all of the worker's processes).
	MaxProcs int
	// MemoryMB bounds memory: for Local, a command's memory as a whole
	// (its cgroup's memory.max, or memory.limit_in_bytes on cgroup v1; no
	// swap; an OOM kills the command) where it
	// has cgroups, else each process's address space (RLIMIT_AS); the
	// container's memory for Docker.
	MemoryMB int
	// CPUTime bounds each process's CPU time (RLIMIT_CPU); Local rounds it
	// up to whole seconds.
	CPUTime time.Duration
	// FileSizeMB bounds the size of any one file a command writes
	// (RLIMIT_FSIZE): a write past it fails with EFBIG and the writer gets
	// SIGXFSZ. Local only; the git commands Local runs itself are exempt,
	// so a diff can still be taken. Docker ignores it.
	FileSizeMB int
	// DiskMB bounds what one sandbox holds on disk, its working copy and
	// its private /tmp together: Local's tmpfs size under DiskTmpfs (a
	// write past it fails with ENOSPC), else measured while a command runs
	// and the command stopped once it is over (DiskWatch; see
	// LocalConfig.Disk); Docker ignores it.
	DiskMB int
	// Files bounds the files (inodes: regular files, directories, links)
	// one sandbox holds, counted as DiskMB is: the tmpfs's nr_inodes under
	// DiskTmpfs (creating one more fails with ENOSPC), else measured while
	// a command runs. Empty files take no bytes, so without it a sandbox
	// could hold millions. Docker ignores it.
	Files int
}

// DefaultLimits returns the default limits.
func DefaultLimits() Limits {
	return Limits{MaxProcs: DefaultMaxProcs, MemoryMB: DefaultMemoryMB, CPUTime: DefaultCPUTime,
		FileSizeMB: DefaultFileSizeMB, DiskMB: DefaultDiskMB, Files: DefaultFiles}
}

// Validate reports every problem with the limits.
func (l Limits) Validate() error {
	var errs []error
	if l.MaxProcs < 0 {
		errs = append(errs, fmt.Errorf("max procs %d is negative", l.MaxProcs))
	}
	if l.MemoryMB < 0 {
		errs = append(errs, fmt.Errorf("memory %d MB is negative", l.MemoryMB))
	}
	if l.CPUTime < 0 {
		errs = append(errs, fmt.Errorf("cpu time %s is negative", l.CPUTime))
	}
	if l.FileSizeMB < 0 {
		errs = append(errs, fmt.Errorf("file size %d MB is negative", l.FileSizeMB))
	}
	if l.DiskMB < 0 {
		errs = append(errs, fmt.Errorf("disk %d MB is negative", l.DiskMB))
	}
	if l.Files < 0 {
		errs = append(errs, fmt.Errorf("files %d is negative", l.Files))
	}
	return errors.Join(errs...)
}

// LocalConfig configures a Local backend.
type LocalConfig struct {
	// Root is the parent directory of the sandboxes; it is created if
	// missing. Root belongs to one Local (one process) at a time.
	Root string
	// OutputLimit is how many bytes of a command's output are kept: the
	// first and last halves, with a marker line in between. 0 means
	// DefaultOutputLimit.
	OutputLimit int
	// Isolation is IsolationAuto (the default when ""), IsolationBwrap or
	// IsolationNone.
	Isolation string
	// AllowUnisolated permits running commands unisolated on the host:
	// IsolationNone, or IsolationAuto where bubblewrap does not work.
	// Without it NewLocal fails with ErrUnisolated in those cases.
	AllowUnisolated bool
	// Network gives bwrap sandboxes the host's network. Off by default.
	Network bool
	// Limits bound each command. The zero value means no limits; callers
	// usually start from DefaultLimits.
	Limits Limits
	// SandboxUID is the user (and group) id commands run as under bwrap when
	// the worker runs as root, so that the process limit applies (the kernel
	// exempts root from it) and root-only host files stay unreadable; the
	// sandbox's files are owned by it. 0 means DefaultSandboxUID.
	SandboxUID int
	// CPUs bounds the CPU share of each command (cpu.max of its cgroup, or
	// cpu.cfs_quota_us on cgroup v1, in cores); 0 means no limit. It needs a cgroup (see Local.Cgroups).
	CPUs float64
	// Disk is how the disk and file limits are enforced: DiskAuto (the
	// default when ""), DiskTmpfs or DiskWatch; Local.Disk tells which is
	// in force.
	Disk string
	// ReadOnlyBinds are extra host paths mounted read-only at the same
	// place under bwrap, for toolchains outside /usr (for example /opt/go).
	ReadOnlyBinds []string
}

// Validate reports every problem with the configuration.
func (c LocalConfig) Validate() error {
	var errs []error
	if c.Root == "" {
		errs = append(errs, errors.New("root is empty"))
	} else if abs, err := filepath.Abs(c.Root); err == nil && abs == "/" {
		errs = append(errs, errors.New("root must not be /"))
	}
	if c.OutputLimit < 0 {
		errs = append(errs, fmt.Errorf("output limit %d is negative", c.OutputLimit))
	}
	switch c.Isolation {
	case "", IsolationAuto, IsolationNone, IsolationBwrap:
	default:
		errs = append(errs, fmt.Errorf("isolation %q is not %q, %q or %q", c.Isolation, IsolationAuto, IsolationBwrap, IsolationNone))
	}
	switch c.Disk {
	case "", DiskAuto, DiskTmpfs, DiskWatch:
	default:
		errs = append(errs, fmt.Errorf("disk %q is not %q, %q or %q", c.Disk, DiskAuto, DiskTmpfs, DiskWatch))
	}
	if err := c.Limits.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.CPUs < 0 || math.IsNaN(c.CPUs) || math.IsInf(c.CPUs, 0) {
		errs = append(errs, fmt.Errorf("cpus %v is not a non-negative number", c.CPUs))
	}
	if c.SandboxUID < 0 {
		errs = append(errs, fmt.Errorf("sandbox uid %d is negative", c.SandboxUID))
	}
	for _, p := range c.ReadOnlyBinds {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" {
			errs = append(errs, fmt.Errorf("read-only bind %q is not a clean absolute path other than /", p))
		}
	}
	return errors.Join(errs...)
}
