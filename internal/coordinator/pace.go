package coordinator

import (
	"sync"

	"github.com/actloop/actloop/pkg/priority"
	"github.com/actloop/actloop/pkg/schema"
)

// paceView is the coordinator's priority.Pace: seconds per token from the
// gen-workers' heartbeats, the time of a turn outside generation from
// finished trajectories. It owns it under its own lock.
type paceView struct {
	mu   sync.Mutex
	pace priority.Pace
}

// finished learns from a completed trajectory (priority.Pace.ObserveFinished).
func (v *paceView) finished(replica string, seconds float64, tokens, turns int) {
	v.mu.Lock()
	v.pace.ObserveFinished(replica, seconds, tokens, turns)
	v.mu.Unlock()
}

// inSeconds turns the facts' predicted tokens into predicted seconds at
// each replica's pace, the replicas' seconds per token being the mean of
// their gen-workers' last heartbeats.
func (v *paceView) inSeconds(facts []priority.Fact, workers map[string]schema.Heartbeat) {
	sum, n := map[string]float64{}, map[string]int{}
	for _, h := range workers {
		if h.TokenSeconds > 0 {
			sum[h.Replica] += h.TokenSeconds
			n[h.Replica]++
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for r, s := range sum {
		v.pace.SetTokenS(r, s/float64(n[r]))
	}
	for i := range facts {
		f := &facts[i]
		f.Predicted = v.pace.Seconds(f.Replica, f.Predicted, f.RemainingTurns)
	}
}
