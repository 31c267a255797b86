package bus

import (
	"errors"
	"time"
)

// malformedError marks a message no retry can fix.
type malformedError struct{ err error }

func (e *malformedError) Error() string { return e.err.Error() }
func (e *malformedError) Unwrap() error { return e.err }

// Malformed marks err as a property of the message itself (undecodable,
// invalid): the message is dead-lettered and terminated (DeadLetter, Acker).
func Malformed(err error) error { return &malformedError{err} }

// IsMalformed reports whether err was marked with Malformed.
func IsMalformed(err error) bool {
	var m *malformedError
	return errors.As(err, &m)
}

// fatalError marks a step that can never succeed for this trajectory.
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }
func (e *fatalError) Unwrap() error { return e.err }

// Fatal marks err as final for the message's work (a retry cannot help, but
// the message itself is sound): the message is given up on at once
// (GiveUp) and terminated (Acker).
func Fatal(err error) error { return &fatalError{err} }

// IsFatal reports whether err was marked with Fatal.
func IsFatal(err error) bool {
	var f *fatalError
	return errors.As(err, &f)
}

// redundantError marks a copy of work that is being done already.
type redundantError struct{ err error }

func (e *redundantError) Error() string { return e.err.Error() }
func (e *redundantError) Unwrap() error { return e.err }

// Redundant marks err as "this message's work is running already" (a
// second copy of a step whose first copy runs in this process: one
// published again, or the same message redelivered, while the first is
// still running). The copy is handed back with a back-off, and never given
// up on for it, so a long step is not ended for being long: once the
// running copy has committed, the copy finds nothing left to do. (It is
// not terminated: a redelivery of the very message that runs would take
// it away from the running copy, should that one fail.)
func Redundant(err error) error { return &redundantError{err} }

// IsRedundant reports whether err was marked with Redundant.
func IsRedundant(err error) bool {
	var r *redundantError
	return errors.As(err, &r)
}

// waitError hands a message back to be delivered again after a set delay.
type waitError struct {
	after time.Duration
	err   error
}

func (e *waitError) Error() string { return e.err.Error() }
func (e *waitError) Unwrap() error { return e.err }

// Wait marks err as "not now": the message's work may not run yet (its
// trajectory is held, priority.KVPools.Hold). The message is handed back to be
// delivered again after d, never given up on for it, and logged at debug
// level only: waiting is the expected course, not a failure.
func Wait(d time.Duration, err error) error { return &waitError{after: d, err: err} }

// IsWait reports whether err was marked with Wait.
func IsWait(err error) bool {
	var w *waitError
	return errors.As(err, &w)
}

// retryError asks the Acker to hand the message back for a delivery after
// a set delay: a middleware that could not settle the message (the dead
// letter or the give-up report failed) returns it.
type retryError struct {
	after time.Duration
	err   error
}

func (e *retryError) Error() string { return e.err.Error() }
func (e *retryError) Unwrap() error { return e.err }

// retryAfter marks err to be retried after d.
func retryAfter(d time.Duration, err error) error { return &retryError{after: d, err: err} }
