package genworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/pkg/schema"
)

// ErrSchedulingMismatch: the worker's ACTLOOP_SCHEDULING differs from the
// coordinator's, as the control state publishes it.
var ErrSchedulingMismatch = errors.New("ACTLOOP_SCHEDULING differs from the coordinator's")

// schedulingCheck compares the worker's ACTLOOP_SCHEDULING with the
// coordinator's. While they differ the worker takes no gen step (Ready),
// hands back one that arrives anyway, sends no heartbeat (so the
// coordinator takes the replica down and moves its trajectories), answers
// 503 on /readyz and reports 1 in actloop_scheduling_mismatch. Until it
// has read the control state once it takes no work either; a state that
// names no mode (none written yet) is not a mismatch.
type schedulingCheck struct {
	own  string
	log  *slog.Logger
	wake func() // a heartbeat, at once

	mu     sync.Mutex
	seen   bool   // the control state was read
	theirs string // the coordinator's, as last seen; "" unknown
}

// observe records the coordinator's mode from c, logging each change of
// agreement: a mismatch at error level, naming both values.
func (s *schedulingCheck) observe(c schema.Control) {
	s.mu.Lock()
	first := !s.seen
	before := s.errLocked()
	s.seen, s.theirs = true, c.Scheduling
	after := s.errLocked()
	s.mu.Unlock()
	switch {
	case after != nil && (before == nil || before.Error() != after.Error()):
		s.log.Error("refusing work: "+after.Error(), "scheduling", s.own, "coordinator_scheduling", c.Scheduling)
	case after == nil && before != nil:
		s.log.Info("ACTLOOP_SCHEDULING agrees with the coordinator's now: taking work again", "scheduling", s.own)
	case !first:
		return
	}
	s.wake()
}

// err is the mismatch, naming both values; nil while they agree.
func (s *schedulingCheck) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.errLocked()
}

func (s *schedulingCheck) errLocked() error {
	if s.theirs == "" || s.theirs == s.own {
		return nil
	}
	return fmt.Errorf("%w: this gen-worker has %s, the coordinator %s; set the same on both", ErrSchedulingMismatch, s.own, s.theirs)
}

// agrees reports whether the worker may take work as far as its mode goes:
// the control state was read, and the modes do not differ.
func (s *schedulingCheck) agrees() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen && s.errLocked() == nil
}

// watch follows the control state until ctx ends.
func (w *Worker) watchScheduling(ctx context.Context) error {
	return bus.WatchControl(ctx, w.d.JS, w.d.Log, w.sched.observe)
}

// withReadiness answers /readyz with 503 and the mismatch while the modes
// differ; everything else (and /readyz otherwise) goes to next.
func (w *Worker) withReadiness(next http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/readyz" {
			if err := w.sched.err(); err != nil {
				http.Error(rw, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		next.ServeHTTP(rw, r)
	})
}
