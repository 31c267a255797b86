// Package bench is the benchmark harness behind `actloop bench`,
// `actloop bench-sync` and `actloop bench-pipeline`. Each run starts a fresh
// in-process stack (internal/devstack) with the inference simulator, plays
// a trainer against it, and reports what it measured: as a table or
// summary for people, or as JSON (one array, or one object, on one line)
// for scripts.
//
//   - RunScheduling: one seeded workload per scenario under several
//     scheduling modes; makespan against the batch's lower bound, latency,
//     slot and decode use, preemptions; it fails if two modes produced other
//     tokens for a trajectory.
//   - RunSync: pause and resume many times with generations in flight;
//     pause latency, tokens kept, makespan lost per sync.
//   - RunPipeline: the pipeline's own cost with backends that answer at
//     once, in one process or with every service in its own.
//
// A bench reports; it does not fail on a number. Each run's settings are a
// struct whose Validate names the flag at fault, so the command can tell a
// usage error from a failed run. CollectHeads and FlushCache are the
// trainer stand-ins the benches share with `actloop dev`.
package bench
