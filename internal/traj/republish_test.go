package traj_test

import (
	"context"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/schema"
)

// A result whose head the stream lost after storing it (a node restarted
// from storage that had not kept it, a leader that lost it) is stored again
// by the next publish of it (a redelivered finish, the coordinator's
// repair), even within the stream's two-minute duplicate window, which
// still remembers the first head's message id; and a publish of a result
// the stream does hold stores nothing. The loss is made here by deleting
// the head: the stream then answers a publish under the same id as a
// duplicate, without storing it.
func TestPublishResultAgainAfterHeadLost(t *testing.T) {
	rdb, _ := testkit.StartRedis(t, testkit.PreferredRedis(t))
	st := traj.New(rdb, nil)
	ctx := context.Background()
	js, _, w := resultsOn(t)
	stream, err := js.Stream(ctx, schema.StreamResults)
	if err != nil {
		t.Fatal(err)
	}
	heads := func() uint64 {
		t.Helper()
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}

	tr := &traj.Trajectory{ID: "lost-head", Status: traj.StatusTerminated, Seq: 4, Reason: "submitted", Reward: 1,
		Sample: sample("lost-head"), Tokens: []int32{1, 2, 3}, Logprobs: []float32{0, -1, -1}, Mask: []int8{0, 1, 1},
		Versions: []int32{-1, 0, 0}, Messages: []schema.Message{{Role: "user", Content: "fix it"}}, PromptLen: 1}
	if err := st.Put(ctx, tr); err != nil {
		t.Fatal(err)
	}
	if err := traj.PublishResult(ctx, st, w, tr, time.Hour, schema.DefaultControl()); err != nil {
		t.Fatal(err)
	}
	first, err := stream.GetLastMsgForSubject(ctx, schema.SubjectResult(tr.ID))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.DeleteMsg(ctx, first.Sequence); err != nil { // the stream lost it
		t.Fatal(err)
	}

	if err := traj.PublishResult(ctx, st, w, tr, time.Hour, schema.DefaultControl()); err != nil {
		t.Fatal(err)
	}
	again, err := stream.GetLastMsgForSubject(ctx, schema.SubjectResult(tr.ID))
	if err != nil {
		t.Fatalf("the result published again after its head was lost is not on the stream: %v", err)
	}
	if again.Sequence == first.Sequence {
		t.Fatalf("head at seq %d, the one deleted", again.Sequence)
	}
	if _, err := schema.Decode[schema.ResultHead](again.Data); err != nil {
		t.Fatal(err)
	}

	// Held now: a publish again (within the window, or after it under
	// another id) stores no second head.
	if err := traj.PublishResult(ctx, st, w, tr, time.Hour, schema.DefaultControl()); err != nil {
		t.Fatal(err)
	}
	if err := w.Publish(ctx, traj.Result(tr, schema.DefaultControl()), "lost-head:4:result:later"); err != nil {
		t.Fatal(err)
	}
	if n := heads(); n != 1 {
		t.Fatalf("%d heads on the stream, want 1", n)
	}
}
