// Package schema defines the versioned JSON messages that actloop's services
// and a trainer exchange over NATS: samples, gen steps, env steps, events,
// results, control state and dead-letter entries.
//
// Every message carries "v" (the schema version, currently 1). Decoders
// validate what they read and return a *FieldError naming the offending field,
// so a malformed message can be dead-lettered with a reason a person can act
// on. A sample, the message a person writes, is read strictly: every number
// has an upper bound (MaxStepTimeout, MaxNewTokens, …), ids match IDPattern,
// and a field the Sample type lacks, or one given twice, is refused by its
// JSON path (metadata holds anything). The other messages are written by
// actloop itself and read leniently (an unknown field is ignored), so a
// service of one release reads another's during a rolling upgrade.
//
// sample.schema.json and result.schema.json in this directory describe the
// two messages a trainer produces and consumes, for trainers in other
// languages. They are generated from the Go types and this package's
// constants by internal/schemagen (go generate ./pkg/schema); a test fails
// while a committed file differs from a fresh generation, and another
// feeds one corpus of samples to the schema and to DecodeSample and
// requires they agree, but for the few rules JSON Schema cannot state
// (knownDifferences in agreement_test.go).
//
// Messages carry ids, never trajectory state: the state lives in Redis
// (internal/traj). Every work message names its trajectory and the step (seq) it
// is for, and is published with Nats-Msg-Id "<traj_id>:<seq>:<kind>", so a
// redelivered or re-published message applies nothing twice.
package schema
