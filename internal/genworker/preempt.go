package genworker

import (
	"container/list"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/actloop/actloop/pkg/bus"
)

// generation is one running LLM call.
type generation struct {
	rid       string
	low       bool
	notBefore time.Time     // not preempted before this (thrash guard)
	elem      *list.Element // in tracker.low while preemptible
	preempted atomic.Bool
}

// tracker knows the running low-priority generations in dispatch order, so
// the newest one (least work lost) is found in O(1), and preempts it by
// aborting its request on the inference server.
type tracker struct {
	enabled bool
	abort   func(ctx context.Context, rid string) error
	now     func() time.Time

	mu  sync.Mutex
	low *list.List // of *generation, newest at the back

	preemptions   atomic.Int64
	resumedTokens atomic.Int64
	wastedTokens  atomic.Int64
	running       atomic.Int64
	generated     atomic.Int64
	reprefilled   atomic.Int64
}

var _ bus.Preemptor = (*tracker)(nil)

func newTracker(enabled bool, abort func(context.Context, string) error, now func() time.Time) *tracker {
	return &tracker{enabled: enabled, abort: abort, now: now, low: list.New()}
}

func (k *tracker) start(g *generation) {
	k.running.Add(1)
	if !g.low {
		return
	}
	k.mu.Lock()
	g.elem = k.low.PushBack(g)
	k.mu.Unlock()
}

func (k *tracker) done(g *generation) {
	k.running.Add(-1)
	k.mu.Lock()
	if g.elem != nil {
		k.low.Remove(g.elem)
		g.elem = nil
	}
	k.mu.Unlock()
}

// newestEligible returns the newest low generation that may be preempted
// now. Callers hold k.mu.
func (k *tracker) newestEligible() *list.Element {
	now := k.now()
	for e := k.low.Back(); e != nil; e = e.Prev() {
		if g := e.Value.(*generation); !now.Before(g.notBefore) {
			return e
		}
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
}

func (k *tracker) stats() Stats {
	return Stats{Running: k.running.Load(), Preemptions: k.preemptions.Load(),
		ResumedTokens: k.resumedTokens.Load(), WastedTokens: k.wastedTokens.Load(),
		GeneratedTokens: k.generated.Load(), ReprefilledTokens: k.reprefilled.Load()}
}
