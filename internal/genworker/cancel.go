package genworker

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/pkg/schema"
)

// A cancelled generation that has not returned is aborted again every
// cancelRetry (an abort that reached the server before its request matched
// nothing), for up to cancelPatience.
const (
	cancelRetry    = 100 * time.Millisecond
	cancelPatience = 10 * time.Second
)

// watchCancels follows actloop.cancel until ctx ends: a generation this
// worker runs for a trajectory that has ended is aborted on the server, so
// its slot is freed at once, and its output is dropped (traj.ErrSkip). A
// message that does not decode is dead-lettered.
func (w *Worker) watchCancels(ctx context.Context) error {
	sub, err := w.d.NC.Subscribe(bus.SubjectCancel, func(m *nats.Msg) {
		c, err := schema.Decode[schema.Cancel](m.Data)
		if err != nil {
			w.d.Log.Warn("malformed cancel dead-lettered", "error", err)
			if err := w.d.Pub.DeadLetterCore(ctx, "gen-worker", m, err.Error()); err != nil && ctx.Err() == nil {
				w.d.Log.Warn("dead-letter a malformed cancel", "error", err)
			}
			return
		}
		for _, g := range w.tracker.cancel(c.TrajIDs) {
			go w.abortCancelled(ctx, g)
		}
	})
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", bus.SubjectCancel, err)
	}
	<-ctx.Done()
	_ = sub.Unsubscribe() // the connection may be closing
	return nil
}

// abortCancelled aborts g on the server, again every cancelRetry while it
// has not returned, for up to cancelPatience.
func (w *Worker) abortCancelled(ctx context.Context, g *generation) {
	ctx, cancel := context.WithTimeout(ctx, cancelPatience)
	defer cancel()
	t := time.NewTicker(cancelRetry)
	defer t.Stop()
	for {
		if err := w.gen.Abort(ctx, g.rid); err != nil && ctx.Err() == nil {
			w.d.Log.Warn("abort a cancelled generation; will try again", "traj_id", g.trajID, "rid", g.rid, "error", err)
		}
		select {
		case <-g.returned:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
