// Package bus is actloop's use of NATS JetStream: subjects and streams (the
// topology every service declares at start, idempotently), publishing with
// Nats-Msg-Id and trace context, the dead-letter subject, and Runner, which
// pulls work only when it has a free slot and maps each handler outcome to an
// ack on purpose.
//
// Delivery is at-least-once. Work streams use work-queue retention and
// durable pull consumers with explicit ack; publishers set Nats-Msg-Id
// "<traj_id>:<seq>:<kind>" so the stream's duplicate window swallows a
// re-published step. Consumers must still make their effect idempotent
// (internal/store's seq check): JetStream accepts an ack that arrives after
// AckWait even when the message was already redelivered elsewhere.
package bus
