// Package store keeps trajectory state in Redis.
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
// → traj id) and actloop:{group:<id>}:published (its completion was
// announced).
//
// A step is one Load (one round trip) and one Commit (one Lua script). Commit
// checks the trajectory's seq against the step's before writing anything, so a
// redelivered or re-published step applies nothing twice: a stale commit
// returns ErrStale and changes nothing.
package traj
