package sandbox

import (
	"errors"
	"fmt"
)

var (
	// ErrNotFound means the sandbox does not exist (any more).
	ErrNotFound = errors.New("sandbox: not found")
	// ErrInvalidID means an id does not match
	// [A-Za-z0-9][A-Za-z0-9._-]{0,191} (ValidateID).
	ErrInvalidID = errors.New("sandbox: invalid id")
	// ErrInvalidHandle means a handle was not made by this backend.
	ErrInvalidHandle = errors.New("sandbox: invalid handle")
	// ErrExists means a sandbox with the same id is live in this Backend.
	ErrExists = errors.New("sandbox: already exists")
	// ErrPatch means Spec.Patch did not apply.
	ErrPatch = errors.New("sandbox: patch does not apply")
	// ErrUnisolated means commands would run unisolated on the host and
	// that was not explicitly allowed.
	ErrUnisolated = errors.New("sandbox: commands would run UNISOLATED on the host, with the worker's privileges, and that is not allowed")
)

// SetupError reports the setup command that failed Start.
type SetupError struct {
	// Index is the command's position in Spec.Setup.
	Index int
	// Command is the command itself.
	Command string
	// Result holds its exit status and the tail of its output.
	Result ExecResult
}

func (e *SetupError) Error() string {
	status := fmt.Sprintf("exited with code %d", e.Result.ReturnCode)
	if e.Result.TimedOut {
		status = fmt.Sprintf("timed out after %s", e.Result.Duration)
	}
	return fmt.Sprintf("sandbox: setup command %d %q %s; output tail:\n%s",
		e.Index, e.Command, status, tail(e.Result.Output, setupTailBytes))
}

const setupTailBytes = 2000

// tail returns at most n bytes from the end of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "[...]" + s[len(s)-n:]
}
