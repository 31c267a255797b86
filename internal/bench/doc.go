// Package bench is the benchmark harness behind `actloop bench`,
// `actloop bench-crosscheck`, `actloop bench-calibration`, `actloop
// bench-sync` and `actloop bench-pipeline`. It reports what it measured: as
// a table or summary for people, or as JSON (one array, or one object, on
// one line) for scripts.
//
//   - RunScheduling: seeded workloads per scenario under several scheduling
//     modes, on the virtual-time engine (internal/virtual; means over
//     seeds, against the lower bound and the baselines, the tuned ones
//     with their concurrency swept per scenario) or on the live engine: a fresh in-process stack
//     (internal/devstack) per mode, whose simulated servers run the same
//     server model, failing if two modes produced other tokens for a
//     trajectory.
//   - RunCrossCheck: small scenarios on both engines, makespans side by
//     side.
//   - WriteCalibration: the server model against the profiles it was
//     fitted to (docs/calibration.md).
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
