package traj

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/actloop/actloop/internal/bus"
)

// ErrSkip, returned by a Step's Run, drops the step without a commit (for
// example a gen step for a replica the trajectory has moved away from).
var ErrSkip = errors.New("step skipped")

// Driver runs one step of a trajectory under the protocol every worker
// shares: load; a step already committed publishes its follow-up again (if
// it was the last one) or is dropped; otherwise run the step, commit it with
// the seq check, and publish the follow-up.
type Driver struct {
	Store *Store
	// PublishNext publishes the follow-up of a committed state.
	PublishNext func(ctx context.Context, t *Trajectory) error
	Log         *slog.Logger
	// Lease is how long a running step's lease on its trajectory lasts; it
	// is renewed every third of it while the step runs (0: no lease).
	Lease time.Duration

	mu   sync.Mutex
	busy map[string]bool // trajectories with a step running here
}

// Step describes one kind of step to a Driver.
type Step struct {
	Parts Parts // what the step reads beyond the hash
	// More, when set, says what else a trajectory's step reads, known
	// once its hash is (a flow's own needs): the driver loads it before
	// Run, the seq unchanged.
	More func(t *Trajectory) Parts
	Want Status // the status a trajectory waiting for this step has
	// Run does the step's work and returns its transition.
	Run func(ctx context.Context, t *Trajectory) (Transition, error)
	// Discard, when set, is told of a transition that did not commit
	// (another delivery won, or the commit failed), to undo side effects.
	Discard func(ctx context.Context, tr Transition)
}

// ErrBusy is returned, marked bus.Redundant, for a step of a trajectory
// that has a step running in this process already (a second copy of its
// work message: one published again as lost, or redelivered). The copy is
// tried again later and never given up on for it: once the running step
// has committed, the copy finds nothing left to do.
var ErrBusy = errors.New("a step of this trajectory is running here")

// Do runs step s for seq of trajectory id; one step of a trajectory at a
// time in this process.
func (d *Driver) Do(ctx context.Context, id string, seq int64, s Step) error {
	d.mu.Lock()
	if d.busy[id] {
		d.mu.Unlock()
		return bus.Redundant(fmt.Errorf("trajectory %s, step %d: %w", id, seq, ErrBusy))
	}
	if d.busy == nil {
		d.busy = map[string]bool{}
	}
	d.busy[id] = true
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.busy, id)
		d.mu.Unlock()
	}()
	return d.do(ctx, id, seq, s)
}

func (d *Driver) do(ctx context.Context, id string, seq int64, s Step) error {
	t, err := d.Store.Load(ctx, id, s.Parts)
	if errors.Is(err, ErrNotFound) {
		d.Log.WarnContext(ctx, "step for unknown trajectory dropped", "traj_id", id, "seq", seq)
		return nil
	}
	if err != nil {
		return err
	}
	switch PosOf(t, seq) {
	case PosJustDone:
		d.Log.InfoContext(ctx, dupMsg, "traj_id", id, "seq", seq)
		return d.PublishNext(ctx, t)
	case PosOld:
		d.Log.InfoContext(ctx, dupMsg, "traj_id", id, "seq", seq)
		return nil
	case PosAhead:
		return fmt.Errorf("trajectory %s at seq %d is behind step %d", t.ID, t.Seq, seq)
	}
	if t.Status != s.Want {
		if t.Status.Terminal() {
			return nil
		}
		return bus.Malformed(fmt.Errorf("step %d of trajectory %s wants status %s, found %s", seq, t.ID, s.Want, t.Status))
	}
	if s.More != nil {
		if more := s.More(t); more&^s.Parts != 0 {
			full, err := d.Store.Load(ctx, id, s.Parts|more)
			if err != nil {
				return err
			}
			if full.Seq != t.Seq {
				return d.afterStale(ctx, id, seq) // another delivery committed meanwhile
			}
			t = full
		}
	}
	stop := d.holdLease(ctx, id, seq)
	tr, err := s.Run(ctx, t)
	stop()
	if errors.Is(err, ErrSkip) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := d.Store.Commit(ctx, t, tr); err != nil {
		if s.Discard != nil {
			s.Discard(ctx, tr)
		}
		if errors.Is(err, ErrStale) {
			d.Log.InfoContext(ctx, dupMsg, "traj_id", id, "seq", seq, "lost_race", true)
			return d.afterStale(ctx, id, seq)
		}
		return err
	}
	return d.PublishNext(ctx, t)
}

// dupMsg is logged for a delivery of a step already applied: the seq check
// swallowed it.
const dupMsg = "duplicate delivery swallowed: step already applied"

// afterStale handles a commit that lost to another delivery of the same
// step: that delivery may have died before publishing the follow-up, so
// publish it (the duplicate window swallows a second copy).
func (d *Driver) afterStale(ctx context.Context, id string, seq int64) error {
	t, err := d.Store.Load(ctx, id, 0)
	if err != nil {
		return err
	}
	if PosOf(t, seq) == PosJustDone {
		return d.PublishNext(ctx, t)
	}
	return nil
}

// holdLease renews the lease of step seq of trajectory id until the
// returned stop is called: while it holds, the coordinator neither
// publishes the step again nor ends the trajectory as stalled. The first
// renewal comes after a second at most (a third of the lease when that is
// shorter), so a step quicker than that costs no Redis write; then every
// third of the lease.
func (d *Driver) holdLease(ctx context.Context, id string, seq int64) (stop func()) {
	if d.Lease <= 0 {
		return func() {}
	}
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTimer(min(d.Lease/3, time.Second))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if err := d.Store.RenewLease(ctx, id, seq, d.Lease); err != nil && ctx.Err() == nil {
				d.Log.WarnContext(ctx, "step lease not renewed", "traj_id", id, "seq", seq, "error", err)
			}
			t.Reset(d.Lease / 3)
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}
