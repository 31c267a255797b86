package genworker

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/actloop/actloop/pkg/llm"
)

// replicaHealth decides whether the replica's inference server is down: after
// downAfter consecutive failures, counting both generations that failed
// transiently after their retries and failed /health probes. While down the
// worker claims no gen steps and sends no heartbeats (it removes its entry),
// so the coordinator takes the replica down and moves its trajectories; it
// comes back when a /health probe succeeds (a server that has no health
// check is tried again after one interval).
type replicaHealth struct {
	downAfter int // 0: never down
	interval  time.Duration
	check     func(context.Context) error // nil: no health check
	log       *slog.Logger

	mu      sync.Mutex
	fails   int
	down    bool
	changed chan struct{} // signalled (non-blocking) on every transition
	up      chan struct{} // signalled (non-blocking) when the replica comes back
	tokUp   chan struct{} // the same, for the tokenizer check (tokcheck.go)
}

func newReplicaHealth(downAfter int, interval time.Duration, gen llm.Generator, log *slog.Logger) *replicaHealth {
	h := &replicaHealth{downAfter: downAfter, interval: interval, log: log, changed: make(chan struct{}, 1),
		up: make(chan struct{}, 1), tokUp: make(chan struct{}, 1)}
	if hc, ok := gen.(llm.HealthChecker); ok {
		h.check = hc.Health
	}
	return h
}

// isDown reports whether the replica is taken down.
func (h *replicaHealth) isDown() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.down
}

// record counts the outcome of one generation: a transient failure (after
// the client's retries) is a failure; any answer from the server, even a
// rejection, shows it is up.
func (h *replicaHealth) record(err error) {
	if err != nil && !llm.Temporary(err) {
		err = nil
	}
	h.observe(err, false)
}

// observe counts one outcome; a probe's success brings a down replica back.
func (h *replicaHealth) observe(err error, probe bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case err == nil && h.down && probe:
		h.down, h.fails = false, 0
		h.log.Info("inference server is back: serving again")
		h.signal()
		for _, c := range []chan struct{}{h.up, h.tokUp} {
			select {
			case c <- struct{}{}:
			default:
			}
		}
	case err == nil && !h.down:
		if !probe { // a probe's success says nothing of generations failing
			h.fails = 0
		}
	case err != nil:
		h.fails++
		if !h.down && h.downAfter > 0 && h.fails >= h.downAfter {
			h.down = true
			h.log.Warn("inference server is failing: taking the replica down", "failures", h.fails, "error", err)
			h.signal()
		}
	}
}

func (h *replicaHealth) signal() {
	select {
	case h.changed <- struct{}{}:
	default:
	}
}

// run probes the server every interval until ctx ends.
func (h *replicaHealth) run(ctx context.Context) error {
	if h.interval <= 0 || h.downAfter <= 0 {
		return nil
	}
	t := time.NewTicker(h.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if h.check == nil {
			if h.isDown() {
				h.observe(nil, true) // nothing to ask: try again
			}
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, max(h.interval, time.Second))
		err := h.check(pctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		h.observe(err, true)
	}
}
