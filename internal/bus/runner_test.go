package bus_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/schema"
)

const within = time.Minute

func setup(t *testing.T) (context.Context, jetstream.JetStream, bus.Topology) {
	t.Helper()
	return setupOn(t, testkit.StartNATS(t))
}

// setupOn declares the streams on s and returns a JetStream client of it
// and their topology.
func setupOn(t *testing.T, s *server.Server) (context.Context, jetstream.JetStream, bus.Topology) {
	t.Helper()
	js := testkit.JetStream(t, s)
	topo := bus.Topology{Replicas: 1, AckWait: 2 * time.Second, MaxDeliver: 3, ResultsAge: time.Hour, DLQAge: time.Hour, Memory: true}
	ctx := context.Background()
	for range 2 { // declaring is idempotent
		if err := topo.EnsureStreams(ctx, js); err != nil {
			t.Fatal(err)
		}
	}
	return ctx, js, topo
}

func newRunner(js jetstream.JetStream, topo bus.Topology, name string, slots int, h bus.Handler, src ...jetstream.Consumer) *bus.Runner {
	return &bus.Runner{Name: name, Sources: src, Slots: slots, Handler: h, Publisher: bus.NewPublisher(js),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), AckWait: topo.AckWait, MaxDeliver: topo.MaxDeliver,
		PullWait: 100 * time.Millisecond, StopTimeout: 200 * time.Millisecond}
}

func start(t *testing.T, r *bus.Runner) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func streamMsgs(t *testing.T, ctx context.Context, js jetstream.JetStream, name string) uint64 {
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// Each handler outcome maps to its ack: ok → ack; Malformed → dead letter
// with the original bytes; transient → retried; a copy of a step running
// here (traj.ErrBusy) → retried, never given up on; retries
// exhausted or Fatal → GiveUp; a panic is an error, not a crash.
func TestRunnerOutcomes(t *testing.T) {
	ctx, js, topo := setup(t)
	c, err := topo.Consumer(ctx, js, schema.StreamSamples, "outcomes", schema.SubjectSamples)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	calls := map[string]int{}
	gaveUp := map[string]uint64{}
	h := func(ctx context.Context, m jetstream.Msg) error {
		body := string(m.Data())
		mu.Lock()
		calls[body]++
		n := calls[body]
		mu.Unlock()
		switch body {
		case "ok":
			return nil
		case "bad":
			return bus.Malformed(errors.New("field x: missing"))
		case "flaky":
			if n < 3 {
				return errors.New("try again")
			}
			return nil
		case "fatal":
			return bus.Fatal(errors.New("cannot ever work"))
		case "busy": // another copy of the step runs here: looked at again later, never given up on
			if n < 3 {
				return bus.Redundant(fmt.Errorf("trajectory t1, step 2: %w", traj.ErrBusy))
			}
			return nil
		case "panic":
			panic("boom")
		}
		return errors.New("always fails")
	}
	r := newRunner(js, topo, "outcomes", 4, h, c)
	failReport := true
	r.GiveUp = func(_ context.Context, m jetstream.Msg, err error) error {
		meta, _ := m.Metadata()
		mu.Lock()
		defer mu.Unlock()
		if string(m.Data()) == "doomed" && failReport {
			failReport = false // the first report fails: the message must come back
			return errors.New("events stream unavailable")
		}
		gaveUp[string(m.Data())] = meta.NumDelivered
		return nil
	}
	pub := bus.NewPublisher(js)
	bodies := []string{"ok", "bad", "flaky", "fatal", "panic", "doomed", "busy"}
	for _, b := range bodies {
		if err := pub.PublishRaw(ctx, schema.SubjectSamples, "", []byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	start(t, r)
	testkit.Eventually(t, within, "every message to be settled", func() bool {
		return streamMsgs(t, ctx, js, schema.StreamSamples) == 0
	})
	mu.Lock()
	defer mu.Unlock()
	want := map[string]uint64{"fatal": 1, "panic": 3, "doomed": 4}
	if len(gaveUp) != len(want) {
		t.Fatalf("gave up on %v, want %v", gaveUp, want)
	}
	for k, v := range want {
		if gaveUp[k] != v {
			t.Errorf("gave up on %q at delivery %d, want %d", k, gaveUp[k], v)
		}
	}
	if calls["ok"] != 1 || calls["flaky"] != 3 || calls["bad"] != 1 || calls["busy"] != 3 {
		t.Errorf("calls %v", calls)
	}
	e, _ := firstDeadLetter(t, ctx, js)
	if string(e.Data) != "bad" || !strings.Contains(e.Reason, "field x: missing") || e.Consumer != "outcomes" || e.Subject != schema.SubjectSamples {
		t.Fatalf("dead letter %+v", e)
	}
}

// With a free slot the runner takes the first source before the second.
func TestRunnerPriorityOrder(t *testing.T) {
	ctx, js, topo := setup(t)
	hi, err := topo.Consumer(ctx, js, bus.StreamGen, "p-hi", bus.SubjectGen("r0", "hi"))
	if err != nil {
		t.Fatal(err)
	}
	lo, err := topo.Consumer(ctx, js, bus.StreamGen, "p-lo", bus.SubjectGen("r0", "lo"))
	if err != nil {
		t.Fatal(err)
	}
	pub := bus.NewPublisher(js)
	for _, s := range []string{"lo1", "lo2", "lo3"} {
		if err := pub.PublishRaw(ctx, bus.SubjectGen("r0", "lo"), "", []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []string{"hi1", "hi2", "hi3"} {
		if err := pub.PublishRaw(ctx, bus.SubjectGen("r0", "hi"), "", []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	// Both queues hold their steps before the runner looks.
	testkit.Eventually(t, within, "both consumers to count 3 pending", func() bool {
		for _, c := range []jetstream.Consumer{hi, lo} {
			if info, err := c.Info(ctx); err != nil || info.NumPending != 3 {
				return false
			}
		}
		return true
	})
	var mu sync.Mutex
	var order []string
	r := newRunner(js, topo, "prio", 1, func(_ context.Context, m jetstream.Msg) error {
		mu.Lock()
		order = append(order, string(m.Data()))
		mu.Unlock()
		return nil
	}, hi, lo)
	start(t, r)
	testkit.Eventually(t, within, "all six handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(order) == 6
	})
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(order, ","); got != "hi1,hi2,hi3,lo1,lo2,lo3" {
		t.Fatalf("order %s", got)
	}
}

// The runner never holds more messages than it has slots, and on shutdown
// hands back (naks) what it could not finish, so nothing is lost.
func TestRunnerSlotsAndShutdown(t *testing.T) {
	ctx, js, topo := setup(t)
	c, err := topo.Consumer(ctx, js, bus.StreamEnv, "slots", bus.SubjectEnvStart)
	if err != nil {
		t.Fatal(err)
	}
	pub := bus.NewPublisher(js)
	for range 5 {
		if err := pub.PublishRaw(ctx, bus.SubjectEnvStart, "", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	var running, peak atomic.Int32
	r := newRunner(js, topo, "slots", 2, func(ctx context.Context, _ jetstream.Msg) error {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-ctx.Done() // blocks until the runner gives up on in-flight work
		return ctx.Err()
	}, c)
	stop := start(t, r)
	testkit.Eventually(t, within, "two handlers running", func() bool { return running.Load() == 2 })
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 2 {
		t.Fatalf("ack pending %d with 2 slots", info.NumAckPending)
	}
	stop()
	if peak.Load() != 2 {
		t.Fatalf("peak concurrency %d, want 2", peak.Load())
	}
	// A new runner gets all five: the two in flight were handed back.
	var got atomic.Int32
	start(t, newRunner(js, topo, "slots", 2, func(context.Context, jetstream.Msg) error {
		got.Add(1)
		return nil
	}, c))
	testkit.Eventually(t, within, "all five messages handled after restart", func() bool { return got.Load() == 5 })
	// The last acks reach the server after their handlers return.
	testkit.Eventually(t, within, "the work-queue stream empty once all five are acknowledged", func() bool {
		return streamMsgs(t, ctx, js, bus.StreamEnv) == 0
	})
}

type preemptor struct {
	mu      sync.Mutex
	running map[string]chan struct{} // low work that may be preempted
	order   []string
}

func (p *preemptor) CanPreempt() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.order) > 0
}

func (p *preemptor) Preempt() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.order) == 0 {
		return false
	}
	newest := p.order[len(p.order)-1]
	p.order = p.order[:len(p.order)-1]
	close(p.running[newest])
	return true
}

// With every slot busy on low work, a high message preempts the newest low
// work and runs in its slot.
func TestRunnerPreemptsForHighMessages(t *testing.T) {
	ctx, js, topo := setup(t)
	hi, err := topo.Consumer(ctx, js, bus.StreamGen, "pre-hi", bus.SubjectGen("r0", "hi"))
	if err != nil {
		t.Fatal(err)
	}
	lo, err := topo.Consumer(ctx, js, bus.StreamGen, "pre-lo", bus.SubjectGen("r0", "lo"))
	if err != nil {
		t.Fatal(err)
	}
	p := &preemptor{running: map[string]chan struct{}{}}
	var mu sync.Mutex
	var preempted, ran []string
	r := newRunner(js, topo, "pre", 2, func(ctx context.Context, m jetstream.Msg) error {
		body := string(m.Data())
		if strings.HasPrefix(body, "hi") {
			mu.Lock()
			ran = append(ran, body)
			mu.Unlock()
			return nil
		}
		stop := make(chan struct{})
		p.mu.Lock()
		p.running[body] = stop
		p.order = append(p.order, body)
		p.mu.Unlock()
		select {
		case <-stop:
			mu.Lock()
			preempted = append(preempted, body)
			mu.Unlock()
		case <-ctx.Done():
		}
		return nil
	}, hi, lo)
	r.Preempt = p
	pub := bus.NewPublisher(js)
	for _, b := range []string{"lo1", "lo2"} {
		if err := pub.PublishRaw(ctx, bus.SubjectGen("r0", "lo"), "", []byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	start(t, r)
	testkit.Eventually(t, within, "both slots busy with low work", func() bool {
		if !p.CanPreempt() {
			return false
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.order) == 2
	})
	if err := pub.PublishRaw(ctx, bus.SubjectGen("r0", "hi"), "", []byte("hi1")); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, within, "the high message to run", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ran) == 1
	})
	mu.Lock()
	defer mu.Unlock()
	if len(preempted) != 1 {
		t.Fatalf("preempted %v, want exactly one", preempted)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.order) != 1 || p.order[0] == preempted[0] {
		t.Fatalf("still running %v after preempting %v", p.order, preempted)
	}
}

// An idle Runner with several sources hears a publish on any of them: with
// a PullWait far longer than the test, only the doorbell can bring the
// messages in.
func TestRunnerDoorbell(t *testing.T) {
	ctx, js, topo := setup(t)
	hi, err := topo.Consumer(ctx, js, bus.StreamGen, "bell-hi", bus.SubjectGen("r0", "hi"))
	if err != nil {
		t.Fatal(err)
	}
	lo, err := topo.Consumer(ctx, js, bus.StreamGen, "bell-lo", bus.SubjectGen("r0", "lo"))
	if err != nil {
		t.Fatal(err)
	}
	var got atomic.Int32
	r := newRunner(js, topo, "bell", 2, func(context.Context, jetstream.Msg) error {
		got.Add(1)
		return nil
	}, hi, lo)
	r.PullWait = time.Hour
	start(t, r)
	pub := bus.NewPublisher(js)
	for i, subj := range []string{bus.SubjectGen("r0", "lo"), bus.SubjectGen("r0", "hi"), bus.SubjectGen("r0", "lo")} {
		// Each after the Runner went idle again.
		testkit.Eventually(t, within, "the runner to take what came before", func() bool { return got.Load() == int32(i) })
		if err := pub.PublishRaw(ctx, subj, "", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, within, "all three handled", func() bool { return got.Load() == 3 })
}

// A malformed message close to the server's max_payload (a sample over
// actloop's limit but under NATS's) is dead-lettered once, with its
// original cut to fit and its size and digest kept, and terminated: its
// envelope (base64, a third larger) never exceeds the limit, so it never
// loops.
func TestPoisonMessageNearMaxPayload(t *testing.T) {
	ctx, js, topo := setupOn(t, testkit.StartNATS(t))
	if mp := js.Conn().MaxPayload(); mp != 1<<20 {
		t.Fatalf("max_payload %d, want the default 1 MiB", mp)
	}
	c, err := topo.Consumer(ctx, js, schema.StreamSamples, "poison", schema.SubjectSamples)
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	h := func(context.Context, jetstream.Msg) error {
		calls.Add(1)
		return bus.Malformed(errors.New("sample: over 524288 bytes"))
	}
	body := bytes.Repeat([]byte("x"), 900_000)
	if err := bus.NewPublisher(js).PublishRaw(ctx, schema.SubjectSamples, "", body); err != nil {
		t.Fatal(err)
	}
	start(t, newRunner(js, topo, "poison", 2, h, c))
	testkit.Eventually(t, within, "the poison message to be settled", func() bool {
		return streamMsgs(t, ctx, js, schema.StreamSamples) == 0
	})
	e, m := firstDeadLetter(t, ctx, js)
	sum := sha256.Sum256(body)
	if !e.Truncated || e.Size != len(body) || e.SHA256 != hex.EncodeToString(sum[:]) || len(e.Data) == 0 ||
		!bytes.HasPrefix(body, e.Data) || len(m.Data()) > 1<<20 {
		t.Fatalf("dead letter: truncated %v size %d sha256 %s, %d bytes kept, envelope %d bytes", e.Truncated, e.Size, e.SHA256,
			len(e.Data), len(m.Data()))
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("handled %d times, want once", n)
	}
	if n := streamMsgs(t, ctx, js, schema.StreamDLQ); n != 1 {
		t.Fatalf("%d dead letters, want 1", n)
	}
}

// firstDeadLetter reads the first entry of the dead-letter stream.
func firstDeadLetter(t *testing.T, ctx context.Context, js jetstream.JetStream) (schema.DLQEntry, jetstream.Msg) {
	t.Helper()
	dc, err := js.OrderedConsumer(ctx, schema.StreamDLQ, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := dc.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var e schema.DLQEntry
	if err := json.Unmarshal(m.Data(), &e); err != nil {
		t.Fatal(err)
	}
	return e, m
}

// With a Limit, the Runner runs no more handlers than it says from the
// start, more as it rises and fewer once it falls.
func TestRunnerFollowsLimit(t *testing.T) {
	ctx, js, topo := setup(t)
	c, err := topo.Consumer(ctx, js, bus.StreamEnv, "limit", bus.SubjectEnvStart)
	if err != nil {
		t.Fatal(err)
	}
	pub := bus.NewPublisher(js)
	for range 30 {
		if err := pub.PublishRaw(ctx, bus.SubjectEnvStart, "", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	var running, peak, ended atomic.Int32
	var limit atomic.Int64
	limit.Store(2)
	gate := make(chan struct{})
	r := newRunner(js, topo, "limit", 8, func(ctx context.Context, _ jetstream.Msg) error {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		select {
		case <-gate:
			ended.Add(1)
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, c)
	r.Limit = func() int { return int(limit.Load()) }
	start(t, r)
	testkit.Eventually(t, within, "two handlers running", func() bool { return running.Load() == 2 })
	if info, err := c.Info(ctx); err != nil || info.NumAckPending != 2 {
		t.Fatalf("ack pending %+v %v with a limit of 2", info, err)
	}
	if peak.Load() != 2 {
		t.Fatalf("peak concurrency %d under a limit of 2", peak.Load())
	}
	limit.Store(5)
	testkit.Eventually(t, within, "five running once the limit rose", func() bool { return running.Load() == 5 })
	limit.Store(1)
	testkit.Eventually(t, within, "one running once the limit fell and handlers ended", func() bool {
		if running.Load() > 1 {
			select {
			case gate <- struct{}{}:
			default:
			}
			return false
		}
		info, err := c.Info(ctx)
		return err == nil && running.Load() == 1 && info.NumAckPending == 1
	})
	// Without the limit, one would run only once the 30 ran out.
	if n := ended.Load(); n > 20 {
		t.Fatalf("%d handlers ended before one alone ran", n)
	}
}
