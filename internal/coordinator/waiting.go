package coordinator

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/actloop/actloop/pkg/priority"
	"github.com/actloop/actloop/pkg/schema"
)

// waitingSample is a sample taken in from the stream and waiting for
// admission; it is stored in Redis so a restarted coordinator keeps it.
type waitingSample struct {
	Sample    schema.Sample `json:"sample"`
	ArrivedAt time.Time     `json:"arrived_at"`
	// Predicted is the remaining tokens from predictor-gw or a sibling; 0 =
	// unknown. Stored with the entry, so a restarted coordinator keeps it.
	Predicted float64 `json:"predicted,omitempty"`
	// PredictedTurns is predictor-gw's remaining turns for it; nil =
	// unknown (a sibling's prediction carries tokens only).
	PredictedTurns *float64 `json:"predicted_turns,omitempty"`
}

// footprint is what KV admission knows of w: nothing of its context yet,
// and its predicted turns when predictor-gw gave them.
func (w *waitingSample) footprint() priority.Footprint {
	f := priority.Footprint{RemainingTurns: -1}
	if w.PredictedTurns != nil {
		f.RemainingTurns = *w.PredictedTurns
	}
	return f
}

// waitingSet is the samples waiting for admission and the admission limit,
// which adapts between a floor and a ceiling. It owns them under its own
// lock.
type waitingSet struct {
	mu    sync.Mutex
	m     map[string]*waitingSample
	limit int
	// generated and reprefilled are the gen-workers' counters at the last
	// adaptation, by worker key.
	generated, reprefilled map[string]int64
}

func newWaitingSet(limit int) *waitingSet {
	return &waitingSet{m: map[string]*waitingSample{}, limit: limit,
		generated: map[string]int64{}, reprefilled: map[string]int64{}}
}

// add records w under id unless it is waiting already; it reports whether
// it added.
func (s *waitingSet) add(id string, w *waitingSample) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[id] != nil {
		return false
	}
	s.m[id] = w
	return true
}

// get returns a copy of id's entry, nil when it is not waiting.
func (s *waitingSet) get(id string) *waitingSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.m[id]
	if w == nil {
		return nil
	}
	c := *w
	return &c
}

// inGroups returns the waiting samples of groups.
func (s *waitingSet) inGroups(groups map[string]bool) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id, w := range s.m {
		if groups[w.Sample.GroupID] {
			ids = append(ids, id)
		}
	}
	return ids
}

func (s *waitingSet) remove(id string) {
	s.mu.Lock()
	delete(s.m, id)
	s.mu.Unlock()
}

func (s *waitingSet) has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[id] != nil
}

func (s *waitingSet) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// countNot counts the waiting samples for which in is false, in called
// without s's lock held.
func (s *waitingSet) countNot(in func(id string) bool) int {
	s.mu.Lock()
	ids := make([]string, 0, len(s.m))
	for id := range s.m {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	n := 0
	for _, id := range ids {
		if !in(id) {
			n++
		}
	}
	return n
}

// siblingPrediction is a prediction known for a waiting sample of group;
// 0 when none.
func (s *waitingSet) siblingPrediction(group string) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.m {
		if w.Sample.GroupID == group && w.Predicted > 0 {
			return w.Predicted
		}
	}
	return 0
}

// predicted records w's predicted length and returns the entry to store.
func (s *waitingSet) predicted(w *waitingSample, remaining, turns float64) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w.Predicted, w.PredictedTurns = remaining, &turns
	return json.Marshal(w)
}

// ranked returns copies of the best n waiting samples in policy's
// admission order (priority.AdmissionOrder: ageing by arrival against the
// newest arrival, not the clock; a prediction may update the entries
// meanwhile), of which at most room training samples when room >= 0
// (validation samples are outside the staleness bound).
func (s *waitingSet) ranked(policy priority.Policy, n, room int) []*waitingSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	facts := make([]priority.Fact, 0, len(s.m))
	for id, w := range s.m {
		facts = append(facts, priority.Fact{TrajID: id, GroupID: w.Sample.GroupID, Family: w.Sample.Family,
			AdmittedAt: w.ArrivedAt, WaitingSince: w.ArrivedAt, Predicted: w.Predicted})
	}
	order := priority.AdmissionOrder(policy, facts)
	out := make([]*waitingSample, 0, min(n, len(order)))
	for _, i := range order {
		if len(out) == n {
			break
		}
		w := *s.m[facts[i].TrajID]
		if !w.Sample.Validation() {
			if room == 0 {
				continue
			}
			room--
		}
		out = append(out, &w)
	}
	return out
}

// bound moves the limit into [floor, ceiling] and returns it.
func (s *waitingSet) bound(floor, ceiling int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limit = min(max(s.limit, floor), ceiling)
	return s.limit
}

func (s *waitingSet) currentLimit() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limit
}

// adapt moves the limit by priority.NextLimit over the gen-workers' counters
// since the last call (workers by key); active is how many trajectories are
// active. It returns the load seen and the limit before and after.
func (s *waitingSet) adapt(workers map[string]schema.Heartbeat, active, floor, ceiling int, reprefillLimit float64) (priority.Load, int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var l priority.Load
	for key, h := range workers {
		l.Slots += h.Slots
		l.Running += h.Running
		l.Generated += priority.Grown(h.GeneratedTokens, s.generated[key])
		l.Reprefilled += priority.Grown(h.ReprefilledTokens, s.reprefilled[key])
		s.generated[key], s.reprefilled[key] = h.GeneratedTokens, h.ReprefilledTokens
	}
	binding := len(s.m) > 0 && active >= s.limit
	from := s.limit
	s.limit = priority.NextLimit(s.limit, floor, ceiling, l, binding, reprefillLimit)
	return l, from, s.limit
}
