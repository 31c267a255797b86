package bus

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// GiveUpFunc is told of a message given up on, with the error of its last
// delivery (a worker reports the step failed, so its trajectory ends with
// a fallback result). If it fails, the message is handed back to try again
// later.
type GiveUpFunc func(ctx context.Context, m jetstream.Msg, err error) error

// GiveUp gives up on a message whose handler failed with Fatal, or failed
// on its maxDeliver-th delivery or later (maxDeliver <= 0: never for that
// reason): it calls report (when set) and returns the error marked Fatal,
// for Acker to terminate the message. If report fails, the message is
// handed back for another try after the usual back-off, and report is
// called again then.
//
// It leaves alone a success, a Malformed error (DeadLetter's), a Redundant
// one (the work runs here already), a Wait (the work may not run yet), and
// any
// error once the Runner has begun to shut down: that message is handed
// back, and whoever takes it next decides.
func GiveUp(maxDeliver int, report GiveUpFunc) Middleware {
	return func(next Handler) Handler {
		return func(ctx context.Context, m jetstream.Msg) error {
			err := next(ctx, m)
			if err == nil || IsMalformed(err) || IsRedundant(err) || IsWait(err) || stopping(ctx) {
				return err
			}
			n := delivered(m)
			if !IsFatal(err) && (maxDeliver <= 0 || n < uint64(maxDeliver)) {
				return err
			}
			if report != nil {
				if rerr := report(ctx, m, err); rerr != nil {
					return retryAfter(backoff(n), fmt.Errorf("give-up report: %w (giving up on: %w)", rerr, err))
				}
			}
			if IsFatal(err) {
				return err
			}
			return Fatal(fmt.Errorf("delivered %d times: %w", n, err))
		}
	}
}
