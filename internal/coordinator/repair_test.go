package coordinator_test

import (
	"testing"
	"time"

	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/schema"
)

// A trajectory that ended and whose result the stream stored, then lost
// before the coordinator saw it (a NATS node restarted from storage that
// had not kept it; a leader that lost it), still ends with its result on
// the stream: the coordinator's repair publishes it again, and the stream
// stores it although its duplicate window still remembers the first
// head's message id. It is then counted once and leaves the active set.
func TestRepairsResultLostFromStream(t *testing.T) {
	ctx, s, d := stack(t)
	tr := &traj.Trajectory{ID: "unseen", Seq: 3, Status: traj.StatusTerminated, Replica: "r0", Reason: "submitted",
		Reward: 1, Sample: sample("unseen"), AdmittedAt: time.Now(), UpdatedAt: time.Now(), Tokens: []int32{1, 2},
		Logprobs: []float32{-0.5, -0.25}, Mask: []int8{0, 1}, Versions: []int32{-1, 2}, PromptLen: 1}
	if err := d.Store.Put(ctx, tr); err != nil {
		t.Fatal(err)
	}
	if err := d.Store.AddActive(ctx, tr.ID, traj.ActiveEntry{Replica: "r0"}); err != nil {
		t.Fatal(err)
	}
	// Its env-worker published the result, and the stream lost the head.
	if err := traj.PublishResult(ctx, d.Store, d.Results, tr, time.Hour, schema.DefaultControl()); err != nil {
		t.Fatal(err)
	}
	stream, err := d.JS.Stream(ctx, schema.StreamResults)
	if err != nil {
		t.Fatal(err)
	}
	lost, err := stream.GetLastMsgForSubject(ctx, schema.SubjectResult(tr.ID))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.DeleteMsg(ctx, lost.Sequence); err != nil {
		t.Fatal(err)
	}

	cfg := s.CoordinatorConfig()
	cfg.ResultGrace = time.Second
	c, err := s.StartCoordinator(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Within the wait, which is shorter than the duplicate window (2 min):
	// a republish the stream swallows as a duplicate never gets here.
	testkit.Eventually(t, wait, "the result on the stream again and the trajectory counted", func() bool {
		if _, err := stream.GetLastMsgForSubject(ctx, schema.SubjectResult(tr.ID)); err != nil {
			return false
		}
		st, err := c.Status(ctx)
		act, aerr := d.Store.Active(ctx)
		_, active := act[tr.ID]
		return err == nil && aerr == nil && st.Finished[schema.StatusSubmitted] == 1 && !active
	})
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("%d messages on the results stream, want the one head", info.State.Msgs)
	}
}
