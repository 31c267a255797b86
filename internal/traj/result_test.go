package traj_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/schema"
)

// On a nats-server with its default 1 MiB max_payload, a 100k-token
// trajectory's result cannot be published whole: it is answered with a
// fallback that says so (and its group fields), never with nothing; a
// small one goes out whole.
func TestPublishResultTooLarge(t *testing.T) {
	rdb, _ := testkit.StartRedis(t, testkit.PreferredRedis(t))
	st := traj.New(rdb, nil)
	nc, err := nats.Connect(testkit.StartDefaultNATS(t).ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	topo := bus.Topology{Replicas: 1, AckWait: time.Second, MaxDeliver: 1, ResultsAge: time.Hour, DLQAge: time.Hour, Memory: true}
	if err := topo.EnsureStreams(ctx, js); err != nil {
		t.Fatal(err)
	}
	pub := bus.NewPublisher(js)
	put := func(id string, n int) *traj.Trajectory {
		s := sample(id)
		s.GroupID, s.GroupIndex, s.GroupSize = "g", 1, 2
		tr := &traj.Trajectory{ID: id, Status: traj.StatusTerminated, Seq: 9, Reason: "submitted", Reward: 1, Sample: s,
			Tokens: make([]int32, n), Logprobs: make([]float32, n), Mask: make([]int8, n), Versions: make([]int32, n),
			Messages: []schema.Message{}}
		for i := range n {
			tr.Tokens[i], tr.Logprobs[i], tr.Mask[i] = 151000+int32(i%600), -0.123456, 1
		}
		if err := st.Put(ctx, tr); err != nil {
			t.Fatal(err)
		}
		return tr
	}
	for _, tr := range []*traj.Trajectory{put("big", 100_000), put("small", 1_000)} {
		if err := traj.PublishResult(ctx, st, pub, tr, time.Hour, schema.DefaultControl()); err != nil {
			t.Fatalf("%s: %v", tr.ID, err)
		}
	}
	c, err := js.OrderedConsumer(ctx, schema.StreamResults, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]schema.Result{}
	for range 2 {
		m, err := c.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var r schema.Result
		if err := json.Unmarshal(m.Data(), &r); err != nil {
			t.Fatal(err)
		}
		got[r.TrajID] = r
	}
	if r := got["big"]; r.Status != schema.StatusFallback || !strings.HasPrefix(r.Reason, traj.ReasonTooLarge+":") ||
		r.GroupID != "g" || r.GroupIndex != 1 || r.GroupSize != 2 || len(r.Tokens) != 0 || r.Reward != 0 {
		t.Fatalf("big: %s %q group %s/%d/%d, %d tokens", r.Status, r.Reason, r.GroupID, r.GroupIndex, r.GroupSize, len(r.Tokens))
	}
	if r := got["small"]; r.Status != schema.StatusCompleted || len(r.Tokens) != 1_000 || r.Reward != 1 {
		t.Fatalf("small: %s %q, %d tokens", r.Status, r.Reason, len(r.Tokens))
	}
}
