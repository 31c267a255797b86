// Package bus is actloop's use of NATS JetStream: subjects and streams (the
// topology every service declares at start, idempotently), publishing with
// Nats-Msg-Id and trace context, the dead-letter subject, KV watches, and
// Runner, which pulls work only when it has a free slot and runs each
// message through a Handler wrapped in Middleware.
//
// # Delivery
//
// Delivery is at-least-once. Work streams use work-queue retention and
// durable pull consumers with explicit ack; publishers set Nats-Msg-Id
// "<traj_id>:<seq>:<kind>" so the stream's duplicate window swallows a
// re-published step. Consumers must still make their effect idempotent
// (internal/traj's seq check): JetStream accepts an ack that arrives after
// AckWait even when the message was already redelivered elsewhere, and a
// message can be delivered again after a crash, a nak or a missed AckWait.
//
// Order: a Runner takes its sources in priority order (a gen-worker's
// trajectories under way before first generations, high before low within
// each: priority.DispatchOrder; an env-worker's own
// sandboxes before new ones), in stream
// order within one (redeliveries aside); with several slots, messages run
// concurrently and finish in any order. A worker runs one step of a trajectory at a time; the order
// of a trajectory's steps comes from its seq, not from the stream.
//
// # Handlers and middleware
//
// A Handler returns what happened; it never acks. Each concern around it
// is a Middleware, as in watermill's router: Tracing (one span per
// message), Acker (the one layer that acks), InProgress (ack timer reset
// while the message is held, so AckWait stays short on long steps),
// DeadLetter, GiveUp and Recover. Runner's doc gives their order. The
// outcomes, mapped by Acker:
//
//   - nil (done, or a duplicate whose step is already applied) → Ack.
//   - Malformed (undecodable or invalid) → original bytes, headers and
//     reason to actloop.dlq, then Term; if the dead letter cannot be
//     published, NakWithDelay(DeadLetterRetry) and try again.
//   - Fatal (a retry cannot help), or any failure on the MaxDeliver-th
//     delivery → the Runner's GiveUp report (the trajectory ends with a
//     fallback result), then Term; if the report fails, NakWithDelay and
//     try again.
//   - Redundant (a second copy of a step whose first copy runs here,
//     traj.ErrBusy) → NakWithDelay(back-off), never given up on: once the
//     running copy commits, the copy finds nothing to do, so a step is
//     never ended for being long.
//   - any other error (transient: Redis or NATS away) → NakWithDelay(back-off):
//     exponential from 250ms by delivery, capped at 30s, with jitter; the
//     delivery counts towards MaxDeliver.
//   - any error other than Malformed once the Runner is shutting down →
//     Nak, for another worker to take it at once.
//   - a panic → an error like any other (Recover); it never crashes the
//     process.
//
// Shutdown: a Runner stops pulling when its context ends, naks what it
// took but had not started, lets running handlers finish for up to
// StopTimeout, then cancels their context; what fails then is handed back
// (Nak).
// Nothing it held is dropped unsettled; what it could not settle (the
// process died) comes back after AckWait.
package bus
