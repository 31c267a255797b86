package bus

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Acker is the middleware that acks: it settles each message by what the
// chain inside it returned, and passes that on unchanged (for Tracing to
// record). No other layer acks, naks or terminates. The mapping, first
// match wins:
//
//   - nil → Ack: the work is done, or it was a duplicate whose step is
//     already applied (the seq check swallowed it).
//   - a retry asked for by DeadLetter or GiveUp (the dead letter or the
//     give-up report could not be published) → NakWithDelay of what they
//     asked.
//   - Wait (the work may not run yet: its trajectory is held) →
//     NakWithDelay of what it asked, never given up on.
//   - Malformed (undecodable or invalid; DeadLetter has published it to
//     actloop.dlq) → Term.
//   - any other error once the Runner has begun to shut down → Nak, so
//     another worker takes the message at once.
//   - Fatal (final for its work, or its deliveries ran out: GiveUp has
//     reported it) → Term.
//   - any other error (transient: Redis or NATS away, a panic; Redundant: a
//     copy of work running here already) → NakWithDelay(backoff):
//     exponential from 250ms by delivery, capped at 30s, with full jitter;
//     each of these deliveries counts towards GiveUp's MaxDeliver.
//
// log gets the message's subject and delivery count; it is used with the
// handler's ctx, so its lines carry what the handler added (traj_id, seq,
// the span's trace id).
func Acker(log *slog.Logger) Middleware {
	return func(next Handler) Handler {
		return func(ctx context.Context, m jetstream.Msg) error {
			err := next(ctx, m)
			n := delivered(m)
			s := settle(err, stopping(ctx), n)
			switch s.kind {
			case ackAck:
				if aerr := m.Ack(); aerr != nil {
					log.WarnContext(ctx, "ack failed", "subject", m.Subject(), "delivered", n, "error", aerr)
				}
			case ackNak:
				_ = m.Nak()
			case ackNakDelay:
				var retry *retryError
				switch {
				case IsWait(err):
					log.DebugContext(ctx, "step waits; handed back", "subject", m.Subject(), "delivered", n,
						"reason", err, "retry_in", s.delay)
				case IsRedundant(err):
					log.InfoContext(ctx, "step runs here already; will look again", "subject", m.Subject(), "delivered", n,
						"retry_in", s.delay)
				case errors.As(err, &retry):
					log.ErrorContext(ctx, "message not settled; will retry", "subject", m.Subject(), "delivered", n,
						"error", err, "retry_in", s.delay)
				default:
					log.WarnContext(ctx, "step failed; will retry", "subject", m.Subject(), "delivered", n,
						"error", err, "retry_in", s.delay)
				}
				_ = m.NakWithDelay(s.delay)
			case ackTerm:
				switch s.reason {
				case termMalformed:
					log.WarnContext(ctx, "malformed message terminated", "subject", m.Subject(), "delivered", n, "error", err)
				default:
					log.ErrorContext(ctx, "giving up on message", "subject", m.Subject(), "delivered", n, "error", err)
				}
				_ = m.TermWithReason(s.reason)
			}
			return err
		}
	}
}

// ackKind is what Acker does with a message.
type ackKind int

const (
	ackAck      ackKind = iota + 1 // Ack
	ackNak                         // Nak: redeliver now
	ackNakDelay                    // NakWithDelay(delay)
	ackTerm                        // TermWithReason(reason)
)

// The reasons Acker terminates a message with (they appear in JetStream's
// advisories).
const (
	termMalformed = "malformed"
	termGaveUp    = "gave up"
)

// settlement is Acker's decision for one message.
type settlement struct {
	kind   ackKind
	delay  time.Duration // for ackNakDelay
	reason string        // for ackTerm
}

// settle decides the ack of a message whose chain returned err, on its
// delivered-th delivery; stopping: its Runner is shutting down.
func settle(err error, stopping bool, delivered uint64) settlement {
	var retry *retryError
	var wait *waitError
	switch {
	case err == nil:
		return settlement{kind: ackAck}
	case errors.As(err, &retry):
		return settlement{kind: ackNakDelay, delay: retry.after}
	case errors.As(err, &wait) && !stopping:
		return settlement{kind: ackNakDelay, delay: wait.after}
	case IsMalformed(err):
		return settlement{kind: ackTerm, reason: termMalformed}
	case stopping:
		return settlement{kind: ackNak}
	case IsFatal(err):
		return settlement{kind: ackTerm, reason: termGaveUp}
	}
	return settlement{kind: ackNakDelay, delay: backoff(delivered)}
}

// backoff is exponential from 250ms, capped at 30s, with full jitter: a
// duration in [d/2, d] for d = 250ms << (delivered-1).
func backoff(delivered uint64) time.Duration {
	d := backoffCeiling(delivered)
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// backoffCeiling is the most backoff waits after the delivered-th delivery.
func backoffCeiling(delivered uint64) time.Duration {
	d := 250 * time.Millisecond << min(max(delivered, 1)-1, 7)
	return min(d, 30*time.Second)
}
