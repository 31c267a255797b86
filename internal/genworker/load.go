package genworker

import (
	"context"
	"errors"
	"time"

	"github.com/actloop/actloop/pkg/llm"
	"github.com/actloop/actloop/pkg/priority"
)

// serverLoad is the server's load at the last read (zero when its client
// reads none).
func (w *Worker) serverLoad() llm.Load {
	if l := w.load.Load(); l != nil {
		return *l
	}
	return llm.Load{}
}

// loadLoop reads the server's load every heartbeat interval until ctx
// ends, for the heartbeat: the coordinator sees each replica's KV pool and
// occupancy as the server counts them. A server without the metrics is
// read again, and said once.
func (w *Worker) loadLoop(ctx context.Context) error {
	r, ok := w.gen.(llm.LoadReader)
	if !ok {
		return nil
	}
	t := time.NewTicker(w.cfg.HeartbeatInterval)
	defer t.Stop()
	var warned bool
	for {
		l, err := r.Load(ctx)
		switch {
		case err == nil:
			w.load.Store(&l)
		case ctx.Err() != nil:
			return nil
		case !warned:
			warned = true
			msg := "the inference server reports no load; heartbeats carry none"
			if errors.Is(err, llm.ErrNoMetrics) {
				msg += " (an SGLang server needs --enable-metrics)"
			}
			w.d.Log.Warn(msg, "replica", w.cfg.Replica, "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// limit is how many generations the worker may run now: its slots, or
// by KV (dispatchLimit).
func (w *Worker) limit() int {
	if w.cfg.Scheduling == priority.SchedulingAction && w.cfg.KVBudget > 0 {
		return w.dispatchLimit()
	}
	return w.cfg.Slots
}

// dispatchLimit is how many generations the worker may run now
// (priority.DispatchLimit over its server's pool as last read).
func (w *Worker) dispatchLimit() int {
	return priority.DispatchLimit(w.cfg.Slots, int(w.tracker.inFlight.Load()), w.tracker.inFlightKV.Load(),
		w.serverLoad().CapacityTokens, w.cfg.KVBudget)
}
