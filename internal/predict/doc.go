// Package predict predicts a trajectory's remaining work (generated tokens
// and model calls) from how far it has come: the answer predictor-gw gives
// on actloop.predict, which the priority policies (lpt, sjf) rank by.
//
// Backends implement Predictor:
//
//   - History learns online from finished trajectories (Observe, fed from
//     actloop.results.<traj_id>) and predicts the mean remaining work of the recorded
//     trajectories that ran longer than this one has so far, from the most
//     specific evidence it has: the trajectory's group (its siblings), its
//     task family, or every trajectory. Observe is idempotent per traj_id,
//     so at-least-once delivery of results counts each one once.
//   - Learned is a regression on the request's features and History's
//     answer, learned online from finished trajectories.
//   - HTTP asks an external model server, posting an HTTPRequest: the
//     request, and what it reads of the trajectory (its conversation's
//     tail, from traj.Store) and of its group (the siblings' progress);
//     docs/architecture.md states the protocol, examples/predictor serves it.
//   - Oracle asks the inference simulator (internal/sim) for the exact answer; it
//     is for benchmarks against the simulator and refuses anything else.
//
// Every backend is safe for concurrent use. An error means no prediction:
// the caller falls back to fcfs for that trajectory. Predictions are
// point estimates; nothing here blocks beyond the caller's context.
package predict
