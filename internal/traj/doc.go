// Package traj is a trajectory's state machine: its statuses and the
// transitions between them as Go types (transition.go), its state in Redis
// with one codec for every hash field (codec.go), the seq-checked commit
// that applies a transition, the message that follows each committed state
// (route.go) and the step driver every worker runs (driver.go).
//
// Statuses (siiRL-agentic's StepStatus, plus a start and a finish phase):
//
//	starting ─Started→ needs_generation ─Generated→ needs_env_step ─Observed→ needs_generation …
//	needs_generation ─FormatErrored / Interrupted→ needs_generation
//	needs_generation ─LimitReached→ finishing;  needs_env_step ─Submitted→ finishing
//	starting ─Failed / LimitReached (the wall clock, during setup)→ terminated
//	needs_generation ─Restarted→ starting (stale tokens under stale_policy restart)
//	finishing ─Finished→ terminated;  any live status ─Aborted→ aborted
//
// Workers and the coordinator change a trajectory only by committing a
// transition (Store.Commit); none sets a field by name.
//
// Layout (every key of one trajectory shares the hash tag {<id>}, so one Lua
// script may touch them all on Redis Cluster):
//
//	actloop:traj:{id}       hash: status, seq, replica, owner, handle, action, the sample, …
//	actloop:traj:{id}:msgs  list of chat messages (JSON)
//	actloop:traj:{id}:tok   packed little-endian int32 token ids
//	actloop:traj:{id}:lp    packed little-endian float32 log-probs
//	actloop:traj:{id}:mask  one byte per token: 1 = generated (trained on)
//	actloop:traj:{id}:ver   packed little-endian int32 weight version per token
//
// Besides: the coordinator's indexes under {coordinator} (active, waiting,
// finished counts) and, per group, actloop:{group:<id>}:members (group index
// → traj id), actloop:{group:<id>}:size (the group_size of its first
// result) and actloop:{group:<id>}:published (its completion was
// announced).
//
// A step is one Load (one round trip) and one Commit (one Lua script). Commit
// checks the trajectory's seq against the step's before writing anything, so a
// redelivered or re-published step applies nothing twice: a stale commit
// returns ErrStale and changes nothing.
package traj
