// Package schema defines the versioned JSON messages that actloop's services
// and a trainer exchange over NATS: samples, gen steps, env steps, events,
// results, control state and dead-letter entries.
//
// Every message carries "v" (the schema version, currently 1). Decoders
// validate what they read and return a *FieldError naming the offending field,
// so a malformed message can be dead-lettered with a reason a person can act
// on. sample.schema.json and result.schema.json in this directory describe the
// two messages a trainer produces and consumes, for trainers in other
// languages.
//
// Messages carry ids, never trajectory state: the state lives in Redis
// (internal/traj). Every work message names its trajectory and the step (seq) it
// is for, and is published with Nats-Msg-Id "<traj_id>:<seq>:<kind>", so a
// redelivered or re-published message applies nothing twice.
package schema
