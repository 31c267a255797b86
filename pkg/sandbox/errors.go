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

// What stopped a setup that had not failed by itself (SetupError.Stopped).
const (
	// SetupStoppedTotal: Spec.SetupTotalTimeout ran out.
	SetupStoppedTotal = "total_timeout"
	// SetupStoppedDeadline: Spec.SetupDeadline passed.
	SetupStoppedDeadline = "deadline"
)

// SetupError reports the setup command that failed Start.
type SetupError struct {
	// Index is the command's position in Spec.Setup.
	Index int
	// Of is how many setup commands there were.
	Of int
	// Command is the command itself.
	Command string
	// Result holds its exit status and the tail of its output.
	Result ExecResult
	// Stopped is SetupStoppedTotal or SetupStoppedDeadline when setup as
	// a whole ran out of time in (or before) this command, "" when the
	// command failed or ran past its own timeout.
	Stopped string
}

func (e *SetupError) Error() string {
	status := fmt.Sprintf("exited with code %d", e.Result.ReturnCode)
	switch {
	case e.Stopped == SetupStoppedTotal:
		status = "was stopped: setup's total time ran out"
	case e.Stopped == SetupStoppedDeadline:
		status = "was stopped: setup's deadline passed"
	case e.Result.TimedOut:
		status = fmt.Sprintf("timed out after %s", e.Result.Duration)
	}
	return fmt.Sprintf("sandbox: setup command %d %q (of %d, from 0) %s; output tail:\n%s",
		e.Index, e.Command, e.Of, status, tail(e.Result.Output, setupTailBytes))
}

const setupTailBytes = 2000

// tail returns at most n bytes from the end of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "[...]" + s[len(s)-n:]
}
