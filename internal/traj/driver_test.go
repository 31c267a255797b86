package traj_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/schema"
)

// A second copy of a trajectory's step that arrives while the first runs in
// this process is refused as busy, not run beside it; once the first has
// committed, the copy finds nothing left to do.
func TestDriverOneStepPerTrajectory(t *testing.T) {
	rdb, _ := testkit.StartRedis(t, testkit.PreferredRedis(t))
	st := traj.New(rdb, nil)
	ctx := context.Background()
	s := schema.Sample{V: schema.Version, ID: "t1", Task: "task", Env: schema.Env{Backend: schema.BackendSim}}
	s.Normalize()
	if err := st.Put(ctx, &traj.Trajectory{ID: s.ID, Status: traj.StatusNeedsEnvStep, Sample: s}); err != nil {
		t.Fatal(err)
	}
	published := 0
	d := &traj.Driver{Store: st, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		PublishNext: func(context.Context, *traj.Trajectory) error { published++; return nil }}
	entered, release := make(chan struct{}), make(chan struct{})
	runs := 0
	step := traj.Step{Want: traj.StatusNeedsEnvStep, Run: func(_ context.Context, t *traj.Trajectory) (traj.Transition, error) {
		runs++
		close(entered)
		<-release
		return traj.Observed{Observation: traj.UserTurn{Content: "ok", Tokens: []int32{1}}}, nil
	}}
	first := make(chan error, 1)
	go func() { first <- d.Do(ctx, "t1", 0, step) }()
	<-entered
	if err := d.Do(ctx, "t1", 0, step); !errors.Is(err, traj.ErrBusy) {
		t.Fatalf("second copy while the first runs: %v, want ErrBusy", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := d.Do(ctx, "t1", 0, step); err != nil || runs != 1 {
		t.Fatalf("the copy after the commit: %v, runs %d; want nothing run again", err, runs)
	}
	if published < 1 {
		t.Fatal("the first step's follow-up was not published")
	}
}
