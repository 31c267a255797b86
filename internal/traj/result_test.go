package traj_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/client"
	"github.com/actloop/actloop/pkg/schema"
)

// On a nats-server with its default 1 MiB max_payload, the result of a
// 128k-token trajectory with a 3 MB diff is delivered whole: a head of a
// few hundred bytes on actloop.results, its body in the object store, read
// back identical. Publishing it again stores no second body and no second
// head; a result built again differently is refused by the stream (one
// head per trajectory ever). A body that does not match its head, or is gone, is an error that
// says so, never a wrong result.
func TestPublishResultAnySize(t *testing.T) {
	rdb, _ := testkit.StartRedis(t, testkit.PreferredRedis(t))
	st := traj.New(rdb, nil)
	ctx := context.Background()
	js, bodies, w := resultsOn(t)

	const n = 128 << 10
	s := sample("big")
	s.GroupID, s.GroupIndex, s.GroupSize = "g", 1, 2
	tr := &traj.Trajectory{ID: "big", Status: traj.StatusTerminated, Seq: 9, Reason: "submitted", Reward: 1, Sample: s,
		Tokens: make([]int32, n), Logprobs: make([]float32, n), Mask: make([]int8, n), Versions: make([]int32, n),
		Messages: []schema.Message{{Role: "user", Content: strings.Repeat("fix the bug ", 1000)}},
		Diff:     strings.Repeat("+ a changed line of some file\n", 100_000), PromptLen: 1000}
	for i := range n {
		tr.Tokens[i], tr.Logprobs[i], tr.Versions[i] = 151000+int32(i%600), -float32(i%97)/13, -1
		if i >= 1000 && i%5 != 0 {
			tr.Mask[i], tr.Versions[i] = 1, int32(i/20000)
		}
	}
	if err := st.Put(ctx, tr); err != nil {
		t.Fatal(err)
	}
	if err := traj.PublishResult(ctx, st, w, tr, time.Hour, schema.DefaultControl()); err != nil {
		t.Fatal(err)
	}
	if err := traj.PublishResult(ctx, st, w, tr, time.Hour, schema.DefaultControl()); err != nil { // a redelivery
		t.Fatal(err)
	}
	// Built again later, under a newer weight version (another body) and
	// another message id: the stream keeps the first head, and only it.
	newer := schema.DefaultControl()
	newer.WeightVersion, newer.MaxStaleness, newer.StalePolicy = 10, 1, schema.StaleMask
	if err := w.Publish(ctx, traj.Result(tr, newer), "big:9:result:later"); err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, schema.StreamResults)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("%d heads in the results stream, want 1", info.State.Msgs)
	}
	m, err := stream.GetLastMsgForSubject(ctx, schema.SubjectResult("big"))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Data) > 2<<10 {
		t.Fatalf("head of %d bytes: %s", len(m.Data), m.Data)
	}
	// The redelivery stored no second body; the later result's body (its
	// head refused) is left to the bucket's TTL.
	objects, err := bodies.List(ctx)
	if err != nil || len(objects) != 2 {
		t.Fatalf("%d bodies stored (%v), want 2", len(objects), err)
	}
	got, err := client.NewBodies(js).Decode(ctx, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	want := traj.Result(tr, schema.DefaultControl())
	want.Body = got.Body
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("result read back differs: %d tokens, head %+v", len(got.Tokens), got.ResultHead)
	}
	if got.NumTokens != n || got.GroupID != "g" || got.Body.Size >= int64(len(tr.Diff)) {
		t.Fatalf("head %+v", got.ResultHead)
	}

	// Another body under the head's name: refused by digest.
	name := got.Body.Name
	if _, err := bodies.PutBytes(ctx, name, []byte("not the body")); err != nil {
		t.Fatal(err)
	}
	if _, err := client.NewBodies(js).Decode(ctx, m.Data); !errors.Is(err, schema.ErrBodyMismatch) {
		t.Fatalf("replaced body: %v, want ErrBodyMismatch", err)
	}
	if err := bodies.Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, err := client.NewBodies(js).Decode(ctx, m.Data); !errors.Is(err, client.ErrBodyGone) {
		t.Fatalf("deleted body: %v, want ErrBodyGone", err)
	}
}

// A head's reason is cut to a few KiB, so a failure quoting a large input
// still makes a small head.
func TestPublishResultLongReason(t *testing.T) {
	ctx := context.Background()
	js, _, w := resultsOn(t)
	r := traj.FallbackResult(schema.ResultHead{TrajID: "x", Reason: "step 3 failed: " + strings.Repeat("é", 1<<20)})
	if err := w.Publish(ctx, r, "x:0:result"); err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, schema.StreamResults)
	if err != nil {
		t.Fatal(err)
	}
	m, err := stream.GetLastMsgForSubject(ctx, schema.SubjectResult("x"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := schema.Decode[schema.ResultHead](m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Data) > 8<<10 || !strings.HasPrefix(h.Reason, "step 3 failed: é") || !bytes.HasSuffix([]byte(h.Reason), []byte("…")) {
		t.Fatalf("head of %d bytes, reason %q…", len(m.Data), fmt.Sprint(h.Reason[:40]))
	}
}

// resultsOn starts a nats-server with its default limits and actloop's
// streams, and returns a JetStream, the bucket of result bodies and a
// Results over them.
func resultsOn(t *testing.T) (jetstream.JetStream, jetstream.ObjectStore, *traj.Results) {
	t.Helper()
	nc, err := nats.Connect(testkit.StartNATS(t).ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if nc.MaxPayload() != 1<<20 {
		t.Fatalf("max_payload %d: the tests want nats-server's default", nc.MaxPayload())
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	topo := bus.Topology{Replicas: 1, AckWait: time.Second, MaxDeliver: 1, ResultsAge: time.Hour, DLQAge: time.Hour, Memory: true}
	if err := topo.EnsureStreams(ctx, js); err != nil {
		t.Fatal(err)
	}
	bodies, err := topo.ResultBodies(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	return js, bodies, traj.NewResults(bus.NewPublisher(js), bodies)
}
