package coordinator

import (
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/priority"
	"github.com/actloop/actloop/pkg/schema"
)

// activeSet is the admitted, unfinished trajectories and what scheduling
// knows of each (its priority.Fact). It owns them under its own lock; every
// method is one short critical section.
type activeSet struct {
	mu       sync.Mutex
	m        map[string]*activeTraj
	dirty    bool  // facts changed since the last snapshot
	stale    int64 // predictions dropped as older than what was known
	finished int64 // trajectories whose result was seen, ever
}

type activeTraj struct {
	entry   traj.ActiveEntry // as the index keeps it: enough for a fallback result
	fact    priority.Fact
	kv      priority.Footprint // its use of KV, from its newest progress report (Replica unset)
	held    bool               // held (priority.KVPools.Hold) at the last snapshot
	turnSeq int64              // newest prediction's seq
	span    trace.Span         // nil when admitted before this process started
	movedAt time.Time          // when moved off a replica that went down
	// republishedAt is when its pending work message was last published
	// again (see Config.RepublishAfter); republished counts how often.
	republishedAt time.Time
	republished   int
}

func newActiveSet() *activeSet {
	return &activeSet{m: map[string]*activeTraj{}, dirty: true}
}

// add records an admitted trajectory; it reports false, changing nothing,
// when id is active already.
func (s *activeSet) add(id string, a *activeTraj) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[id] != nil {
		return false
	}
	s.m[id] = a
	s.dirty = true
	return true
}

// remove forgets id, counting it finished when counted; it returns what
// was known of it (nil when it was not active).
func (s *activeSet) remove(id string, counted bool) *activeTraj {
	s.mu.Lock()
	defer s.mu.Unlock()
	if counted {
		s.finished++
	}
	a := s.m[id]
	delete(s.m, id)
	s.dirty = true
	return a
}

// endSpans ends the trajectory spans still open, marked handed_over: their
// trajectories outlive this coordinator's term (a shutdown, a fail-over).
// Their steps go on in the same traces, as children of these spans (the
// trajectory's stored traceparent), whichever coordinator leads next; ended
// here, the spans are exported, so those traces keep their roots.
func (s *activeSet) endSpans() {
	s.mu.Lock()
	var open []trace.Span
	for _, a := range s.m {
		if a.span != nil {
			open, a.span = append(open, a.span), nil
		}
	}
	s.mu.Unlock()
	for _, span := range open {
		span.SetAttributes(attribute.Bool("handed_over", true))
		span.End()
	}
}

// countFinished adds n trajectories finished before this process started.
func (s *activeSet) countFinished(n int64) {
	s.mu.Lock()
	s.finished += n
	s.mu.Unlock()
}

func (s *activeSet) has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[id] != nil
}

func (s *activeSet) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// admitted is how many training trajectories were admitted so far:
// finished and active (validation rollouts are outside the staleness
// bound).
func (s *activeSet) admitted() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.finished
	for _, a := range s.m {
		if a.entry.Purpose != schema.PurposeValidation {
			n++
		}
	}
	return n
}

func (s *activeSet) ids() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.m))
	for id := range s.m {
		ids = append(ids, id)
	}
	return ids
}

// load counts the active trajectories of each replica.
func (s *activeSet) load() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	load := map[string]int{}
	for _, a := range s.m {
		load[a.fact.Replica]++
	}
	return load
}

// anyOn reports whether the coordinator's view has an active trajectory
// on a replica that down says is down.
func (s *activeSet) anyOn(down func(replica string) bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.m {
		if a.fact.Replica != "" && down(a.fact.Replica) {
			return true
		}
	}
	return false
}

// placed records that id is on replica, as its state says.
func (s *activeSet) placed(id, replica string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a := s.m[id]; a != nil && a.fact.Replica != replica {
		a.fact.Replica = replica
		s.dirty = true
	}
}

// inGroups returns the active trajectories of groups.
func (s *activeSet) inGroups(groups map[string]bool) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id, a := range s.m {
		if groups[a.entry.GroupID] {
			ids = append(ids, id)
		}
	}
	return ids
}

// entry returns what is kept of id for a fallback result, and whether id
// is active.
func (s *activeSet) entry(id string) (traj.ActiveEntry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.m[id]
	if a == nil {
		return traj.ActiveEntry{}, false
	}
	return a.entry, true
}

// moved records that id moved to replica at now; it reports whether id is
// still active.
func (s *activeSet) moved(id, replica string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.m[id]
	if a == nil {
		return false
	}
	a.fact.Replica, a.movedAt = replica, now
	s.dirty = true
	return true
}

// movedSince lists the trajectories moved off a replica since t, with
// when they moved last.
func (s *activeSet) movedSince(t time.Time) map[string]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	moved := map[string]time.Time{}
	for id, a := range s.m {
		if !a.movedAt.IsZero() && !a.movedAt.Before(t) {
			moved[id] = a.movedAt
		}
	}
	return moved
}

// siblingPrediction is a prediction known for a group member that has no
// history of its own yet, which its siblings share; 0 when none.
func (s *activeSet) siblingPrediction(group string) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.m {
		if a.fact.GroupID == group && a.fact.Predicted > 0 && a.fact.Turns == 0 {
			return a.fact.Predicted
		}
	}
	return 0
}

// predicted applies a gen-worker's prediction, dropping one older than
// what is known of the trajectory. A prediction for a newer turn also says
// which replica ran it.
func (s *activeSet) predicted(p schema.Prediction) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.m[p.TrajID]
	if a == nil {
		return // finished meanwhile
	}
	if p.TurnSeq < a.turnSeq {
		s.stale++
		return
	}
	if p.TurnSeq > a.turnSeq && p.Replica != "" {
		a.fact.Replica = p.Replica // a newer turn ran there: stolen by that replica
	}
	a.turnSeq = p.TurnSeq
	a.fact.Turns, a.fact.Tokens, a.fact.WaitingSince = p.Turns, p.GenTokens, p.At
	remaining := a.kv.RemainingTurns // without a new prediction, the last one stands
	if a.kv == (priority.Footprint{}) {
		remaining = -1
	}
	if p.Source != "" || p.Finishing {
		a.fact.Predicted, a.fact.RemainingTurns, remaining = p.RemainingTokens, p.RemainingTurns, p.RemainingTurns
	}
	a.kv = priority.Reported(p, remaining)
	s.dirty = true
}

// footprints returns every active trajectory's use of KV; one with no
// progress report yet is on its replica with nothing known.
func (s *activeSet) footprints() []priority.Footprint {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]priority.Footprint, 0, len(s.m))
	for _, a := range s.m {
		out = append(out, a.footprint())
	}
	return out
}

// footprint is a's use of KV on its replica; nothing known before its
// first progress report.
func (a *activeTraj) footprint() priority.Footprint {
	f := a.kv
	if f == (priority.Footprint{}) {
		f.RemainingTurns = -1 // no report yet
	}
	f.Replica, f.Held = a.fact.Replica, a.held
	return f
}

// republishDue reports whether id's pending work message may be published
// again at now (not within after of the last time), and if so records it
// and returns how many times it was.
func (s *activeSet) republishDue(id string, now time.Time, after time.Duration) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.m[id]
	if a == nil || now.Sub(a.republishedAt) <= after {
		return 0, false
	}
	a.republishedAt = now
	a.republished++
	return a.republished, true
}

// facts returns every active trajectory's fact for a snapshot, and its
// footprint (as footprints), when due (dirty, or force), and marks the set
// clean.
func (s *activeSet) facts(force bool) ([]priority.Fact, []priority.Footprint, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.dirty && !force {
		return nil, nil, false
	}
	facts := make([]priority.Fact, 0, len(s.m))
	kv := make([]priority.Footprint, 0, len(s.m))
	for _, a := range s.m {
		facts = append(facts, a.fact)
		kv = append(kv, a.footprint())
	}
	s.dirty = false
	return facts, kv, true
}

// hold records which trajectories are held (priority.KVPools.Hold) and returns
// how many are.
func (s *activeSet) hold(held map[string]bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for id, a := range s.m {
		a.held = held[id]
		if a.held {
			n++
		}
	}
	return n
}

// touch marks the facts changed (a snapshot that was not published).
func (s *activeSet) touch() {
	s.mu.Lock()
	s.dirty = true
	s.mu.Unlock()
}

func (s *activeSet) stalePredictions() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stale
}
