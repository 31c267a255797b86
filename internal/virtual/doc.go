// Package virtual is actloop's virtual-time scheduling engine: a
// discrete-event simulation of a batch of agent trajectories on a set of
// inference replicas, for `actloop bench`. It calls the services' own
// scheduling decisions (pkg/priority: admission rank, limit and its
// adaptation, the staleness bound, replica choice, priority snapshots and
// dispatch classes, KV admission and dispatch, the preemption victim;
// internal/predict's history decision) with the services' default
// settings, and runs each replica as internal/batching's iteration-level
// model of SGLang's continuous batching. The gen-workers' room and class
// queues, preemption with its
// cooldown, weight syncs (pause in abort mode, cache flush, resume with the
// next version) and each trajectory's sandbox start-up, commands and eval
// are played from the workload's plan (internal/workload).
//
// Run is a pure function of its configuration and plans: events are ordered
// by time and then by the order they were scheduled, nothing reads a clock
// or iterates a map where order matters, so the same input gives the same
// Result bit for bit on any machine under any load. What it leaves out is
// the pipeline's own latency (NATS, Redis, HTTP), which the live engine
// (the in-process stack) measures.
//
// Config.KVResidency measures a mechanism the coordinator does not run yet:
// on servers with a host-memory KV tier, admission by KV counts against
// the device pools only the trajectories that generate, since the context
// of one whose command is running can wait in host memory; every context
// must still fit in the host pools (priority.Footprint.Offloadable,
// priority.KVPools.OnDevice and Total).
//
// Config.Dispatch measures another order of the gen-workers' class queues:
// DispatchReference is siiRL-agentic's three queues (queueOf), which the
// services do not run.
//
// Beside the modes the services run, it has a lower bound (LowerBound), so
// that a makespan can be read against what no schedule beats. A user's own priority.Policy runs in
// place of a named one (Config.Custom).
package virtual
