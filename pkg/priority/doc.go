// Package priority is actloop's scheduling core: every scheduling decision as
// plain functions and types with no I/O and no clock of their own, so the
// coordinator, the gen-workers and a virtual-time simulator call the same
// code. The decisions:
//
//   - the rank of trajectories and waiting samples (Policy.Rank);
//   - the dispatch class of a gen step (Snapshots, Board.Class, Resumed)
//     and the order of the classes (DispatchOrder);
//   - how many samples to admit and where: by KV while the servers report
//     their pools (KVPools.Admit), else under the admission limit
//     (Admissible, NextLimit, AssignReplicas), and under the staleness
//     bound (StalenessRoom);
//   - how many generations a gen-worker runs at once (DispatchLimit);
//   - the generation a high-priority step preempts (Victim);
//   - whether a trajectory's tokens are too stale to go on (MustRestart).
//
// Ranking decides which trajectories' generations go first.
//
// A Policy ranks trajectory facts, most urgent first. It is pure code over a
// slice of Facts and an instant, so it is tested without I/O and gives the
// same order for the same input: the order is total (ties go to the earlier
// AdmittedAt, then the smaller TrajID). Three policies exist, by name:
//
//   - fcfs: admission order.
//   - lpt: longest predicted remaining work first, which shortens a batch's
//     tail.
//   - sjf: shortest predicted remaining work first, which finishes more
//     samples sooner.
//
// A fact whose prediction is unknown (0) ranks as if it had the median of the
// known predictions in the same Rank call, so it is neither favoured nor
// penalised; when no prediction is known, lpt and sjf order by admission.
//
// Every policy ages: a fact that has waited at least Config.AgeLimit ranks
// ahead of every fact that has waited less, the longest wait first, whatever
// the policy prefers. Since later arrivals have shorter waits, a trajectory
// that has aged is only ever behind trajectories that were waiting before it,
// and with K generations started per round it is started within
// ceil((B+1)/K) rounds of ageing, B being the number ahead of it when it aged
// (see starvation_test.go). That is what ageing is for: no active trajectory
// waits for ever for a generation.
//
// The same ranking orders the admission of waiting samples
// (AdmissionOrder), where WaitingSince is when a sample arrived, but a
// sample's wait runs to the newest arrival, not to now. A batch that
// arrives together therefore never ages and is admitted in the policy's
// order however long it waits; by the clock, the whole batch would age at
// once after AgeLimit and admission would fall back to TrajID order,
// whatever the policy. Under a stream of arrivals the guarantee is the one
// above with arrivals for ticks: a sample ages once a sample arrives
// AgeLimit or more after it, and from then on only samples that arrived
// before it are admitted ahead of it, so no sample is passed over by
// samples that arrived more than AgeLimit after it.
//
// A user's own policy plugs in by implementing Policy: the virtual engine
// takes it (internal/virtual's Config.Custom) in place of a named one, and
// everything that ranks there (admission, the per-replica high classes
// through Snapshots) calls only its Order. The contract, which the named
// policies keep (property_test.go checks them):
//
//   - pure: the order depends only on facts and now; no I/O, no clock, no
//     randomness, no state carried from one call to the next, and facts
//     are left as they are;
//   - total: every tie is broken (the named policies fall back to
//     AdmittedAt, then TrajID, then position), so the same facts give the
//     same order whatever order they come in;
//   - Rank(facts, now)[k] is facts[Order(facts, now)[k]];
//   - cheap: it runs over every active trajectory (thousands) at each
//     snapshot, up to every ACTLOOP_SNAPSHOT_INTERVAL.
//
// A user's policy that wants the no-starvation guarantee ranks Aged facts
// first, longest wait first, as the named ones do; an unknown prediction
// is 0 (or not finite). The services choose a named policy
// (ACTLOOP_POLICY); example_test.go runs a user's policy in the virtual
// engine.
//
// The coordinator turns a ranking into one Snapshot per replica (Snapshots):
// the replica's first HighSlots trajectories are in the high class. Snapshots
// travel through NATS KV as JSON (Marshal, DecodeSnapshot). Whoever publishes a
// trajectory's next gen step sends it to .hi or .lo by the newest snapshot it
// has seen, kept in a Board.
//
// Delivery semantics: a Board keeps, per replica, the snapshot with the
// highest Version it was given and ignores older ones, so snapshots may arrive
// late, twice or out of order. Versions must therefore grow across coordinator
// leaders (the KV revision or a clock reading, not a counter that restarts at
// zero). A class is advice for ordering only: a stale or missing snapshot
// (everything low) delays a generation but never loses or repeats one.
package priority
