package virtual

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/actloop/actloop/internal/batching"
	"github.com/actloop/actloop/internal/predict"
	"github.com/actloop/actloop/internal/workload"
	"github.com/actloop/actloop/pkg/priority"
	"github.com/actloop/actloop/pkg/schema"
)

const (
	obsTemplateTokens = workload.ObsTemplateTokens
	replyEndTokens    = workload.ReplyEndTokens
)

// traj is one trajectory's state in a run.
type traj struct {
	plan     *workload.Trajectory
	replica  int
	finished bool

	admittedAt, finishedAt float64
	updatedAt              float64 // last state change: the fact's WaitingSince
	predicted              float64
	preemptedAt            float64

	dropped   bool               // the trainer dropped it as stale
	inExec    bool               // its command is running: its context may be offloaded
	inEval    bool               // its last reply is in: it needs no more KV
	predTurns float64            // the predictor's remaining turns (-1: none)
	turn      int                // the turn being generated (0-based)
	partial   int                // tokens of this turn kept from interrupted generations
	held      bool               // held (priority.KVPools.Hold): its gen steps wait
	parked    bool               // held with a gen step waiting for its release
	resumed   bool               // interrupted: its next gen step waits in its resume class (priority.StepClass)
	ctx       []batching.Segment // the context before this turn's reply
	ctxLen    int
	genCtx    int // context plus output of its last generation (0: none yet)
	genTokens int
	calls     int
	kv        priority.Footprint // from its newest progress report, as the coordinator knows it
	versions  [2]int64           // min and max weight version of its whole replies' tokens; min > max: none
	// turnVersions is min and max weight version of this turn's partial
	// tokens (min > max: none), merged into versions when the reply is
	// whole; Trainer.DiscardPartials discards them with the partial.
	turnVersions [2]int64
	asks         []predict.Ask // what the learned predictor was asked of it

	// Where its time went, in seconds.
	genQueueS, serverS, envS float64
	since                    float64 // when its current phase began
}

// generation is one generation running on a server.
type generation struct {
	t         int
	id        int64
	low       bool
	version   int64
	notBefore float64
	input     int
	need      int64 // input and output reserve, as the gen-worker counts them
	startedAt float64
}

// worker is one replica's gen-worker and its server.
type worker struct {
	srv      *batching.Server
	queues   []fifo // in dispatch order (queueOf)
	running  int
	inflight int64         // the running generations' needs
	low      []*generation // running low generations, oldest first
	gens     map[int64]*generation
	// Counters as a gen-worker's heartbeat reports them.
	generated, reprefilled int64
	tokenS                 float64 // its measure of seconds per token (genworker's tokenPace)
	lastGenerated, lastRe  int64
}

// engine is one run.
type engine struct {
	cfg    Config
	policy priority.Policy
	ts     []*traj
	ws     []*worker
	q      queue
	now    float64

	waitingIDs []int // trajectories waiting for admission
	activeIDs  []int // admitted and not finished, in admission order
	facts      []priority.Fact
	active     int
	admitted   int // trajectories admitted so far
	limit      int
	load       map[string]int // active trajectories per replica name
	names      []string       // replica names
	replicaOf  map[string]int
	board      priority.Board
	snapVer    int64
	nextSnap   float64 // the earliest time of the next snapshot
	dirty      bool
	paused     bool
	version    int64
	nextGen    int64
	done       int

	trainer trainerState

	history history
	learned learned
	// predErrs pairs every prediction made with the truth: predicted and
	// true remaining tokens.
	predErrs [][2]float64
	asked    int
	pace     priority.Pace
	res      Result
	// calls and inputTokens count the generation requests and their
	// input tokens.
	calls, inputTokens int64
}

// Run plays plans under cfg and reports what happened. The same plans and
// cfg give the same Result, bit for bit.
func Run(cfg Config, plans []workload.Trajectory) (Result, error) {
	e, err := newEngine(cfg, plans)
	if err != nil {
		return Result{}, err
	}
	for e.done < len(e.ts) && !e.trained() {
		if err := e.step(); err != nil {
			return Result{}, err
		}
	}
	if tr := cfg.Trainer; tr != nil && !e.trained() {
		return Result{}, fmt.Errorf("virtual engine: the supply of %d trajectories ran out at %.1f s with %d of the trainer's %d batches taken (%d dropped as stale): give it more",
			len(e.ts), e.now, len(e.trainer.batches), tr.Batches, e.trainer.dropped)
	}
	return e.result(), nil
}

// newEngine is a run of plans under cfg at time 0: the batch has arrived
// and the first admissions are made.
func newEngine(cfg Config, plans []workload.Trajectory) (*engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(plans) == 0 {
		return nil, fmt.Errorf("no trajectories")
	}
	policy := cfg.Custom
	if policy == nil {
		policy, _ = priority.New(cfg.Policy, priority.Config{AgeLimit: cfg.AgeLimit})
	}
	e := &engine{cfg: cfg, policy: policy, load: map[string]int{}, limit: cfg.floor(), replicaOf: map[string]int{}}
	if tr := cfg.Trainer; tr != nil { // the bound the coordinator is set to
		e.cfg.TrainBatchSize, e.cfg.MaxStaleness = tr.BatchSize, tr.MaxStaleness
	}
	if cfg.Kind == KindAsync {
		e.cfg.Slots = len(plans)
	}
	for r := range cfg.Replicas {
		srv, err := batching.New(cfg.Server)
		if err != nil {
			return nil, err
		}
		e.ws = append(e.ws, &worker{srv: srv, gens: map[int64]*generation{}, queues: make([]fifo, queues(cfg.Dispatch))})
		e.names = append(e.names, fmt.Sprintf("r%d", r))
		e.replicaOf[e.names[r]] = r
	}
	for i := range plans {
		p := &plans[i]
		if err := e.fits(p); err != nil {
			return nil, err
		}
		t := &traj{plan: p, replica: -1, predTurns: -1, preemptedAt: math.Inf(-1), versions: noVersions, turnVersions: noVersions}
		t.ctx = []batching.Segment{{Key: key(p.GroupID, -1, 'p'), Tokens: p.Prompt}}
		t.ctxLen = p.Prompt
		e.ts = append(e.ts, t)
	}
	e.arrive()
	e.q.push(cfg.AdaptInterval.Seconds(), evAdapt, 0)
	if cfg.SyncEvery > 0 {
		e.q.push(cfg.SyncEvery, evPause, 0)
	}
	e.q.push(0, evSample, 0)
	e.admit()
	return e, nil
}

// step handles the next event; it fails when the run can go no further.
func (e *engine) step() error {
	if e.q.len() == 0 {
		return fmt.Errorf("virtual engine stalled at %.1f s with %d of %d trajectories finished", e.now, e.done, len(e.ts))
	}
	ev := e.q.pop()
	e.now = ev.at
	e.handle(ev)
	syncing := e.cfg.Trainer != nil && e.paused // a trainer's weight sync resumes admission
	if e.active == 0 && e.done < len(e.ts) && !syncing && !e.trained() && (e.cfg.SyncEvery == 0 || e.now > stallAfterS) {
		// Nothing runs and nothing can be admitted: only a weight sync
		// could make room (under a staleness bound), and none comes.
		return fmt.Errorf("virtual engine stalled at %.1f s with %d of %d trajectories finished and none admitted", e.now, e.done, len(e.ts))
	}
	return nil
}

// stallAfterS ends a run that has had nothing to run for this long even
// with weight syncs (a year of virtual time).
const stallAfterS = 365 * 24 * 3600

// fits checks that p's longest input and reply fit in a server's pool.
func (e *engine) fits(p *workload.Trajectory) error {
	ctx := p.Prompt
	for k, n := range p.Tokens {
		if ctx+n+replyEndTokens >= e.cfg.Server.MaxTotalTokens-1 {
			return fmt.Errorf("trajectory %s: turn %d needs %d tokens of context and reply, a server holds %d (max_total_num_tokens)",
				p.ID, k+1, ctx+n+replyEndTokens, e.cfg.Server.MaxTotalTokens)
		}
		if n+replyEndTokens > e.cfg.MaxNew {
			return fmt.Errorf("trajectory %s: turn %d replies %d tokens, more than max_new_tokens %d", p.ID, k+1, n+replyEndTokens, e.cfg.MaxNew)
		}
		ctx += n + replyEndTokens
		if k < len(p.Obs) {
			ctx += p.Obs[k] + obsTemplateTokens
		}
	}
	return nil
}

// key names a content stream: a group's prompt (turn -1, 'p'), a
// trajectory's reply ('r') or observation ('o') of a turn.
func key(id string, turn int, kind byte) uint64 {
	h := uint64(14695981039346656037)
	for i := range len(id) {
		h = (h ^ uint64(id[i])) * 1099511628211
	}
	h = (h ^ uint64(uint32(turn))) * 1099511628211
	h = (h ^ uint64(kind)) * 1099511628211
	return h ^ h>>29
}

// arrive takes the whole batch in at time 0, as a trainer publishes it, with
// the predictions the coordinator makes for waiting samples.
func (e *engine) arrive() {
	for i, t := range e.ts {
		e.waitingIDs = append(e.waitingIDs, i)
		if p := e.siblingPrediction(i); p > 0 {
			t.predicted = p
		} else {
			e.predict(t)
		}
	}
}

// siblingPrediction is a prediction known for a member of trajectory i's
// group, which siblings share until they have their own. Plans keep a
// group's members together, in order.
func (e *engine) siblingPrediction(i int) float64 {
	t := e.ts[i]
	first := i - t.plan.GroupIndex
	for j := max(first, 0); j < first+t.plan.GroupSize && j < len(e.ts); j++ {
		if s := e.ts[j]; j != i && !s.finished && s.predicted > 0 && s.plan.GroupID == t.plan.GroupID {
			return s.predicted
		}
	}
	return 0
}

// predict sets t's prediction from the predictor now: its remaining
// tokens (0: unknown) and turns (-1: unknown). Every mode asks, as the
// gen-workers ask predictor-gw whatever the policy; without a predictor
// named, the history (predictor-gw's default backend) answers.
func (e *engine) predict(t *traj) {
	truth := float64(e.remainingTokens(t))
	e.asked++
	if e.cfg.Predictor == PredictOracle {
		t.predicted, t.predTurns = truth, float64(len(t.plan.Tokens)-t.turn)
		e.predErrs = append(e.predErrs, [2]float64{truth, truth})
		return
	}
	t.predicted, t.predTurns = 0, -1
	hist, ok := e.history.predict(t.plan.GroupID, t.genTokens, t.calls)
	if ok {
		t.predicted, t.predTurns = hist.RemainingTokens, hist.RemainingTurns
	}
	if e.cfg.Predictor == PredictLearned {
		x := predict.Features(e.request(t), hist, ok)
		t.asks = append(t.asks, predict.Ask{Tokens: t.genTokens, Turns: t.calls, X: x})
		if e.learned.ready {
			t.predicted, t.predTurns = e.learned.model.Predict(x)
			ok = true
		}
	}
	if ok {
		e.predErrs = append(e.predErrs, [2]float64{t.predicted, truth})
	}
}

// request is what a gen-worker would ask predictor-gw of t now (after a
// reply, before its command's observation).
func (e *engine) request(t *traj) schema.PredictRequest {
	r := schema.PredictRequest{Turns: t.calls, GenTokens: t.genTokens, ContextTokens: t.genCtx,
		PromptTokens: min(t.plan.Prompt, t.genCtx)}
	if t.turn >= 2 {
		r.ObsTokens = t.plan.Obs[t.turn-2] + obsTemplateTokens
	}
	return r
}

// report is t's progress report after a model call, as its gen-worker
// sends it to the coordinator (traj.ProgressReport with the prediction):
// what KV admission knows of t until its next call.
func (e *engine) report(t *traj) {
	p := schema.Prediction{Turns: t.calls, GenTokens: t.genTokens, ContextTokens: t.genCtx,
		PromptTokens: min(t.plan.Prompt, t.genCtx), Finishing: t.inEval}
	t.kv = priority.Reported(p, t.predTurns)
}

// rankValue is what policies rank t by on replica (a waiting sample: ""):
// its predicted remaining time (priority.Pace), or tokens under RankByTokens.
func (e *engine) rankValue(t *traj, replica string) float64 {
	if e.cfg.RankBy == priority.RankByTokens {
		return t.predicted
	}
	return e.pace.Seconds(replica, t.predicted, t.predTurns)
}

// remainingTokens is what t has left to generate, this turn's rest
// included.
func (e *engine) remainingTokens(t *traj) int {
	n := -t.partial
	for k := t.turn; k < len(t.plan.Tokens); k++ {
		n += t.plan.Tokens[k] + replyEndTokens
	}
	return max(n, 0)
}

func (e *engine) handle(ev event) {
	switch ev.kind {
	case evIteration:
		e.iterationEnds(ev.i)
	case evSandboxReady:
		t := e.ts[ev.i]
		t.envS += e.now - t.since
		e.publishGen(ev.i)
	case evEnvDone:
		t := e.ts[ev.i]
		t.envS += e.now - t.since
		t.inExec = false
		t.updatedAt = e.now
		e.dirty = true
		e.publishGen(ev.i)
	case evResult:
		e.finish(ev.i)
	case evAdapt:
		e.adapt()
		e.q.push(e.now+e.cfg.AdaptInterval.Seconds(), evAdapt, 0)
	case evPause:
		e.pause()
		e.q.push(e.now+e.cfg.SyncPauseS, evResume, 0)
	case evResume:
		e.resume()
		if e.cfg.SyncEvery > 0 {
			e.q.push(e.now+e.cfg.SyncEvery, evPause, 0)
		}
	case evReleased:
		t := e.ts[ev.i]
		t.genQueueS += e.now - t.since // held: its step waited
		e.publishGen(ev.i)
	case evSample:
		e.sample()
		e.q.push(e.now+e.cfg.SampleEveryS, evSample, 0)
	}
}

// admit admits waiting samples in policy order while fewer than the limit
// are active, each on the least loaded replica, as the coordinator's
// admission loop does.
func (e *engine) admit() {
	if e.paused { // as the coordinator: no admission during a weight sync
		return
	}
	if e.cfg.Kind == KindAction && e.cfg.KVBudget > 0 {
		e.admitKV()
		return
	}
	room := priority.StalenessRoom(e.cfg.MaxStaleness, e.version, e.cfg.TrainBatchSize, e.admittedLive())
	free := priority.Admissible(e.limit, e.active, room)
	if free == 0 || len(e.waitingIDs) == 0 {
		return
	}
	order := priority.AdmissionOrder(e.policy, e.waitingFacts())
	batch := order[:min(free, len(order))]
	e.startAll(batch, priority.AssignReplicas(e.names, maps.Clone(e.load), len(batch)))
}

// waitingFacts are the waiting samples' facts, in waitingIDs' order.
func (e *engine) waitingFacts() []priority.Fact {
	facts := make([]priority.Fact, len(e.waitingIDs))
	for k, i := range e.waitingIDs {
		t := e.ts[i]
		at := e.instant(0) // the whole batch arrives at once
		facts[k] = priority.Fact{TrajID: t.plan.ID, GroupID: t.plan.GroupID, AdmittedAt: at, WaitingSince: at, Predicted: e.rankValue(t, "")}
	}
	return facts
}

// startAll admits the waiting samples at positions order[:len(replicas)]
// of waitingIDs, each on its replica.
func (e *engine) startAll(order []int, replicas []string) {
	if len(replicas) == 0 {
		return
	}
	admitted := make(map[int]bool, len(replicas))
	for k, name := range replicas {
		i := e.waitingIDs[order[k]]
		admitted[i] = true
		e.load[name]++
		e.start0(i, e.replicaOf[name])
	}
	e.waitingIDs = slices.DeleteFunc(e.waitingIDs, func(i int) bool { return admitted[i] })
	e.dirty = true
}

// admitKV admits waiting samples in policy order while their KV demand
// fits beside the active trajectories' in the replicas' pools
// (priority.KVPools), under the count ceiling and the staleness bound, as the
// coordinator does when its gen-workers report their servers' pools.
func (e *engine) admitKV() {
	e.hold()
	room := priority.StalenessRoom(e.cfg.MaxStaleness, e.version, e.cfg.TrainBatchSize, e.admittedLive())
	free := priority.Admissible(priority.KVCeiling(e.cfg.MaxActiveCeiling), e.active, room)
	if free == 0 || len(e.waitingIDs) == 0 {
		return
	}
	order := priority.AdmissionOrder(e.policy, e.waitingFacts())
	order = order[:min(free, len(order))]
	active := make([]priority.Footprint, len(e.activeIDs))
	for k, i := range e.activeIDs {
		t := e.ts[i]
		active[k] = t.kv
		active[k].Replica = e.names[t.replica]
		active[k].Held = t.held
		active[k].Offloadable = e.cfg.resident() && t.inExec
	}
	waiting := make([]priority.Footprint, len(order))
	for k, j := range order {
		waiting[k] = priority.Footprint{RemainingTurns: e.ts[e.waitingIDs[j]].predTurns}
	}
	e.startAll(order, e.pools().Admit(e.names, active, waiting))
}

// pools are the replicas' KV pools as admission and holding count them:
// with KV residency, a trajectory whose command runs counts against the
// device pool not at all (Footprint.Offloadable, OnDevice 0), and every
// admitted context against the host pool.
func (e *engine) pools() priority.KVPools {
	capacity := make(map[string]int, len(e.names))
	for _, name := range e.names {
		capacity[name] = e.cfg.Server.MaxTotalTokens
	}
	pools := priority.KVPools{Capacity: capacity, Budget: e.cfg.KVBudget, Slots: e.cfg.Slots}
	if !e.cfg.resident() {
		return pools
	}
	srv := e.cfg.Server
	host := srv.HostTokens // a copy of what is on the device too
	if srv.WritePolicy == batching.WriteBack {
		host += srv.MaxTotalTokens
	}
	pools.Total = make(map[string]int, len(e.names))
	for _, name := range e.names {
		pools.Total[name] = max(host, srv.MaxTotalTokens)
	}
	return pools // OnDevice 0: running requests only
}

// hold decides which active trajectories are held (priority.KVPools.Hold), in the
// newest ranking's order, as the coordinator does when it publishes its
// snapshots: a held trajectory's gen steps wait, and one let go has its
// waiting step back at its gen-worker after HeldRetry, when the gen-worker
// that handed it back is delivered it again.
func (e *engine) hold() {
	if e.cfg.Kind != KindAction || e.cfg.KVBudget == 0 || !e.cfg.Hold {
		return
	}
	fs := make([]priority.Footprint, len(e.activeIDs))
	for k, i := range e.activeIDs {
		t := e.ts[i]
		fs[k] = t.kv
		fs[k].Replica, fs[k].Held = e.names[t.replica], t.held
		fs[k].Offloadable = e.cfg.resident() && t.inExec
	}
	held := e.pools().Hold(fs, priority.PerTurn(fs))
	for k, i := range e.activeIDs {
		t := e.ts[i]
		switch {
		case held[k] && !t.held:
			e.res.Holds++
		case !held[k] && t.parked:
			t.parked = false
			e.q.push(e.now+priority.HeldRetry.Seconds(), evReleased, i)
		}
		t.held = held[k]
	}
}

// start0 admits trajectory i on replica r: its sandbox starts.
func (e *engine) start0(i, r int) {
	t := e.ts[i]
	t.replica = r
	t.admittedAt, t.updatedAt, t.since = e.now, e.now, e.now
	t.kv = priority.Footprint{RemainingTurns: t.predTurns} // no progress report yet
	e.active++
	e.admitted++
	e.res.PeakActive = max(e.res.PeakActive, e.active)
	e.activeIDs = append(e.activeIDs, i)
	e.q.push(e.now+t.plan.Startup, evSandboxReady, i)
}

// instant is virtual second s as a time for the scheduling core.
func (e *engine) instant(s float64) time.Time {
	return time.Unix(0, 0).Add(time.Duration(s * float64(time.Second)))
}

// publishGen queues t's next gen step on its replica, in the class the
// newest snapshot gives it (its resume class after an interruption), and
// dispatches.
//
// Snapshots are made when a class is read, not on a clock: the
// coordinator publishes one at most every SnapshotInterval while facts
// change, so a class is up to that old; here a publish that finds the
// newest snapshot that old, with facts changed since, makes a new one
// first. The classes read are as old as the coordinator's at most, and the
// engine ranks only when someone looks.
func (e *engine) publishGen(i int) {
	e.queueGen(i)
	e.dispatch(e.ts[i].replica)
}

// queueGen queues t's next gen step (publishGen without the dispatch).
func (e *engine) queueGen(i int) {
	t := e.ts[i]
	t.since = e.now
	if e.cfg.Kind == KindAction && e.dirty && e.now >= e.nextSnap {
		e.snapshot()
		e.nextSnap = e.now + e.cfg.SnapshotInterval.Seconds()
	}
	if t.held { // the gen-worker hands it back until it is let go
		t.parked = true
		return
	}
	first := t.turn == 0 && t.partial == 0 && !t.resumed
	e.ws[t.replica].queues[queueOf(e.cfg.Dispatch, e.board.Class(e.names[t.replica], t.plan.ID), first)].push(i)
}

// next pops the first step of w's queues in dispatch order (-1: none).
func (w *worker) next() int {
	for k := range w.queues {
		if w.queues[k].len() > 0 {
			return w.queues[k].pop()
		}
	}
	return -1
}

// nextHigh pops the first step of w's high classes in dispatch order
// (one waits).
func (w *worker) nextHigh(order string) int {
	for k := range w.queues {
		if queueHigh(order, k) && w.queues[k].len() > 0 {
			return w.queues[k].pop()
		}
	}
	panic("virtual: no high step waits")
}

// waiting reports whether a step waits in any of w's queues.
func (w *worker) waiting() bool {
	return slices.ContainsFunc(w.queues, func(q fifo) bool { return q.len() > 0 })
}

// highWaiting reports whether a step of a high class waits.
func (w *worker) highWaiting(order string) bool {
	for k := range w.queues {
		if queueHigh(order, k) && w.queues[k].len() > 0 {
			return true
		}
	}
	return false
}

// dispatch starts queued gen steps while the gen-worker has room, in
// priority.DispatchOrder, each low or high by the newest snapshot now, and,
// with preemption, lets a waiting high step preempt the newest low
// generation that may be preempted.
func (e *engine) dispatch(r int) {
	w := e.ws[r]
	if e.paused {
		return
	}
	for {
		for w.waiting() && e.room(w) {
			i := w.next()
			e.start(r, i, !priority.IsHigh(e.board.Class(e.names[r], e.ts[i].plan.ID)))
		}
		if e.cfg.Kind != KindAction || !e.cfg.Preempt || !w.highWaiting(e.cfg.Dispatch) || len(w.low) == 0 {
			break
		}
		notBefore := make([]time.Time, len(w.low))
		for k, g := range w.low {
			notBefore[k] = e.instant(g.notBefore)
		}
		v := priority.Victim(notBefore, e.instant(e.now))
		if v < 0 {
			break
		}
		e.res.Preemptions++
		g := w.low[v]
		e.ts[g.t].preemptedAt = e.now
		e.interrupt(r, g)
		// The slot goes to the high step, as the gen-worker's Runner hands
		// it the preempted one's slot; the interrupted rest waits in its
		// resume class.
		i := w.nextHigh(e.cfg.Dispatch)
		e.start(r, i, !priority.IsHigh(e.board.Class(e.names[r], e.ts[i].plan.ID)))
	}
	e.kick(r)
}

// room reports whether worker w may start another generation now: within
// its slots, or by KV as the gen-worker dispatches (priority.DispatchLimit).
func (e *engine) room(w *worker) bool {
	if e.cfg.Kind != KindAction || e.cfg.DispatchKVBudget == 0 {
		return w.running < e.cfg.Slots
	}
	return w.running < priority.DispatchLimit(e.cfg.Slots, w.running, w.inflight, e.cfg.Server.MaxTotalTokens, e.cfg.DispatchKVBudget)
}

// start sends trajectory i's generation to replica r's server.
func (e *engine) start(r, i int, low bool) {
	w := e.ws[r]
	t := e.ts[i]
	t.genQueueS += e.now - t.since
	t.since = e.now
	input := t.ctx
	if t.partial > 0 {
		input = append(slices.Clip(t.ctx), batching.Segment{Key: key(t.plan.ID, t.turn, 'r'), Tokens: t.partial})
	}
	reply := t.plan.Tokens[t.turn] + replyEndTokens
	e.nextGen++
	g := &generation{t: i, id: e.nextGen, low: low, version: e.version, startedAt: e.now,
		notBefore: t.preemptedAt + e.cfg.PreemptCooldown.Seconds(), input: t.ctxLen + t.partial}
	err := w.srv.Submit(batching.Request{ID: g.id, Input: input, Output: reply - t.partial, MaxNew: e.cfg.MaxNew - t.partial,
		OutputKey: key(t.plan.ID, t.turn, 'r')})
	if err != nil {
		panic(fmt.Sprintf("virtual: %v", err)) // fits checked every input at the start
	}
	e.calls++
	e.inputTokens += int64(g.input)
	g.need = int64(g.input + priority.OutputReserve(e.cfg.MaxNew-t.partial))
	w.inflight += g.need
	w.gens[g.id] = g
	w.running++
	if low {
		w.low = append(w.low, g)
	}
}

// kick starts an iteration on replica r's server if it is idle and has
// work.
func (e *engine) kick(r int) {
	srv := e.ws[r].srv
	if !srv.InFlight() && srv.Busy() {
		e.q.push(srv.Form(e.now), evIteration, r)
	}
}

// iterationEnds applies replica r's iteration and what ended with it.
func (e *engine) iterationEnds(r int) {
	w := e.ws[r]
	for _, d := range w.srv.Finish() {
		g := w.gens[d.ID]
		e.ended(r, g, d)
		e.generated(e.ts[g.t], g, d)
	}
	e.dispatch(r) // kicks the next iteration
}

// ended frees g's slot.
func (e *engine) ended(r int, g *generation, d batching.Done) {
	w := e.ws[r]
	delete(w.gens, g.id)
	w.running--
	w.inflight -= g.need
	if g.low {
		w.low = slices.DeleteFunc(w.low, func(x *generation) bool { return x == g })
	}
	w.generated += int64(d.Generated)
	// Prompt tokens prefilled again: all the prefilled input but what was
	// appended since the trajectory's last generation (the gen-worker's
	// account).
	t := e.ts[g.t]
	fresh := g.input - t.genCtx
	if t.genCtx == 0 {
		fresh = g.input
	}
	if re := d.Prefilled - fresh; re > 0 {
		w.reprefilled += int64(re)
		e.res.Reprefilled += int64(re)
	}
	e.res.Retractions += int64(d.Retracted)
	t.genCtx = g.input + d.Generated
}

// noVersions is the versions of no tokens.
var noVersions = [2]int64{math.MaxInt64, math.MinInt64}

// generated commits what g produced: a whole reply, or (aborted) part of
// one, which goes back to the queue, its partial kept (partial rollout)
// unless a trainer's sync aborted it under Trainer.DiscardPartials.
func (e *engine) generated(t *traj, g *generation, d batching.Done) {
	t.serverS += e.now - t.since
	if d.Generated > 0 {
		t.turnVersions[0] = min(t.turnVersions[0], g.version)
		t.turnVersions[1] = max(t.turnVersions[1], g.version)
	}
	t.partial += d.Generated
	t.genTokens += d.Generated
	t.updatedAt = e.now
	e.dirty = true
	if d.Aborted {
		if e.paused && e.cfg.Trainer != nil && e.cfg.Trainer.DiscardPartials {
			e.discardPartial(t)
		} else {
			e.res.ResumedTokens += int64(d.Generated)
		}
		t.resumed = true
		e.queueGen(g.t) // whoever interrupted it dispatches
		return
	}
	t.versions[0] = min(t.versions[0], t.turnVersions[0])
	t.versions[1] = max(t.versions[1], t.turnVersions[1])
	t.turnVersions = noVersions
	w := e.ws[t.replica]
	w.tokenS = priority.NextTokenS(w.tokenS, e.now-g.startedAt, d.Generated)
	e.pace.SetTokenS(e.names[t.replica], w.tokenS)
	reply := t.plan.Tokens[t.turn] + replyEndTokens
	t.ctx = append(t.ctx, batching.Segment{Key: key(t.plan.ID, t.turn, 'r'), Tokens: reply})
	t.ctxLen += reply
	t.calls++
	t.partial, t.resumed = 0, false
	if t.turn == len(t.plan.Tokens)-1 {
		t.inEval = true
		e.report(t)
		e.admit() // it needs no more KV
		t.since = e.now
		e.q.push(e.now+t.plan.Startup+t.plan.Eval, evResult, g.t)
		return
	}
	obs := t.plan.Obs[t.turn] + obsTemplateTokens
	t.ctx = append(t.ctx, batching.Segment{Key: key(t.plan.ID, t.turn, 'o'), Tokens: obs})
	t.ctxLen += obs
	t.turn++
	e.predict(t)
	e.report(t)
	t.since = e.now
	t.inExec = true
	e.q.push(e.now+t.plan.Exec[t.turn-1], evEnvDone, g.t)
}

// discardPartial drops the tokens of t's current turn that a sync
// interrupted (Trainer.DiscardPartials): all of the turn's partial output,
// what earlier preemptions of the turn kept included, and the weight
// versions they came from; the turn is generated again from its start.
// Its context (prompt, whole replies, observations) is kept, and its gen
// step is still an interrupted one (its resume class): only the tokens are
// lost.
func (e *engine) discardPartial(t *traj) {
	e.res.DiscardedTokens += int64(t.partial)
	t.genTokens -= t.partial
	t.partial = 0
	t.turnVersions = noVersions
	t.genCtx = t.ctxLen // its last generation's output is gone
}

// interrupt aborts g on its server (a preemption or a pause); what it
// generated is committed and it is queued again.
func (e *engine) interrupt(r int, g *generation) {
	d, ok := e.ws[r].srv.Abort(g.id, e.now)
	if !ok {
		panic("virtual: a running generation is not on its server")
	}
	e.ended(r, g, d)
	e.generated(e.ts[g.t], g, d)
}

// finish ends trajectory i: its result is out.
func (e *engine) finish(i int) {
	t := e.ts[i]
	t.envS += e.now - t.since
	t.finished, t.finishedAt = true, e.now
	e.done++
	e.active--
	e.activeIDs = slices.DeleteFunc(e.activeIDs, func(j int) bool { return j == i })
	e.load[e.names[t.replica]]--
	e.history.observe(t.plan.GroupID, t.genTokens, t.calls)
	if e.cfg.Predictor == PredictLearned {
		e.learned.observe(t.asks, predict.Total{Tokens: t.genTokens, Turns: t.calls})
		t.asks = nil
	}
	e.pace.ObserveFinished(e.names[t.replica], t.finishedAt-t.admittedAt, t.genTokens, t.calls)
	e.dirty = true
	if e.cfg.Trainer != nil {
		e.trainer.ready = append(e.trainer.ready, i)
		e.train()
	}
	e.admit()
}

// adapt moves the admission limit as the coordinator does, from the
// gen-workers' counters over the interval.
func (e *engine) adapt() {
	var l priority.Load
	for _, w := range e.ws {
		l.Slots += e.cfg.Slots
		l.Running += w.running
		l.Generated += priority.Grown(w.generated, w.lastGenerated)
		l.Reprefilled += priority.Grown(w.reprefilled, w.lastRe)
		w.lastGenerated, w.lastRe = w.generated, w.reprefilled
	}
	binding := len(e.waitingIDs) > 0 && e.active >= e.limit
	e.limit = priority.NextLimit(e.limit, e.cfg.floor(), e.cfg.ceiling(), l, binding, e.cfg.ReprefillLimit)
	e.admit()
}

// snapshot publishes every replica's high class from the active
// trajectories' facts.
func (e *engine) snapshot() {
	e.dirty = false
	defer e.hold()
	facts := e.facts[:0]
	for _, i := range e.activeIDs {
		t := e.ts[i]
		facts = append(facts, priority.Fact{TrajID: t.plan.ID, Replica: e.names[t.replica], GroupID: t.plan.GroupID,
			AdmittedAt: e.instant(t.admittedAt), Turns: t.calls, Tokens: t.genTokens, Predicted: e.rankValue(t, e.names[t.replica]),
			WaitingSince: e.instant(t.updatedAt)})
	}
	e.facts = facts
	e.snapVer++
	now := e.instant(e.now)
	// Keep the active list in the last ranking's order: the next ranking
	// sorts input that is nearly in order already, which is much faster.
	order := e.policy.Order(facts, now)
	ids := make([]int, len(order))
	for k, j := range order {
		ids[k] = e.activeIDs[j]
	}
	e.activeIDs = ids
	snaps := priority.SnapshotsOf(facts, order, e.cfg.highSlots(), e.snapVer, now)
	for _, name := range e.names {
		s := snaps[name]
		if s == nil {
			s = &priority.Snapshot{Replica: name, Version: e.snapVer, High: map[string]bool{}}
		}
		e.board.Set(s)
	}
}

// pause stops generation for a weight sync: every running generation is
// aborted, its output so far kept, and the servers' caches are flushed.
func (e *engine) pause() {
	e.paused = true
	e.res.Syncs++
	for r, w := range e.ws {
		gens := make([]*generation, 0, len(w.gens))
		for _, g := range w.gens {
			gens = append(gens, g)
		}
		slices.SortFunc(gens, func(a, b *generation) int { return int(a.id - b.id) })
		for _, g := range gens {
			e.interrupt(r, g)
		}
		w.srv.Flush()
	}
}

// resume continues generation under the next weight version.
func (e *engine) resume() {
	e.paused = false
	e.version++
	for r := range e.ws {
		e.dispatch(r)
	}
	e.train() // what finished during the sync, against the new version
	e.admit() // a new version makes room under a staleness bound
}

// sample records the KV pools' use now.
func (e *engine) sample() {
	used := 0.0
	for _, w := range e.ws {
		used += float64(w.srv.Occupancy().Used) / float64(e.cfg.Server.MaxTotalTokens)
	}
	e.res.KVUseSeries = append(e.res.KVUseSeries, used/float64(len(e.ws)))
}

// history is predict.Remaining over the totals of finished trajectories,
// kept in memory as predictor-gw keeps them in Redis.
type history struct {
	global []predict.Total
	groups map[string][]predict.Total
}

func (h *history) observe(group string, tokens, turns int) {
	tot := predict.Total{Tokens: tokens, Turns: turns}
	h.global = keepNewest(h.global, tot)
	if h.groups == nil {
		h.groups = map[string][]predict.Total{}
	}
	h.groups[group] = keepNewest(h.groups[group], tot)
}

func keepNewest(ts []predict.Total, t predict.Total) []predict.Total {
	ts = append([]predict.Total{t}, ts...)
	return ts[:min(len(ts), predict.DefaultKeep)]
}

func (h *history) predict(group string, tokens, turns int) (schema.PredictReply, bool) {
	levels := []predict.Level{
		{Source: predict.SourceGroup, Min: 1, Totals: h.groups[group]},
		{Source: predict.SourceGlobal, Min: predict.DefaultMinGlobal, Totals: h.global},
	}
	p, rt, source, ok := predict.Remaining(levels, tokens, turns)
	return schema.PredictReply{RemainingTokens: p, RemainingTurns: rt, Source: source}, ok
}

// learned is predictor-gw's learned backend in memory: predict.Regression
// with its defaults, refitted as each trajectory finishes.
type learned struct {
	reg   predict.Regression
	model predict.Model
	ready bool
}

func (l *learned) observe(asks []predict.Ask, total predict.Total) {
	if len(asks) == 0 {
		return
	}
	l.reg.Merge(predict.DefaultDecay, predict.Delta(asks, total))
	l.model, l.ready = l.reg.Trained(predict.DefaultLambda, predict.DefaultMinExamples)
}
