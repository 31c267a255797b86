package devstack_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/schema"
)

func groupSample(id, group string, index, size int) schema.Sample {
	s := simSample(id)
	s.GroupID, s.GroupIndex, s.GroupSize = group, index, size
	s.Normalize()
	return s
}

// streamed is one message of the results stream.
type streamed struct {
	seq     uint64
	subject string
	msgID   string
	data    []byte
}

// resultsStream reads the whole results stream (results and group
// completions, in stream order). Call it once nothing more is published.
func resultsStream(e *env) []streamed {
	e.t.Helper()
	c, err := e.js.OrderedConsumer(e.ctx, schema.StreamResults, jetstream.OrderedConsumerConfig{})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []streamed
	deadline := time.Now().Add(wait)
	for {
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: stream not read to its end within %v (%d messages)", schema.StreamResults, wait, len(out))
		}
		m, err := c.Next(jetstream.FetchMaxWait(time.Second))
		if err != nil {
			continue
		}
		md, err := m.Metadata()
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, streamed{seq: md.Sequence.Stream, subject: m.Subject(),
			msgID: m.Headers().Get(jetstream.MsgIDHeader), data: m.Data()})
		if md.NumPending == 0 {
			return out
		}
	}
}

// resultsHandled waits until the coordinator has handled and acked every
// result in the stream: every group completion it publishes is stored by
// then (it publishes before it acks).
func resultsHandled(e *env) {
	e.t.Helper()
	cons, err := e.js.Consumer(e.ctx, schema.StreamResults, "coordinator-results")
	if err != nil {
		e.t.Fatal(err)
	}
	testkit.Eventually(e.t, wait, "the coordinator to handle every result", func() bool {
		info, err := cons.Info(e.ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
}

// checkGroups asserts the results stream holds exactly one GroupDone per
// group in want (group id -> traj ids in index order) and no other, each
// after every one of its members' results.
func checkGroups(e *env, want map[string][]string) {
	e.t.Helper()
	msgs := resultsStream(e)
	firstResult := map[string]uint64{} // traj id -> stream seq of its first result
	dones := map[string][]streamed{}
	for _, m := range msgs {
		switch {
		case schema.IsResult(m.subject):
			r, err := schema.Decode[schema.ResultHead](m.data)
			if err != nil {
				e.t.Fatalf("result at %d: %v", m.seq, err)
			}
			if _, ok := firstResult[r.TrajID]; !ok {
				firstResult[r.TrajID] = m.seq
			}
		case schema.IsGroup(m.subject):
			g, err := schema.Decode[schema.GroupDone](m.data)
			if err != nil {
				e.t.Fatalf("group done at %d: %v", m.seq, err)
			}
			dones[g.GroupID] = append(dones[g.GroupID], m)
		}
	}
	for id := range dones {
		if _, ok := want[id]; !ok {
			e.t.Errorf("group done for %s, which is no group", id)
		}
	}
	for id, ids := range want {
		if len(dones[id]) != 1 {
			e.t.Errorf("group %s: %d group-done messages, want 1", id, len(dones[id]))
			continue
		}
		m := dones[id][0]
		g, _ := schema.Decode[schema.GroupDone](m.data)
		if g.Size != len(ids) || !slices.Equal(g.TrajIDs, ids) || g.At.IsZero() {
			e.t.Errorf("group %s: size %d ids %q at %v, want %q", id, g.Size, g.TrajIDs, g.At, ids)
		}
		if m.msgID != "group:"+id {
			e.t.Errorf("group %s: Nats-Msg-Id %q", id, m.msgID)
		}
		for _, tid := range ids {
			if seq, ok := firstResult[tid]; !ok || seq > m.seq {
				e.t.Errorf("group %s done at seq %d, before its member %s (seq %d, found %v)", id, m.seq, tid, seq, ok)
			}
		}
	}
}

// Every group gets exactly one GroupDone, with its members in index order,
// after all of them; a group of one completes with its single result; a
// sample without a group size belongs to no group; a member's result seen
// again adds nothing.
func TestGroupDoneOncePerGroup(t *testing.T) {
	e := newEnv(t, 2)
	if _, err := e.stack.StartCoordinator(e.ctx, e.stack.CoordinatorConfig()); err != nil {
		t.Fatal(err)
	}
	for _, r := range e.stack.Replicas {
		if _, err := e.stack.StartGenWorker(e.ctx, r, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.stack.StartEnvWorker(e.ctx, e.stack.EnvWorkerConfig("env-0")); err != nil {
		t.Fatal(err)
	}
	// Interleaved and out of index order.
	samples := []schema.Sample{
		groupSample("ga-2", "ga", 2, 3), groupSample("gb-0", "gb", 0, 3), groupSample("ga-0", "ga", 0, 3),
		groupSample("solo-0", "solo", 0, 1), groupSample("gb-2", "gb", 2, 3), groupSample("ga-1", "ga", 1, 3),
		groupSample("gb-1", "gb", 1, 3), simSample("plain"),
	}
	e.submit(samples...)
	got := e.results(len(samples))
	resultsHandled(e)
	want := map[string][]string{
		"ga":   {"ga-0", "ga-1", "ga-2"},
		"gb":   {"gb-0", "gb-1", "gb-2"},
		"solo": {"solo-0"},
	}
	checkGroups(e, want)

	// A member's result published again (by a publisher that does not ask
	// for its subject to be empty) completes nothing a second time. No msg
	// id, so the stream keeps the copy.
	again, err := json.Marshal(got["ga-1"])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.Publish(e.ctx, schema.SubjectResult("ga-1"), again); err != nil {
		t.Fatal(err)
	}
	resultsHandled(e)
	checkGroups(e, want)
}

// A coordinator that crashed after recording a group's last member, before
// publishing its GroupDone, leaves the result unacked: the next coordinator
// gets it again and publishes the GroupDone. A group whose GroupDone was
// already published gets none again.
func TestGroupDoneAfterCoordinatorCrash(t *testing.T) {
	e := newEnv(t, 1)
	result := func(id, group string, index, size int) schema.Result {
		return schema.Result{ResultHead: schema.ResultHead{V: schema.Version, TrajID: id, SampleID: id, GroupID: group,
			GroupIndex: index, GroupSize: size, Status: schema.StatusFallback, Reason: "test", MinVersion: -1, MaxVersion: -1},
			Tokens: []int32{}, Logprobs: []float32{}, LossMask: []int8{}, Versions: []int32{}, Messages: []schema.Message{}}
	}
	common := service.CommonDefaults()
	bodies, err := common.Topology().ResultBodies(e.ctx, e.js)
	if err != nil {
		t.Fatal(err)
	}
	results := traj.NewResults(e.pub, bodies)
	// What the crashed coordinators left: members recorded, "sent" also
	// marked published; results still in the stream, unacked.
	for _, g := range []string{"crashed", "sent"} {
		for i, id := range []string{g + "-0", g + "-1"} {
			if _, err := e.st.GroupResult(e.ctx, g, i, id, 2, time.Hour); err != nil {
				t.Fatal(err)
			}
			if err := results.Publish(e.ctx, result(id, g, i, 2), id); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := e.st.GroupPublished(e.ctx, "sent", time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := e.stack.StartCoordinator(e.ctx, e.stack.CoordinatorConfig()); err != nil {
		t.Fatal(err)
	}
	resultsHandled(e)
	checkGroups(e, map[string][]string{"crashed": {"crashed-0", "crashed-1"}})
}
