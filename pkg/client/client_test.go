package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/client"
	"github.com/actloop/actloop/pkg/control"
	"github.com/actloop/actloop/pkg/schema"
)

func TestMain(m *testing.M) { testkit.VerifyNoLeaks(m) }

// wait bounds every poll: generous, for loaded machines.
const wait = time.Minute

// env is an in-process NATS server (its default max_payload, 1 MiB) with
// actloop's streams, a connection for the test and a Client over another.
type env struct {
	ctx     context.Context
	nc      *nats.Conn
	js      jetstream.JetStream
	c       *client.Client
	results *traj.Results // publishes results as the services do
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ns := testkit.StartNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	t.Cleanup(cancel)
	connect := func() *nats.Conn {
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	e := &env{ctx: ctx, nc: connect()}
	var err error
	if e.js, err = jetstream.New(e.nc); err != nil {
		t.Fatal(err)
	}
	common := service.CommonDefaults()
	if err := common.Topology().EnsureStreams(ctx, e.js); err != nil {
		t.Fatal(err)
	}
	bodies, err := common.Topology().ResultBodies(ctx, e.js)
	if err != nil {
		t.Fatal(err)
	}
	e.results = traj.NewResults(bus.NewPublisher(e.js), bodies)
	if e.c, err = client.New(connect()); err != nil {
		t.Fatal(err)
	}
	return e
}

func sample(id string) schema.Sample {
	return schema.Sample{V: schema.Version, ID: id, Task: "task " + id, Env: schema.Env{Backend: schema.BackendSim}}
}

// streamed returns every message in stream, in order.
func (e *env) streamed(t *testing.T, stream string) []jetstream.RawStreamMsg {
	t.Helper()
	s, err := e.js.Stream(e.ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(e.ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, *m)
	}
	return out
}

// Submit publishes each sample with its id as Nats-Msg-Id; submitting a
// sample again under an id the stream stored is refused, naming the id
// and the earlier message, not answered with silence (issue 31, item 6),
// and stores nothing new.
func TestSubmitTwiceIsRefused(t *testing.T) {
	e := newEnv(t)
	samples := []schema.Sample{sample("a"), sample("b"), sample("c")}
	if err := e.c.Submit(e.ctx, samples...); err != nil {
		t.Fatal(err)
	}
	err := e.c.Submit(e.ctx, samples...)
	var se *client.SubmitError
	var taken *client.IDTakenError
	if !errors.As(err, &se) || se.Submitted != 0 || se.ID != "a" || !errors.As(err, &taken) || !errors.Is(err, client.ErrIDTaken) {
		t.Fatalf("second submit: %v, want a SubmitError at sample a wrapping an IDTakenError", err)
	}
	if !strings.Contains(err.Error(), "id a: already used by a sample submitted") || !strings.Contains(err.Error(), "message 1 of "+schema.StreamSamples) {
		t.Errorf("error %q does not name the id and the earlier message", err)
	}
	got := e.streamed(t, schema.StreamSamples)
	if len(got) != len(samples) {
		t.Fatalf("stream holds %d samples, want %d", len(got), len(samples))
	}
	for i, m := range got {
		if m.Subject != schema.SubjectSamples || m.Header.Get(jetstream.MsgIDHeader) != samples[i].ID {
			t.Errorf("message %d: subject %s, Nats-Msg-Id %q, want %s and %q", i, m.Subject,
				m.Header.Get(jetstream.MsgIDHeader), schema.SubjectSamples, samples[i].ID)
		}
		s, err := schema.DecodeSample(m.Data)
		if err != nil || s.ID != samples[i].ID {
			t.Errorf("message %d: %v, id %q", i, err, s.ID)
		}
	}
}

// An id whose result an earlier run left on the results stream is refused
// before anything is published, naming the id and where its result is
// (issue 31, item 5): the run would go to its end, and its result be
// refused.
func TestSubmitRefusesIDOfAnEarlierRun(t *testing.T) {
	e := newEnv(t)
	e.publish(t, "x.1:9:result", result("x.1"))
	err := e.c.Submit(e.ctx, sample("fresh"), sample("x.1"))
	if !errors.Is(err, client.ErrIDTaken) {
		t.Fatalf("submit: %v, want ErrIDTaken", err)
	}
	for _, w := range []string{"nothing submitted", "sample 1", "id x.1: already used by an earlier run", schema.SubjectResult("x.1")} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	if strings.Contains(err.Error(), "fresh") {
		t.Errorf("error %q names a free id", err)
	}
	if got := e.streamed(t, schema.StreamSamples); len(got) != 0 {
		t.Fatalf("stream holds %d samples, want 0", len(got))
	}
	if err := e.c.Submit(e.ctx, sample("fresh")); err != nil {
		t.Fatalf("a free id: %v", err)
	}
}

// Members of a group that share a group_index or disagree on group_size
// are refused at submit, naming the field and the other sample (issue 31,
// item 8); validation rollouts belong to no group.
func TestSubmitRefusesInconsistentGroups(t *testing.T) {
	member := func(id, group string, index, size int) schema.Sample {
		s := sample(id)
		s.GroupID, s.GroupIndex, s.GroupSize = group, index, size
		return s
	}
	validation := member("v", "g", 0, 2)
	validation.Purpose = schema.PurposeValidation
	tests := []struct {
		name    string
		samples []schema.Sample
		want    []string
	}{
		{"index twice", []schema.Sample{member("a", "g", 0, 2), member("b", "g", 0, 2)},
			[]string{"sample 1 (b)", "group_index: 0 of group g is held by sample a"}},
		{"sizes disagree", []schema.Sample{member("a", "g", 0, 2), member("b", "g", 1, 3)},
			[]string{"sample 1 (b)", "group_size: 3, but sample a of group g says 2"}},
		{"index not below size", []schema.Sample{member("a", "g", 2, 2)}, []string{"sample 0 (a)", "group_index: must be < group_size 2"}},
	}
	e := newEnv(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := e.c.Submit(e.ctx, tt.samples...)
			if !errors.Is(err, schema.ErrInvalid) {
				t.Fatalf("error %v, want one wrapping schema.ErrInvalid", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	if got := e.streamed(t, schema.StreamSamples); len(got) != 0 {
		t.Fatalf("stream holds %d samples after refused submits, want 0", len(got))
	}
	if err := e.c.Submit(e.ctx, member("a", "g", 0, 2), member("b", "g", 1, 2), validation); err != nil {
		t.Fatalf("a consistent group: %v", err)
	}
}

// Submit checks every sample first: one bad sample, a repeated id or an
// oversized sample publishes nothing, and the error names each.
func TestSubmitValidatesFirst(t *testing.T) {
	bad := sample("bad")
	bad.Task = ""
	big := sample("big")
	big.Metadata = json.RawMessage(`"` + strings.Repeat("x", schema.MaxSampleBytes) + `"`)
	tests := []struct {
		name    string
		samples []schema.Sample
		want    []string
	}{
		{"invalid", []schema.Sample{sample("a"), bad}, []string{"sample 1 (bad)", "task: missing"}},
		{"repeated id", []schema.Sample{sample("a"), sample("b"), sample("a")}, []string{"sample 2", `"a" repeats sample 0`}},
		{"oversized", []schema.Sample{big}, []string{"sample 0 (big)", "exceeds the sample limit"}},
		{"all reported", []schema.Sample{bad, sample("a"), sample("a")}, []string{"sample 0 (bad)", "sample 2"}},
	}
	e := newEnv(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := e.c.Submit(e.ctx, tt.samples...)
			if !errors.Is(err, schema.ErrInvalid) {
				t.Fatalf("error %v, want one wrapping schema.ErrInvalid", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	if got := e.streamed(t, schema.StreamSamples); len(got) != 0 {
		t.Fatalf("stream holds %d samples after invalid submits, want 0", len(got))
	}
}

// A Submit that cannot reach the stream says how far it got.
func TestSubmitError(t *testing.T) {
	e := newEnv(t)
	if err := e.js.DeleteStream(e.ctx, schema.StreamSamples); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 500*time.Millisecond)
	defer cancel()
	err := e.c.Submit(ctx, sample("a"), sample("b"))
	var se *client.SubmitError
	if !errors.As(err, &se) || se.Submitted != 0 || se.ID != "a" {
		t.Fatalf("error %v, want a SubmitError at sample a", err)
	}
}

func result(id string) schema.Result {
	return schema.Result{ResultHead: schema.ResultHead{V: schema.Version, TrajID: id, SampleID: id, GroupID: "g", GroupSize: 2,
		Status: schema.StatusSubmitted}, Tokens: []int32{1, 2}, Logprobs: []float32{0, -0.5}, LossMask: []int8{0, 1},
		Versions: []int32{-1, 0}, Messages: []schema.Message{}}
}

// publish stores v as a service would: a Result through traj.Results
// (body, then head on its subject), a GroupDone on its group's subject.
func (e *env) publish(t *testing.T, msgID string, v any) {
	t.Helper()
	switch v := v.(type) {
	case schema.Result:
		if err := e.results.Publish(e.ctx, v, msgID); err != nil {
			t.Fatal(err)
		}
	case schema.GroupDone:
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.PublishFirst(e.ctx, e.js, schema.SubjectGroup(v.GroupID), msgID, b); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("publish %T", v)
	}
}

// again stores a second copy of the message on subject, as a publisher
// that does not ask for the subject to be empty would, under a message id
// of its own.
func (e *env) again(t *testing.T, subject string) {
	t.Helper()
	s, err := e.js.Stream(e.ctx, schema.StreamResults)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(e.ctx, subject)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.Publish(e.ctx, subject, m.Data, jetstream.WithMsgID(subject+":again")); err != nil {
		t.Fatal(err)
	}
}

// fetchAll fetches from c until want deliveries have come (or the deadline
// passes), calling f on each.
func fetchAll(t *testing.T, ctx context.Context, c *client.Consumer, want int, f func(*client.Delivery)) {
	t.Helper()
	got := 0
	deadline := time.Now().Add(wait)
	for got < want {
		if time.Now().After(deadline) {
			t.Fatalf("%d deliveries after %v, want %d", got, wait, want)
		}
		for d, err := range c.Fetch(ctx, want-got, 100*time.Millisecond) {
			if err != nil {
				t.Fatal(err)
			}
			f(d)
			got++
		}
	}
}

// The services' consumers of results are refused by name, before the
// server is asked (which would refuse a trainer's user and time out).
func TestServiceConsumersRefused(t *testing.T) {
	e := newEnv(t)
	for _, name := range []string{schema.ConsumerCoordinatorResults, schema.ConsumerPredictorHistory} {
		if _, err := e.c.Results(e.ctx, name); err == nil || !strings.Contains(err.Error(), "a service's consumer") {
			t.Errorf("Results(%q): %v, want it refused", name, err)
		}
		if _, err := e.c.Groups(e.ctx, name); err == nil {
			t.Errorf("Groups(%q): no error", name)
		}
	}
	if _, err := e.c.Results(e.ctx, "trainer"); err != nil {
		t.Fatal(err)
	}
}

// Results delivers every result, not groups, at least once per consumer
// name: a nak'd one comes again, an acknowledged one does not, and another
// name sees them all.
func TestResultsAtLeastOnce(t *testing.T) {
	e := newEnv(t)
	e.publish(t, "a:9:result", result("a"))
	e.publish(t, "b:9:result", result("b"))
	e.publish(t, "group:g", schema.GroupDone{V: schema.Version, GroupID: "g", Size: 2, TrajIDs: []string{"a", "b"}})

	res, err := e.c.Results(e.ctx, "trainer")
	if err != nil {
		t.Fatal(err)
	}
	var first []string
	fetchAll(t, e.ctx, res, 2, func(d *client.Delivery) {
		r, err := d.Result(e.ctx)
		if err != nil {
			t.Fatalf("result %s: %v", d.Data(), err)
		}
		if !schema.IsResult(d.Subject()) {
			t.Errorf("subject %s", d.Subject())
		}
		first = append(first, r.TrajID)
		if r.TrajID == "a" {
			if err := d.Ack(e.ctx); err != nil {
				t.Fatal(err)
			}
		} else if err := d.Nak(); err != nil {
			t.Fatal(err)
		}
	})
	if strings.Join(first, ",") != "a,b" {
		t.Fatalf("first deliveries %v, want a,b in stream order", first)
	}
	// Taken up again by name: only the nak'd result comes back.
	res, err = e.c.Results(e.ctx, "trainer")
	if err != nil {
		t.Fatal(err)
	}
	fetchAll(t, e.ctx, res, 1, func(d *client.Delivery) {
		if r, _ := d.Result(e.ctx); r.TrajID != "b" {
			t.Errorf("redelivered %s, want b", r.TrajID)
		}
		if err := d.Ack(e.ctx); err != nil {
			t.Fatal(err)
		}
	})
	testkit.Eventually(t, wait, "an empty backlog", func() bool {
		b, err := res.Backlog(e.ctx)
		return err == nil && b == client.Backlog{}
	})
	for d, err := range res.Fetch(e.ctx, 10, 100*time.Millisecond) {
		t.Fatalf("after every ack: delivery %v, %v", d, err)
	}
	// Another name has its own position.
	other, err := e.c.Results(e.ctx, "evaluator")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := other.Backlog(e.ctx); err != nil || b.Pending != 2 {
		t.Fatalf("evaluator backlog %+v, %v: want 2 pending", b, err)
	}
}

// Deliveries left when a Fetch loop stops early are handed back at once,
// not after AckWait.
func TestFetchStoppedEarlyNaksTheRest(t *testing.T) {
	e := newEnv(t)
	for _, id := range []string{"a", "b", "c"} {
		e.publish(t, id+":9:result", result(id))
	}
	res, err := e.c.Results(e.ctx, "trainer")
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, wait, "the first result", func() bool {
		for d, err := range res.Fetch(e.ctx, 3, time.Second) {
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Ack(e.ctx); err != nil {
				t.Fatal(err)
			}
			return true // the loop stops after one
		}
		return false
	})
	var rest []string
	fetchAll(t, e.ctx, res, 2, func(d *client.Delivery) {
		r, _ := d.Result(e.ctx)
		rest = append(rest, r.TrajID)
		_ = d.Ack(e.ctx)
	})
	if strings.Join(rest, ",") != "b,c" {
		t.Fatalf("after stopping early: %v, want b,c", rest)
	}
}

// A Fetch whose ctx ends yields the context's error.
func TestFetchCancelled(t *testing.T) {
	e := newEnv(t)
	res, err := e.c.Results(e.ctx, "trainer")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	var got error
	for d, err := range res.Fetch(ctx, 10, wait) {
		if d != nil {
			t.Fatalf("delivery from an empty stream: %s", d.Data())
		}
		got = err
	}
	if !errors.Is(got, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", got)
	}
}

// Groups delivers completed groups only.
func TestGroups(t *testing.T) {
	e := newEnv(t)
	e.publish(t, "a:9:result", result("a"))
	want := schema.GroupDone{V: schema.Version, GroupID: "g", Size: 1, TrajIDs: []string{"a"}}
	e.publish(t, "group:g", want)
	groups, err := e.c.Groups(e.ctx, "trainer-groups")
	if err != nil {
		t.Fatal(err)
	}
	fetchAll(t, e.ctx, groups, 1, func(d *client.Delivery) {
		g, err := d.Group()
		if err != nil || g.GroupID != "g" || strings.Join(g.TrajIDs, ",") != "a" {
			t.Errorf("group %+v, %v; want %+v", g, err, want)
		}
		if err := d.Ack(e.ctx); err != nil {
			t.Fatal(err)
		}
	})
	if b, err := groups.Backlog(e.ctx); err != nil || b != (client.Backlog{}) {
		t.Fatalf("backlog %+v, %v: want none", b, err)
	}
}

// fakeCoordinator answers the control subjects as the coordinator does:
// pause, resume (a version may not go back) and get.
func fakeCoordinator(t *testing.T, nc *nats.Conn) {
	t.Helper()
	ctl := schema.Control{V: schema.Version, WeightVersion: 3}
	reply := func(m *nats.Msg, v any) {
		b, _ := json.Marshal(v)
		_ = m.Respond(b)
	}
	sub, err := nc.Subscribe("actloop.control.*", func(m *nats.Msg) {
		switch m.Subject {
		case schema.SubjectControlPause:
			req, err := schema.DecodeRequest[schema.PauseRequest](m.Data)
			if err != nil {
				reply(m, schema.APIError{Error: err.Error()})
				return
			}
			if req.TimeoutMS == 1 {
				reply(m, schema.APIError{Error: "timed out", Missing: []string{"gen-r1"}})
				return
			}
			ctl.Paused, ctl.Mode = true, req.Mode
			ctl.Epoch++
			reply(m, schema.PauseReply{Epoch: ctl.Epoch, Mode: req.Mode, Workers: 2})
		case schema.SubjectControlResume:
			req, _ := schema.DecodeRequest[schema.ResumeRequest](m.Data)
			if req.WeightVersion != nil && *req.WeightVersion < ctl.WeightVersion {
				reply(m, schema.APIError{Error: fmt.Sprintf("weight version %d: may not go back from %d", *req.WeightVersion, ctl.WeightVersion)})
				return
			}
			if req.WeightVersion != nil {
				ctl.WeightVersion = *req.WeightVersion
			}
			ctl.Paused, ctl.Mode = false, ""
			reply(m, ctl)
		case schema.SubjectControlGet:
			reply(m, schema.ControlStatus{Control: ctl})
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// Pause, Resume and Control are the coordinator's request-reply calls; a
// refusal is a *control.Error, and no coordinator at all is said so.
func TestControl(t *testing.T) {
	e := newEnv(t)
	if _, err := e.c.Control(e.ctx); !errors.Is(err, nats.ErrNoResponders) || !strings.Contains(err.Error(), "no coordinator") {
		t.Fatalf("without a coordinator: %v", err)
	}
	fakeCoordinator(t, e.nc)
	p, err := e.c.Pause(e.ctx, schema.PauseRequest{Mode: schema.PauseDrain})
	if err != nil || p.Epoch != 1 || p.Mode != schema.PauseDrain || p.Workers != 2 {
		t.Fatalf("pause: %+v, %v", p, err)
	}
	if st, err := e.c.Control(e.ctx); err != nil || !st.Control.Paused || st.Control.Epoch != 1 {
		t.Fatalf("control while paused: %+v, %v", st, err)
	}
	var ce *control.Error
	if _, err := e.c.Pause(e.ctx, schema.PauseRequest{Mode: schema.PauseAbort, TimeoutMS: 1}); !errors.As(err, &ce) ||
		len(ce.Missing) != 1 || !strings.Contains(err.Error(), "gen-r1") {
		t.Fatalf("pause that timed out: %v", err)
	}
	old := int64(2)
	if _, err := e.c.Resume(e.ctx, &old); !errors.As(err, &ce) || !strings.Contains(ce.Message, "go back") {
		t.Fatalf("resume to an older version: %v", err)
	}
	v := int64(4)
	c, err := e.c.Resume(e.ctx, &v)
	if err != nil || c.Paused || c.WeightVersion != 4 {
		t.Fatalf("resume: %+v, %v", c, err)
	}
}

// Status sends the token and returns the body; an answer other than 200
// is an *HTTPError.
func TestStatus(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/status" {
			http.NotFound(w, r)
			return
		}
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			http.Error(w, "unauthorized\nmore", http.StatusUnauthorized)
			return
		}
		fmt.Fprintln(w, `{"active":3}`)
	}))
	defer srv.Close()
	ctx := context.Background()
	var he *client.HTTPError
	_, err := (&client.Coordinator{URL: srv.URL}).Status(ctx)
	if !errors.As(err, &he) || he.StatusCode != http.StatusUnauthorized || he.Body != "unauthorized" {
		t.Fatalf("without the token: %v", err)
	}
	body, err := (&client.Coordinator{URL: srv.URL, Token: "s3cret"}).Status(ctx)
	var st struct{ Active int }
	if err != nil || json.Unmarshal(body, &st) != nil || st.Active != 3 {
		t.Fatalf("status %s, %v", body, err)
	}
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	if _, err := (&client.Coordinator{URL: closed.URL}).Status(ctx); err == nil || !strings.Contains(err.Error(), closed.URL) {
		t.Fatalf("unreachable: %v", err)
	}
}

// A late duplicate (a result published again beyond the stream's
// duplicate window, under another message id) never reaches the trainer:
// the Client acknowledges it unseen, by traj_id (groups by group_id).
func TestLateDuplicatesNeverReachTheTrainer(t *testing.T) {
	e := newEnv(t)
	g := schema.GroupDone{V: schema.Version, GroupID: "g", Size: 2, TrajIDs: []string{"a", "b"}}
	e.publish(t, "a:9:result", result("a"))
	e.publish(t, "b:9:result", result("b"))
	e.again(t, schema.SubjectResult("a"))
	e.publish(t, "group:g", g)
	e.again(t, schema.SubjectGroup("g"))
	for _, tc := range []struct {
		name    string
		open    func(context.Context, string) (*client.Consumer, error)
		want    string
		keyOf   func(*client.Delivery) string
		deliver int
	}{
		{"results", e.c.Results, "a,b", func(d *client.Delivery) string { r, _ := d.Result(e.ctx); return r.TrajID }, 2},
		{"groups", e.c.Groups, "g", func(d *client.Delivery) string { g, _ := d.Group(); return g.GroupID }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.open(e.ctx, "trainer-"+tc.name)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			fetchAll(t, e.ctx, c, tc.deliver, func(d *client.Delivery) {
				got = append(got, tc.keyOf(d))
				if err := d.Ack(e.ctx); err != nil {
					t.Fatal(err)
				}
			})
			testkit.Eventually(t, wait, "the duplicate to be acknowledged unseen", func() bool {
				for d, err := range c.Fetch(e.ctx, 10, 100*time.Millisecond) {
					if err != nil {
						t.Fatal(err)
					}
					t.Fatalf("a duplicate reached the trainer: %s", tc.keyOf(d))
				}
				b, err := c.Backlog(e.ctx)
				return err == nil && b == client.Backlog{}
			})
			if strings.Join(got, ",") != tc.want {
				t.Fatalf("delivered %v, want %s once each", got, tc.want)
			}
		})
	}
}

// A trainer's consumer is deleted by the server once nobody pulls from it
// for client.ConsumerInactive: the trainer's user cannot delete
// consumers, and names used once would pile up (issue 31, item 12).
func TestConsumersExpireWhenUnused(t *testing.T) {
	e := newEnv(t)
	for _, open := range []func(context.Context, string) (*client.Consumer, error){e.c.Results, e.c.Groups} {
		if _, err := open(e.ctx, "once"); err != nil {
			t.Fatal(err)
		}
		cons, err := e.js.Consumer(e.ctx, schema.StreamResults, "once")
		if err != nil {
			t.Fatal(err)
		}
		if got := cons.CachedInfo().Config.InactiveThreshold; got != client.ConsumerInactive {
			t.Fatalf("consumer's inactive threshold %v, want %v", got, client.ConsumerInactive)
		}
		if err := e.js.DeleteConsumer(e.ctx, schema.StreamResults, "once"); err != nil {
			t.Fatal(err)
		}
	}
}

// A consumer name is one subject's and one run's: asked for with another,
// it is refused (ErrConsumerConflict) and left as it was; asked for again
// as it is, it is taken up. (No coordinator answers here: the client makes
// the consumer itself, as the coordinator does, through CreateConsumer.)
func TestConsumerNameKeepsItsSubjectAndRun(t *testing.T) {
	e := newEnv(t)
	ask := func(name, subject, run string) error {
		_, err := client.EnsureConsumerRequest(e.ctx, e.nc, e.js, client.ConsumerRequest{Name: name, Subject: subject, Run: run})
		return err
	}
	if err := ask("run-a", schema.SubjectResults, "ra"); err != nil {
		t.Fatal(err)
	}
	if err := ask("run-a", schema.SubjectResults, "ra"); err != nil {
		t.Fatalf("taken up again: %v", err)
	}
	for _, c := range []struct{ subject, run, says string }{
		{schema.SubjectResults, "rb", "consumer run-a reads actloop.results.> of run ra, not actloop.results.> of run rb"},
		{schema.SubjectResults, "", "not actloop.results.> (every run)"},
		{schema.SubjectGroups, "ra", "not actloop.groups.> of run ra"},
	} {
		err := ask("run-a", c.subject, c.run)
		if !errors.Is(err, client.ErrConsumerConflict) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s of run %q: %v, want ErrConsumerConflict saying %q", c.subject, c.run, err, c.says)
		}
	}
	cons, err := e.js.Consumer(e.ctx, schema.StreamResults, "run-a")
	if err != nil {
		t.Fatal(err)
	}
	if cfg := cons.CachedInfo().Config; cfg.FilterSubject != schema.SubjectResults || cfg.Metadata[client.MetaRun] != "ra" {
		t.Errorf("after the refusals: filter %s, run %q", cfg.FilterSubject, cfg.Metadata[client.MetaRun])
	}
	// A consumer made before runs existed (no metadata) is every run's.
	if _, err := e.js.CreateOrUpdateConsumer(e.ctx, schema.StreamResults, client.ConsumerConfig("old", schema.SubjectGroups)); err != nil {
		t.Fatal(err)
	}
	if err := ask("old", schema.SubjectGroups, ""); err != nil {
		t.Errorf("an old consumer taken up: %v", err)
	}
	if err := ask("old", schema.SubjectResults, ""); !errors.Is(err, client.ErrConsumerConflict) {
		t.Errorf("an old consumer of groups asked for results: %v", err)
	}
	if err := ask("bad", schema.SubjectResults, "r.1"); err == nil || errors.Is(err, client.ErrConsumerConflict) {
		t.Errorf("a run with a dot: %v", err)
	}
}

// A run's consumer yields the results and groups of its run's ids alone
// (those that start with run + "."), acknowledging the others unseen, so
// they do not come to it again; a consumer of every run sees them all.
func TestRunResultsYieldTheRunsAlone(t *testing.T) {
	e := newEnv(t)
	for _, id := range []string{"ra.1", "rb.1", "ra.2", "rab.1", "ra"} {
		e.publish(t, id+":9:result", result(id))
	}
	e.publish(t, "group:ra.g", schema.GroupDone{V: schema.Version, GroupID: "ra.g", Size: 1, TrajIDs: []string{"ra.1"}})
	e.publish(t, "group:rb.g", schema.GroupDone{V: schema.Version, GroupID: "rb.g", Size: 1, TrajIDs: []string{"rb.1"}})

	res, err := e.c.RunResults(e.ctx, "ra-results", "ra")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	fetchAll(t, e.ctx, res, 2, func(d *client.Delivery) {
		r, err := d.Result(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r.TrajID)
		if err := d.Ack(e.ctx); err != nil {
			t.Fatal(err)
		}
	})
	if strings.Join(got, ",") != "ra.1,ra.2" {
		t.Fatalf("run ra's results: %v, want ra.1,ra.2", got)
	}
	// The rest of the stream holds no result of run ra.
	for d, err := range res.Fetch(e.ctx, 10, 200*time.Millisecond) {
		if err != nil {
			t.Fatal(err)
		}
		r, _ := d.Result(e.ctx)
		t.Fatalf("run ra's consumer yielded %s", r.TrajID)
	}
	if b, err := res.Backlog(e.ctx); err != nil || b.Pending != 0 || b.Unacked != 0 {
		t.Fatalf("backlog after the run's results: %+v, %v; want the others acknowledged", b, err)
	}
	groups, err := e.c.RunGroups(e.ctx, "ra-groups", "ra")
	if err != nil {
		t.Fatal(err)
	}
	fetchAll(t, e.ctx, groups, 1, func(d *client.Delivery) {
		if g, err := d.Group(); err != nil || g.GroupID != "ra.g" {
			t.Fatalf("run ra's group: %+v, %v", g, err)
		}
	})
	all, err := e.c.Results(e.ctx, "every-run")
	if err != nil {
		t.Fatal(err)
	}
	fetchAll(t, e.ctx, all, 5, func(*client.Delivery) {})
	if _, err := e.c.RunResults(e.ctx, "ra-results", "rb"); !errors.Is(err, client.ErrConsumerConflict) {
		t.Fatalf("run ra's consumer asked for run rb: %v, want ErrConsumerConflict", err)
	}
}
