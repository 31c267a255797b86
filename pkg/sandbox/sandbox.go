package sandbox

import (
	"context"
	"fmt"
	"regexp"
	"time"
)

// Spec describes what a new sandbox holds.
type Spec struct {
	// Workspace is a directory copied recursively (including .git, keeping
	// modes and symlinks) into the sandbox; "" starts from an empty directory.
	Workspace string
	// Patch is a unified diff in git format applied with `git apply` after
	// the copy and before Setup; "" applies nothing. Eval sandboxes get the
	// agent's diff this way.
	Patch string
	// Setup holds bash commands run in order after the copy. The first one
	// that exits non-zero or times out fails Start with a *SetupError.
	Setup []string
	// SetupTimeout bounds each setup command; 0 means DefaultSetupTimeout.
	SetupTimeout time.Duration
	// SetupTotalTimeout bounds the setup commands together; 0 means no
	// bound beyond each command's. Setup still running when it runs out
	// is stopped: Start fails with a *SetupError whose Stopped is
	// SetupStoppedTotal.
	SetupTotalTimeout time.Duration
	// SetupDeadline is when setup must have ended (a trajectory's wall
	// clock); the zero time means none. Setup still running then is
	// stopped: Start fails with a *SetupError whose Stopped is
	// SetupStoppedDeadline.
	SetupDeadline time.Time
	// Env holds extra environment variables for every command.
	Env map[string]string
	// Image is the container image for the Docker backend ("" means its
	// configured default; any other must be allowed by DockerConfig.Images);
	// Local and Sim ignore it.
	Image string
	// Serve says the sandbox will serve a handler to its commands
	// (Server.Serve): Docker gives the container a volume for the
	// forwarder (DockerServeDir) then, and refuses to serve without one;
	// Local serves either way.
	Serve bool
}

// DefaultSetupTimeout bounds a setup command when Spec.SetupTimeout is 0.
const DefaultSetupTimeout = 5 * time.Minute

// ExecResult is the outcome of one command.
type ExecResult struct {
	// Output is stdout and stderr combined in order, possibly truncated.
	Output string
	// ReturnCode is the exit status; -1 when the command timed out. Local
	// reports death by signal N as 128+N, as a shell does.
	ReturnCode int
	// TimedOut is set when the command ran past its timeout and was killed.
	TimedOut bool
	// Truncated is set when Output lost bytes in the middle.
	Truncated bool
	// Replaced is set when the output held invalid UTF-8, which Output
	// holds as U+FFFD; Local and Docker then end Output with ReplacedNote
	// (before a limit's note), so the observation says so too.
	Replaced bool
	// Duration is how long the command ran: wall time for Local, simulated
	// time for Sim.
	Duration time.Duration
	// Limit names the resource limit that stopped the command, where the
	// backend can tell (LimitFileSize, LimitDisk, LimitFiles, LimitMemory,
	// LimitCPUTime, LimitProcs; under DiskTmpfs, LimitDisk or LimitFiles
	// also for a command the kernel did not stop but that filled the
	// sandbox to the cap); "" otherwise. A timeout is TimedOut, a
	// cut output Truncated. Local also ends Output with a line naming the
	// limit, for the model to read.
	Limit string
}

// Sandbox is one isolated working copy.
type Sandbox interface {
	// Handle returns an opaque string that Backend.Attach turns back into
	// this sandbox, also from another process that uses the same backend
	// configuration.
	Handle() string
	// Exec runs cmd with bash. A timeout <= 0 means no limit beyond ctx.
	// Running past the timeout is not an error (see ExecResult.TimedOut);
	// an error means the sandbox is gone (ErrNotFound), ctx ended, or the
	// command could not be run at all.
	Exec(ctx context.Context, cmd string, timeout time.Duration) (ExecResult, error)
	// Diff returns a git diff (binary, git apply-able) of everything changed
	// against the workspace's HEAD, including new untracked files that are
	// not ignored. It is "" when the sandbox is not a git repository.
	Diff(ctx context.Context) (string, error)
	// Close stops running commands and removes the sandbox. It is idempotent.
	Close(ctx context.Context) error
}

// CappedDiffer is a Sandbox that reads its diff capped, never holding more
// than the cap in memory whatever the sandbox holds. Local implements it;
// DiffCapped falls back to Diff for a Sandbox that does not.
type CappedDiffer interface {
	// DiffCapped is Diff read up to max+1 bytes: the diff itself when it
	// has at most max bytes, else its first max bytes and over set.
	DiffCapped(ctx context.Context, max int) (diff string, over bool, err error)
}

// DiffCapped returns sb's diff cut to at most max bytes (max > 0) and
// whether it was longer, reading no more than max+1 bytes where sb is a
// CappedDiffer.
func DiffCapped(ctx context.Context, sb Sandbox, max int) (string, bool, error) {
	if cd, ok := sb.(CappedDiffer); ok {
		return cd.DiffCapped(ctx, max)
	}
	d, err := sb.Diff(ctx)
	if err != nil || len(d) <= max {
		return d, false, err
	}
	return d[:max], true, nil
}

// Backend starts and re-attaches sandboxes.
type Backend interface {
	// Start creates a sandbox for id, the caller's unique name for it (a
	// trajectory id, perhaps with a suffix such as "-eval").
	Start(ctx context.Context, id string, spec Spec) (Sandbox, error)
	// Attach returns the sandbox a handle names, or ErrNotFound when it no
	// longer exists.
	Attach(ctx context.Context, handle string) (Sandbox, error)
}

// MaxIDBytes bounds a sandbox id: a trajectory id (at most 128 bytes) with
// a suffix such as "-eval-12" fits.
const MaxIDBytes = 192

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,191}$`)

// ValidateID reports whether id can name a sandbox: a letter or digit,
// then up to 191 of [A-Za-z0-9._-] (a directory name that is never "." or
// "..", hidden or an option; a container name as Docker allows one). The
// error wraps ErrInvalidID.
func ValidateID(id string) error {
	if !idPattern.MatchString(id) {
		return fmt.Errorf("%w: %q (want a letter or digit, then up to 191 of [A-Za-z0-9._-])", ErrInvalidID, id)
	}
	return nil
}

// runSetup runs spec's setup commands in sb in order, each within the
// setup timeout (DefaultSetupTimeout when unset) and all of them within
// the total timeout and before the deadline, where set: the one every
// backend runs after its sandbox is up. The first command that fails,
// times out or is stopped by the total or the deadline is a *SetupError.
func runSetup(ctx context.Context, sb Sandbox, spec Spec) error {
	timeout := spec.SetupTimeout
	if timeout <= 0 {
		timeout = DefaultSetupTimeout
	}
	var end time.Time // when setup must have ended, zero for never
	var by string     // what end is
	if spec.SetupTotalTimeout > 0 {
		end, by = time.Now().Add(spec.SetupTotalTimeout), SetupStoppedTotal
	}
	if d := spec.SetupDeadline; !d.IsZero() && (end.IsZero() || d.Before(end)) {
		end, by = d, SetupStoppedDeadline
	}
	for i, cmd := range spec.Setup {
		t, cut := timeout, false
		if !end.IsZero() {
			left := time.Until(end)
			if left <= 0 {
				return &SetupError{Index: i, Command: cmd, Of: len(spec.Setup), Stopped: by, Result: ExecResult{ReturnCode: -1}}
			}
			if left < t {
				t, cut = left, true
			}
		}
		res, err := sb.Exec(ctx, cmd, t)
		if err != nil {
			return fmt.Errorf("setup command %d: %w", i, err)
		}
		if res.TimedOut || res.ReturnCode != 0 {
			se := &SetupError{Index: i, Command: cmd, Of: len(spec.Setup), Result: res}
			if res.TimedOut && cut {
				se.Stopped = by
			}
			return se
		}
	}
	return nil
}
