// Package client is the trainer's side of actloop: submit samples, take
// finished trajectories and completed groups, and synchronise weights
// (pause, resume, read the control state) over NATS; read the
// coordinator's status over HTTP.
//
// A Client works on the streams of a running deployment (the coordinator
// and `actloop` create them); it creates only its own durable consumers.
// The wire names are in package schema (schema.SubjectSamples,
// schema.StreamResults, ...).
//
// # Submitting
//
// Submit checks every sample first and publishes none if one is invalid
// (the error wraps schema.ErrInvalid and names the sample and the field).
// Each sample goes to actloop.samples with Nats-Msg-Id set to its id, and
// Submit returns once the stream has stored it: JetStream drops a second
// copy within its duplicate window (2 minutes), and beyond it the
// coordinator drops a sample whose trajectory it already holds (waiting,
// running, or finished within ACTLOOP_RESULT_TTL). So a Submit that failed
// part-way (a *SubmitError says how far it got) can be repeated whole. A
// sample id is a trajectory id: reuse one only to retry.
//
// # Results and groups
//
// Delivery is at least once. Each durable consumer name has its own
// position, kept by the server: it sees every result in the stream, and a
// result it has not acknowledged within AckWait (or has nak'd) is
// delivered to it again. Delivery.Ack waits for the server to confirm the
// acknowledgement: once it returns, that name does not see the result
// again. The stream holds one result per trajectory: each is published on
// its own subject (schema.SubjectResult) and the stream refuses a second
// there, at any time. Fetch keys results by traj_id (which is the sample
// id) and groups by group_id besides, and within the Client's life
// acknowledges unseen a copy of one acknowledged on that name (one left by
// a publisher that did not ask for the subject to be empty). Every sample
// gets one result, whatever became of it: a run to its end (status
// submitted, limit_exceeded or format_error_limit; schema.Trainable), or
// one without trainable tokens (failed, fallback, aborted: reward 0 and a
// reason), so no batch waits forever.
//
// Results arrive in the order trajectories finished, not in the order
// samples were submitted; a redelivery comes after newer results. When
// every rollout of a group has a result, a schema.GroupDone follows its
// members on actloop.groups.<group_id> (a consumer from Groups), one per
// group as results are one per trajectory.
//
// # Weight synchronisation
//
// Pause, Resume and Control are NATS request-reply calls the coordinator
// answers (package control). Pause returns once every live gen-worker has
// paused; a repeated pause in the same mode is the same pause, a resume to
// the current weight version is harmless, and a version may not go back.
// A refusal is a *control.Error.
//
// # Sizes
//
// A sample is at most schema.MaxSampleBytes (512 KiB) as JSON. A result
// of any length travels as a small head on actloop.results.<traj_id> and a
// body in the object store (schema.BodyRef): Delivery.Head reads the head alone,
// Delivery.Result fetches and checks the body too, and Bodies does the same
// for readers of the stream of their own. nats-server's default
// max_payload (1 MiB) is enough.
package client
