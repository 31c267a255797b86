package genworker

import (
	"container/list"
	"context"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/pkg/priority"
)

// generation is one LLM call of a gen step.
type generation struct {
	// rid is its trajectory's request id, which names this generation on
	// the server: a trajectory has one generation at a time.
	rid       string
	trajID    string
	low       bool
	notBefore time.Time     // not preempted before this (thrash guard)
	elem      *list.Element // in tracker.low while preemptible
	version   int64         // the weight version it runs under (set by start)
	preempted atomic.Bool   // aborted for a high-priority step
	paused    atomic.Bool   // aborted for a pause
	cancelled atomic.Bool   // aborted because its trajectory ended (schema.Cancel)
	kept      atomic.Int64  // tokens a pause abort left to keep; -1 when not aborted by a pause
	returned  chan struct{} // closed when the call returned
	// answered is when the server's answer came in (unix ns; the first
	// byte of its last attempt's, else when the call returned): the end of
	// the server's share of a pause.
	answered atomic.Int64
	// hold, set by a pause that aborts it (under tracker.mu), is closed
	// once the worker has reported paused: the generation's commit waits
	// for it.
	hold chan struct{}
	// slot: its commit holds one of tracker.held (the handler's own).
	slot     bool
	queuedAt time.Time // when its gen step was published (zero: unknown)
	// need is what it is counted to hold in the server's pool: its input
	// and its output reserve (priority.OutputReserve).
	need int64
}

// traceAnswer returns ctx stamping g.answered when an answer to an HTTP
// call made under it starts coming in.
func (g *generation) traceAnswer(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotFirstResponseByte: func() { g.answered.Store(time.Now().UnixNano()) }})
}

func newGeneration() *generation {
	g := &generation{returned: make(chan struct{})}
	g.kept.Store(-1)
	return g
}

// tracker knows the running generations: the low-priority ones in dispatch
// order, so priority.Victim finds the newest one (least work lost) to preempt
// by aborting its request on the inference server; and all of them, so a
// pause finds every one. It is also the gate a generation passes to start:
// closed while paused.
type tracker struct {
	enabled bool
	abort   func(ctx context.Context, rid string) error
	now     func() time.Time

	mu      sync.Mutex
	low     *list.List // of *generation, newest at the back
	running map[*generation]struct{}
	paused  bool
	open    chan struct{} // closed while not paused
	version int64         // weight version of generations started now
	tokenS  float64       // seconds per output token (priority.NextTokenS)

	// held admits the commits a pause held (see pause) heldCommits at a
	// time.
	held chan struct{}

	preemptions   atomic.Int64
	cancelled     atomic.Int64
	resumedTokens atomic.Int64
	wastedTokens  atomic.Int64
	inFlight      atomic.Int64
	inFlightKV    atomic.Int64 // the running generations' needs
	generated     atomic.Int64
	reprefilled   atomic.Int64
}

var _ bus.Preemptor = (*tracker)(nil)

// newTracker returns a tracker that starts paused: nothing generates until
// the first control state says so (a worker that starts during a pause
// starts paused).
func newTracker(enabled bool, abort func(context.Context, string) error, now func() time.Time) *tracker {
	return &tracker{enabled: enabled, abort: abort, now: now, low: list.New(),
		running: map[*generation]struct{}{}, paused: true, open: make(chan struct{}), held: make(chan struct{}, heldCommits)}
}

// start waits while paused, then registers g as running under the current
// weight version. It fails only when ctx ends first.
func (k *tracker) start(ctx context.Context, g *generation) error {
	k.mu.Lock()
	for k.paused {
		open := k.open
		k.mu.Unlock()
		select {
		case <-open:
		case <-ctx.Done():
			return ctx.Err()
		}
		k.mu.Lock()
	}
	g.version = k.version
	k.running[g] = struct{}{}
	if g.low {
		g.elem = k.low.PushBack(g)
	}
	k.mu.Unlock()
	k.inFlight.Add(1)
	k.inFlightKV.Add(g.need)
	return nil
}

// paced folds a whole generation's seconds and output tokens into the
// worker's seconds per token (priority.NextTokenS).
func (k *tracker) paced(seconds float64, tokens int) {
	k.mu.Lock()
	k.tokenS = priority.NextTokenS(k.tokenS, seconds, tokens)
	k.mu.Unlock()
}

// tokenSeconds is the worker's seconds per token so far (0: none yet).
func (k *tracker) tokenSeconds() float64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.tokenS
}

// done records that g's call returned, and returns the channel its
// commit waits for (nil: none): see pause.
func (k *tracker) done(g *generation) <-chan struct{} {
	k.inFlight.Add(-1)
	k.inFlightKV.Add(-g.need)
	k.mu.Lock()
	delete(k.running, g)
	if g.elem != nil {
		k.low.Remove(g.elem)
		g.elem = nil
	}
	hold := g.hold
	k.mu.Unlock()
	close(g.returned)
	return hold
}

// heldCommits is how many commits held by a pause run at once once it has
// reported: a thousand of them at once would compete for the CPU, Redis
// and NATS with the pause's answer to the trainer, and with the resume.
const heldCommits = 8

// afterPause waits until g's commit may go on: once the pause that aborted
// it has reported (hold is closed), and one of the held slots is free.
func (k *tracker) afterPause(ctx context.Context, g *generation, hold <-chan struct{}) {
	select {
	case <-hold:
	case <-ctx.Done():
		return
	}
	select {
	case k.held <- struct{}{}:
		g.slot = true
	case <-ctx.Done():
	}
}

// committed frees the held slot g's commit took, if any; its handler calls
// it once the step is done.
func (k *tracker) committed(g *generation) {
	if g.slot {
		g.slot = false
		<-k.held
	}
}

// pause closes the gate and returns the generations running now; with
// abort each is marked for a pause abort (its handler then keeps the
// partial output), and no longer preemptible, and its commit waits until
// hold is closed, once the worker has reported paused, then goes on a few
// at a time (afterPause): a thousand commits of partial outputs would
// otherwise compete for the CPU, Redis and NATS with the last answers'
// arrival and the report itself.
func (k *tracker) pause(abort bool, hold chan struct{}) []*generation {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.paused {
		k.paused = true
		k.open = make(chan struct{})
	}
	gens := make([]*generation, 0, len(k.running))
	for g := range k.running {
		gens = append(gens, g)
		if abort {
			g.paused.Store(true)
			if g.hold == nil { // else an earlier pause's holds it
				g.hold = hold
			}
			if g.elem != nil {
				k.low.Remove(g.elem)
				g.elem = nil
			}
		}
	}
	return gens
}

// cancel marks the running generations of trajectories ids as cancelled,
// no longer preemptible, and returns them.
func (k *tracker) cancel(ids []string) []*generation {
	set := make(map[string]bool, len(ids))
	for _, id := range ids {
		set[id] = true
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	var gens []*generation
	for g := range k.running {
		if set[g.trajID] {
			g.cancelled.Store(true)
			if g.elem != nil {
				k.low.Remove(g.elem)
				g.elem = nil
			}
			gens = append(gens, g)
		}
	}
	return gens
}

// resume opens the gate; generations started from now on run under
// version.
func (k *tracker) resume(version int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.version = version
	if k.paused {
		k.paused = false
		close(k.open)
	}
}

// isPaused reports whether the gate is closed.
func (k *tracker) isPaused() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.paused
}

// newestEligible returns the low generation priority.Victim picks now, or
// nil. Callers hold k.mu.
func (k *tracker) newestEligible() *list.Element {
	elems := make([]*list.Element, 0, k.low.Len())
	notBefore := make([]time.Time, 0, k.low.Len())
	for e := k.low.Front(); e != nil; e = e.Next() {
		elems = append(elems, e)
		notBefore = append(notBefore, e.Value.(*generation).notBefore)
	}
	if i := priority.Victim(notBefore, k.now()); i >= 0 {
		return elems[i]
	}
	return nil
}

// CanPreempt implements bus.Preemptor.
func (k *tracker) CanPreempt() bool {
	if !k.enabled {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.newestEligible() != nil
}

// Preempt implements bus.Preemptor: it aborts the newest eligible low
// generation; its handler commits the partial output and re-queues it.
func (k *tracker) Preempt() bool {
	if !k.enabled {
		return false
	}
	k.mu.Lock()
	e := k.newestEligible()
	if e == nil {
		k.mu.Unlock()
		return false
	}
	g := e.Value.(*generation)
	k.low.Remove(e)
	g.elem = nil
	g.preempted.Store(true)
	k.mu.Unlock()
	k.preemptions.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// If the abort fails, the generation finishes normally and its slot
	// frees then: nothing is lost, the high step only waits longer.
	_ = k.abort(ctx, g.rid)
	return true
}

// Stats are a gen-worker's preemption counters.
type Stats struct {
	Running       int64 `json:"running"`
	Preemptions   int64 `json:"preemptions"`
	ResumedTokens int64 `json:"resumed_tokens"` // partial output kept across a preemption and continued
	WastedTokens  int64 `json:"wasted_tokens"`  // output thrown away (a generation the server aborted on its own)
	// GeneratedTokens and ReprefilledTokens: tokens generated, and prompt
	// tokens the server had to prefill again (evicted from its prefix cache).
	GeneratedTokens   int64 `json:"generated_tokens"`
	ReprefilledTokens int64 `json:"reprefilled_tokens"`
	// Stolen counts gen steps taken from another replica's queue (ACTLOOP_STEAL).
	Stolen int64 `json:"stolen"`
	// HeldSteps counts gen steps handed back because their trajectory was
	// held (priority.KVPools.Hold), each delivery.
	HeldSteps int64 `json:"held_steps"`
	// Restarts counts trajectories started again because they went stale
	// (ACTLOOP_STALE_POLICY=restart).
	Restarts int64 `json:"restarts"`
	// Cancelled counts generations aborted on the server because the
	// trainer aborted their trajectory (actloop.cancel).
	Cancelled int64 `json:"cancelled"`
	// DispatchP50MS and DispatchP99MS are over the last 8,192 generations:
	// from the gen step's publish to the generation's start (queueing,
	// the pull, loading the trajectory, a pause).
	DispatchP50MS float64 `json:"dispatch_p50_ms"`
	DispatchP99MS float64 `json:"dispatch_p99_ms"`
}

func (k *tracker) stats() Stats {
	return Stats{Running: k.inFlight.Load(), Preemptions: k.preemptions.Load(), Cancelled: k.cancelled.Load(),
		ResumedTokens: k.resumedTokens.Load(), WastedTokens: k.wastedTokens.Load(),
		GeneratedTokens: k.generated.Load(), ReprefilledTokens: k.reprefilled.Load()}
}
