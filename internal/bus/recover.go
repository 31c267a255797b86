package bus

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrPanic is wrapped by the error Recover makes of a panic.
var ErrPanic = errors.New("handler panicked")

// Recover turns a panic in the chain inside it into an error for that
// message (wrapping ErrPanic, with the panic's value and the stack), so a
// bad message never crashes the process: the message is retried and, like
// any failure, given up on when its deliveries run out.
func Recover() Middleware {
	return func(next Handler) Handler {
		return func(ctx context.Context, m jetstream.Msg) (err error) {
			defer func() {
				if p := recover(); p != nil {
					// The value is not wrapped: a panic is a bug, never a
					// Malformed or Fatal outcome by accident.
					err = fmt.Errorf("%w: %v\n%s", ErrPanic, p, debug.Stack())
				}
			}()
			return next(ctx, m)
		}
	}
}
