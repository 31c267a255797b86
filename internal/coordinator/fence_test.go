package coordinator_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/coordinator"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/schema"
)

// A coordinator whose term is over (a later leader took over while it was
// stopped, SIGSTOP past its lease) can no longer write: its fallbacks and
// control-state writes are refused, its Run ends with ErrFenced, and the
// state stays as the later term has it.
func TestDeposedCoordinatorIsFenced(t *testing.T) {
	ctx, s, d := stack(t)
	now := time.Now()
	if err := d.Store.Put(ctx, &traj.Trajectory{ID: "t1", Seq: 1, Status: traj.StatusNeedsGeneration, Replica: "r0",
		Sample: sample("t1"), AdmittedAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if err := d.Store.AddActive(ctx, "t1", traj.ActiveEntry{Replica: "r0"}); err != nil {
		t.Fatal(err)
	}
	cfg := s.CoordinatorConfig()
	cfg.RepublishAfter, cfg.StallTimeout = 0, 0
	old, err := coordinator.NewTerm(ctx, cfg, d, 5)
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan error, 1)
	go func() { ran <- old.Run(rctx) }()

	// The later term takes over: it stamps t1 and the control state.
	if _, err := coordinator.NewTerm(ctx, cfg, d, 6); err != nil {
		t.Fatal(err)
	}
	if err := old.Fallback(ctx, "t1", "stalled: the old term's view"); !errors.Is(err, coordinator.ErrFenced) {
		t.Fatalf("fallback by the old term: %v, want ErrFenced", err)
	}
	v := int64(3)
	if _, err := old.Resume(ctx, schema.ResumeRequest{WeightVersion: &v}); !errors.Is(err, coordinator.ErrFenced) {
		t.Fatalf("resume by the old term: %v, want ErrFenced", err)
	}
	select {
	case err := <-ran:
		if !errors.Is(err, coordinator.ErrFenced) {
			t.Fatalf("the old term's Run: %v, want ErrFenced", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the old term still runs")
	}
	tr, err := d.Store.Load(ctx, "t1", 0)
	if err != nil || tr.Seq != 1 || tr.Status != traj.StatusNeedsGeneration {
		t.Fatalf("t1 after the old term's writes: %+v %v", tr, err)
	}
	e, err := d.JS.KeyValue(ctx, bus.BucketControl)
	if err != nil {
		t.Fatal(err)
	}
	ent, err := e.Get(ctx, bus.KeyControl)
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := schema.Decode[schema.Control](ent.Value())
	if err != nil || ctl.Term != 6 || ctl.WeightVersion != 0 {
		t.Fatalf("control state %+v %v: want term 6's, weight version 0", ctl, err)
	}
}
