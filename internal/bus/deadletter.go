package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// deadLetterer publishes a message no consumer can take, with the reason.
type deadLetterer interface {
	DeadLetter(ctx context.Context, consumer string, m jetstream.Msg, reason string) error
}

var _ deadLetterer = (*Publisher)(nil)

// DeadLetterRetry is how long a malformed message waits for another try
// when its dead letter could not be published.
const DeadLetterRetry = time.Second

// DeadLetter publishes a message whose handler returned Malformed to
// actloop.dlq (original bytes, headers and the error as the reason, for
// consumer), and passes the error on for Acker to terminate the message.
// When the publish fails the message is handed back for another try after
// DeadLetterRetry, up to its maxDeliver-th delivery (maxDeliver <= 0: no
// limit); then, or at once when the failure is one no retry can fix (the
// envelope too large for the server), the message is terminated without
// its dead letter and the error says so: a malformed message never loops.
// Other outcomes pass through untouched.
func DeadLetter(dl deadLetterer, consumer string, maxDeliver int) Middleware {
	return func(next Handler) Handler {
		return func(ctx context.Context, m jetstream.Msg) error {
			err := next(ctx, m)
			if !IsMalformed(err) {
				return err
			}
			derr := dl.DeadLetter(ctx, consumer, m, err.Error())
			if derr == nil {
				return err
			}
			if n := delivered(m); errors.Is(derr, nats.ErrMaxPayload) || (maxDeliver > 0 && n >= uint64(maxDeliver)) {
				return fmt.Errorf("dead letter not published (delivery %d): %v: %w", n, derr, err)
			}
			return retryAfter(DeadLetterRetry, fmt.Errorf("dead-letter: %w (message malformed: %w)", derr, err))
		}
	}
}
