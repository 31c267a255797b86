package coordinator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/devstack"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/client"
	"github.com/actloop/actloop/pkg/priority"
	"github.com/actloop/actloop/pkg/schema"
)

const wait = time.Minute

func stack(t *testing.T) (context.Context, *devstack.Stack, *service.Deps) {
	t.Helper()
	common := service.CommonDefaults()
	common.PullWait = 100 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	s, err := devstack.StartInfra(ctx, devstack.Options{Dir: t.TempDir(), RedisKind: testkit.PreferredRedis(t),
		Replicas: 2, Slots: 2, EnvSlots: 1, Common: common, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := s.Wait(); err != nil {
			t.Error(err)
		}
		s.Close()
	})
	d, err := s.Deps(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return ctx, s, d
}

func sample(id string) schema.Sample {
	s := schema.Sample{V: schema.Version, ID: id, Task: "t", Env: schema.Env{Backend: schema.BackendSim}}
	s.Normalize()
	return s
}

// first waits for the first message in stream (work-queue streams allow no
// second consumer, so it reads the stream directly) and decodes it.
func first[T any](t *testing.T, ctx context.Context, js jetstream.JetStream, stream string) T {
	t.Helper()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	var seq uint64
	testkit.Eventually(t, wait, "a message in "+stream, func() bool {
		info, err := st.Info(ctx)
		if err != nil || info.State.Msgs == 0 {
			return false
		}
		seq = info.State.FirstSeq
		return true
	})
	m, err := st.GetMsg(ctx, seq)
	if err != nil {
		t.Fatal(err)
	}
	var v T
	if err := json.Unmarshal(m.Data, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// Admission assigns the least-loaded replica, creates the state and
// publishes the start; MAX_ACTIVE bounds what is admitted and the rest waits
// in the samples stream.
func TestAdmission(t *testing.T) {
	ctx, s, d := stack(t)
	cfg := s.CoordinatorConfig()
	cfg.MaxActive = 3
	c, err := s.StartCoordinator(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		if err := d.Pub.Publish(ctx, schema.SubjectSamples, id, sample(id)); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, wait, "three admitted, two queued", func() bool {
		st, err := c.Status(ctx)
		return err == nil && st.Active == 3 && st.Queued == 2
	})
	st, _ := c.Status(ctx)
	if st.Replicas[0].Active+st.Replicas[1].Active != 3 || st.Replicas[0].Active == 0 || st.Replicas[1].Active == 0 {
		t.Fatalf("replica load %+v: want both used", st.Replicas)
	}
	act, err := d.Store.Active(ctx)
	if err != nil || len(act) != 3 {
		t.Fatalf("active set %v %v", act, err)
	}
	for id := range act {
		tr, err := d.Store.Load(ctx, id, traj.WithAll)
		if err != nil || tr.Status != traj.StatusStarting || tr.Seq != 0 || tr.Replica == "" {
			t.Fatalf("state of %s: %+v %v", id, tr, err)
		}
	}
	start := first[schema.EnvStep](t, ctx, d.JS, bus.StreamEnv)
	if start.Kind != schema.EnvStart || start.Seq != 0 {
		t.Fatalf("first env message %+v", start)
	}
}

// A trajectory that ended but whose result was never published (its worker
// died between the final commit and the publish) gets its result from the
// coordinator; a failure report for a step that did commit re-sends the
// step's follow-up instead of ending the trajectory.
func TestRepairs(t *testing.T) {
	ctx, s, d := stack(t)
	orphan := sample("orphan")
	if err := d.Store.Put(ctx, &traj.Trajectory{ID: "orphan", Seq: 1, Status: traj.StatusTerminated, Replica: "r0",
		Reason: "submitted", Reward: 1, Sample: orphan, AdmittedAt: time.Now(), UpdatedAt: time.Now(), Tokens: []int32{1, 2}, Logprobs: []float32{-0.5, -0.25},
		Mask: []int8{1, 1}, Versions: []int32{7, 7}}); err != nil {
		t.Fatal(err)
	}
	if err := d.Store.AddActive(ctx, "orphan", traj.ActiveEntry{Replica: "r0"}); err != nil {
		t.Fatal(err)
	}
	moved := sample("moved")
	if err := d.Store.Put(ctx, &traj.Trajectory{ID: "moved", Seq: 1, Status: traj.StatusNeedsGeneration, Replica: "r1", AdmittedAt: time.Now(), UpdatedAt: time.Now(),
		Sample: moved}); err != nil {
		t.Fatal(err)
	}
	if err := d.Store.AddActive(ctx, "moved", traj.ActiveEntry{Replica: "r1"}); err != nil {
		t.Fatal(err)
	}

	cfg := s.CoordinatorConfig()
	cfg.ResultGrace = time.Second
	c, err := s.StartCoordinator(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	failed := schema.Event{V: schema.Version, Type: schema.EventFailed, TrajID: "moved", Seq: 0, Worker: "w", Reason: "publish failed"}
	if err := d.Pub.Publish(ctx, bus.SubjectEvents, "", failed); err != nil {
		t.Fatal(err)
	}
	g := first[schema.GenStep](t, ctx, d.JS, bus.StreamGen)
	if g.TrajID != "moved" || g.Seq != 1 || g.Replica != "r1" {
		t.Fatalf("re-sent step %+v", g)
	}
	h := first[schema.ResultHead](t, ctx, d.JS, schema.StreamResults)
	r, err := client.NewBodies(d.JS).Result(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	if r.TrajID != "orphan" || r.Status != schema.StatusSubmitted || r.Reward != 1 || r.MinVersion != 7 || len(r.Tokens) != 2 {
		t.Fatalf("repaired result %+v", r)
	}
	testkit.Eventually(t, wait, "the orphan to leave the active set", func() bool {
		st, err := c.Status(ctx)
		act, aerr := d.Store.Active(ctx)
		_, active := act["orphan"]
		return err == nil && aerr == nil && st.Finished[schema.StatusSubmitted] == 1 && !active
	})
}

// Predictions feed the live view; the newest per-replica high class lands in
// NATS KV; a prediction older than what is known is dropped.
func TestPredictionsDriveSnapshots(t *testing.T) {
	ctx, s, d := stack(t)
	cfg := s.CoordinatorConfig()
	cfg.Replicas, cfg.Policy, cfg.HighSlots = []string{"r0"}, "lpt", 1
	cfg.SnapshotInterval = 20 * time.Millisecond
	cfg.PredictTimeout = 0
	// No gen-worker heartbeats here: r0 stays live for the test's length
	// (by default it is down after 15 s without one, and its trajectories
	// move, which a loaded machine can reach before the last prediction).
	cfg.ReplicaTimeout = time.Hour
	c, err := s.StartCoordinator(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c"} {
		if err := d.Pub.Publish(ctx, schema.SubjectSamples, id, sample(id)); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, wait, "three admitted", func() bool { return c.ActiveCount() == 3 })
	predict := func(id string, seq int64, remaining float64) {
		t.Helper()
		p := schema.Prediction{V: schema.Version, TrajID: id, Replica: "r0", TurnSeq: seq, Turns: 1, GenTokens: 10,
			RemainingTokens: remaining, Source: "history:group", At: time.Now()}
		if err := d.Pub.Publish(ctx, bus.SubjectPredictions, "", p); err != nil {
			t.Fatal(err)
		}
	}
	kv, err := d.JS.KeyValue(ctx, bus.BucketPriority)
	if err != nil {
		t.Fatal(err)
	}
	high := func(want string) func() bool {
		return func() bool {
			e, err := kv.Get(ctx, "r0")
			if err != nil {
				return false
			}
			snap, err := priority.DecodeSnapshot(e.Value())
			return err == nil && len(snap.High) == 1 && snap.High[want]
		}
	}
	predict("a", 2, 100)
	predict("b", 2, 500)
	predict("c", 2, 50)
	testkit.Eventually(t, wait, "b (longest) in the high class", high("b"))
	// b may be high before its prediction is read (an unpredicted one
	// ranks at the median), and predictions are handled concurrently: one
	// older than what is known of b is dropped and counted once b's second
	// turn is known, so send it until it is.
	testkit.Eventually(t, wait, "the stale prediction counted", func() bool {
		predict("b", 1, 1)
		st, err := c.Status(ctx)
		return err == nil && st.StalePredictions >= 1
	})
	predict("a", 3, 1000)
	testkit.Eventually(t, wait, "a (now longest) in the high class", high("a"))
}

// With no predictor-gw answering, lpt admission falls back to arrival order
// and counts the failures instead of stalling.
func TestAdmissionWithoutPredictor(t *testing.T) {
	ctx, s, d := stack(t)
	cfg := s.CoordinatorConfig()
	cfg.Policy, cfg.PredictTimeout = "lpt", 50*time.Millisecond
	c, err := s.StartCoordinator(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"p1", "p2"} {
		if err := d.Pub.Publish(ctx, schema.SubjectSamples, id, sample(id)); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, wait, "both admitted with the failures counted", func() bool {
		st, err := c.Status(ctx)
		return err == nil && st.Active == 2 && st.PredictorFailures >= 2
	})
}

// beater writes gen-worker heartbeats of replicas reporting their pools.
func beater(t *testing.T, ctx context.Context, d *service.Deps) func(replica string, pool int) {
	hearts, err := d.JS.KeyValue(ctx, bus.BucketHeartbeats)
	if err != nil {
		t.Fatal(err)
	}
	return func(replica string, pool int) {
		t.Helper()
		b, _ := json.Marshal(schema.Heartbeat{V: schema.Version, Worker: "w", Replica: replica, Slots: 2, ServerKVTokens: pool, At: time.Now()})
		if _, err := hearts.Put(ctx, "gen."+replica+".w", b); err != nil {
			t.Fatal(err)
		}
	}
}

// While every live replica's gen-workers report their server's KV pool,
// admission keeps the active trajectories' expected KV within the pools: a
// trajectory that reports it is finishing frees its share; once a replica
// stops reporting its pool, admission goes by count again.
func TestAdmissionByKV(t *testing.T) {
	ctx, s, d := stack(t)
	cfg := s.CoordinatorConfig()
	cfg.MaxActive, cfg.MaxActiveCeiling = 55, 55 // the count limit, fixed
	beat := beater(t, ctx, d)
	// 100,000 tokens a pool and 2 slots: a trajectory with nothing known is
	// expected to grow by 100,000 / (ColdStart × 2) = 5,000, of which it
	// counts 0.75: 26 fit a pool.
	beat("r0", 100000)
	beat("r1", 100000)
	c, err := s.StartCoordinator(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for k := range 60 {
		id := fmt.Sprintf("s%02d", k)
		if err := d.Pub.Publish(ctx, schema.SubjectSamples, id, sample(id)); err != nil {
			t.Fatal(err)
		}
	}
	counts := func(active int, queued uint64) func() bool {
		return func() bool {
			st, err := c.Status(ctx)
			return err == nil && st.Active == active && st.Queued == queued
		}
	}
	testkit.Eventually(t, wait, "26 a pool admitted", counts(52, 8))
	act, err := d.Store.Active(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for id, e := range act {
		p := schema.Prediction{V: schema.Version, TrajID: id, Replica: e.Replica, TurnSeq: 3, Turns: 1, GenTokens: 100,
			ContextTokens: 1500, PromptTokens: 1000, Finishing: true, At: time.Now()}
		if err := d.Pub.Publish(ctx, bus.SubjectPredictions, "", p); err != nil {
			t.Fatal(err)
		}
		break
	}
	testkit.Eventually(t, wait, "one more in the room the finishing one left", counts(53, 7))
	beat("r1", 0)
	testkit.Eventually(t, wait, "by count up to the ceiling", counts(55, 5))
}

// When the contexts on a replica outgrow its pool, the last trajectory in
// policy order is held: its snapshot says so, the status counts it, and
// nothing more is admitted there; once the others have made room it is let
// go, and admission goes on.
func TestHoldWhileContextsOverfillThePool(t *testing.T) {
	ctx, s, d := stack(t)
	cfg := s.CoordinatorConfig()
	cfg.Replicas, cfg.MaxActiveCeiling = []string{"r0"}, 3
	cfg.SnapshotInterval, cfg.PredictTimeout, cfg.ReplicaTimeout = 20*time.Millisecond, 0, time.Hour
	beater(t, ctx, d)("r0", 10000)
	c, err := s.StartCoordinator(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := d.JS.KeyValue(ctx, bus.BucketPriority)
	if err != nil {
		t.Fatal(err)
	}
	heldBy := func(want ...string) func() bool {
		return func() bool {
			e, err := kv.Get(ctx, "r0")
			if err != nil {
				return false
			}
			snap, err := priority.DecodeSnapshot(e.Value())
			if err != nil || len(snap.Held) != len(want) {
				return false
			}
			for _, id := range want {
				if !snap.IsHeld(id) {
					return false
				}
			}
			st, err := c.Status(ctx)
			return err == nil && len(st.Replicas) == 1 && st.Replicas[0].Held == len(want)
		}
	}
	submit := func(id string) {
		t.Helper()
		if err := d.Pub.Publish(ctx, schema.SubjectSamples, id, sample(id)); err != nil {
			t.Fatal(err)
		}
	}
	submit("a")
	testkit.Eventually(t, wait, "a admitted", func() bool { return c.ActiveCount() == 1 })
	submit("b")
	testkit.Eventually(t, wait, "b admitted after a", func() bool { return c.ActiveCount() == 2 })
	// Each has 5,000 tokens of context after 4 calls (4 replies of 100, 3
	// observations of 1,200): 1,300 a turn, so each needs 6,300 of the
	// pool's 10,000. b, admitted last, is held.
	report := func(id string, seq int64, finishing bool) {
		t.Helper()
		p := schema.Prediction{V: schema.Version, TrajID: id, Replica: "r0", TurnSeq: seq, Turns: 4, GenTokens: 400,
			ContextTokens: 5000, PromptTokens: 1000, Finishing: finishing, At: time.Now()}
		if err := d.Pub.Publish(ctx, bus.SubjectPredictions, "", p); err != nil {
			t.Fatal(err)
		}
	}
	report("a", 5, false)
	report("b", 5, false)
	testkit.Eventually(t, wait, "b held", heldBy("b"))
	submit("c")
	testkit.Eventually(t, wait, "c waiting", func() bool {
		st, err := c.Status(ctx)
		return err == nil && st.Queued == 1
	})
	if n := c.ActiveCount(); n != 2 {
		t.Fatalf("%d active while r0 holds b, want 2: c is admitted nowhere", n)
	}
	// a is in its eval: it needs no more KV, and b fits again.
	report("a", 6, true)
	testkit.Eventually(t, wait, "b let go", heldBy())
	testkit.Eventually(t, wait, "c admitted", func() bool { return c.ActiveCount() == 3 })
}

// No sample is admitted while generation is paused for a weight sync; a
// resume admits what waited.
func TestNoAdmissionWhilePaused(t *testing.T) {
	ctx, s, d := stack(t)
	c, err := s.StartCoordinator(ctx, s.CoordinatorConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pause(ctx, schema.PauseRequest{Mode: schema.PauseAbort}); err != nil { // no gen-worker: at once
		t.Fatal(err)
	}
	for _, id := range []string{"w1", "w2"} {
		if err := d.Pub.Publish(ctx, schema.SubjectSamples, id, sample(id)); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, wait, "both waiting and an admission pass held", func() bool {
		st, err := c.Status(ctx)
		return err == nil && st.Queued == 2 && st.AdmissionHeld >= 1
	})
	if st, err := c.Status(ctx); err != nil || st.Active != 0 {
		t.Fatalf("admitted during a pause: %+v, %v", st, err)
	}
	if _, err := c.Resume(ctx, schema.ResumeRequest{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, wait, "both admitted after the resume", func() bool { return c.ActiveCount() == 2 })
}

// A resume may raise the weight version by at most ACTLOOP_MAX_VERSION_STEP
// (a mistaken huge version would hold every later resume), and every
// control call is audited on actloop.events with how and from where it
// came and how it ended.
func TestResumeStepAndAudit(t *testing.T) {
	ctx, s, d := stack(t)
	cfg := s.CoordinatorConfig()
	cfg.MaxVersionStep = 10
	c, err := s.StartCoordinator(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	audit := make(chan schema.Event, 16)
	sub, err := d.NC.Subscribe(bus.SubjectEvents, func(m *nats.Msg) {
		if e, err := schema.Decode[schema.Event](m.Data); err == nil && e.Type == schema.EventControl {
			audit <- e
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	ctl, err := client.New(d.NC)
	if err != nil {
		t.Fatal(err)
	}
	v := func(n int64) *int64 { return &n }
	testkit.Eventually(t, wait, "the coordinator to answer, and a step of 10 taken", func() bool {
		_, err := ctl.Resume(ctx, v(10)) // no responders until it subscribes
		return err == nil
	})
	if _, err := ctl.Resume(ctx, v(21)); err == nil || !strings.Contains(err.Error(), "ACTLOOP_MAX_VERSION_STEP") {
		t.Fatalf("a step of 11 past a bound of 10: %v", err)
	}
	if st := c.Control().Control; st.WeightVersion != 10 {
		t.Fatalf("weight version %d after a refused resume, want 10", st.WeightVersion)
	}
	for _, want := range []string{"OK", "Conflict: weight_version may not rise"} {
		select {
		case e := <-audit:
			if e.Op != "resume" || !strings.HasPrefix(e.From, "nats ") || !strings.Contains(e.From, "@") ||
				!strings.HasPrefix(e.Reason, want) {
				t.Fatalf("audit event %+v, want a resume from a named NATS client ending %q", e, want)
			}
		case <-time.After(wait):
			t.Fatalf("no audit event ending %q", want)
		}
	}
}

// A trajectory moved off a replica and back, while it waits for a
// generation, gets its step each time: the copy re-sent to the replica it
// came back to is no duplicate, within the stream's duplicate window, of
// the step first sent there, which that replica dropped when the
// trajectory had left. A progress report of a turn run before the first
// move, come after it, does not hide where the trajectory is: the
// coordinator moves what Redis says is on a replica that went down.
func TestMovedBackGetsItsStepAgain(t *testing.T) {
	ctx, s, d := stack(t)
	up := map[string]*atomic.Bool{"r0": {}, "r1": {}}
	for r, u := range up {
		u.Store(true)
		go func() {
			_ = service.Heartbeat(ctx, d.JS, "gen."+r+".w", 50*time.Millisecond, nil, func() (schema.Heartbeat, bool) {
				return schema.Heartbeat{V: schema.Version, Worker: "w", Replica: r, Slots: 1}, u.Load()
			}, slog.New(slog.DiscardHandler))
		}()
	}
	x := &traj.Trajectory{ID: "x", Seq: 1, Status: traj.StatusNeedsGeneration, Replica: "r0", AdmittedAt: time.Now(),
		UpdatedAt: time.Now(), Sample: sample("x")}
	if err := d.Store.Put(ctx, x); err != nil {
		t.Fatal(err)
	}
	if err := d.Store.AddActive(ctx, "x", traj.ActiveEntry{Replica: "r0"}); err != nil {
		t.Fatal(err)
	}
	st, err := d.JS.Stream(ctx, bus.StreamGen)
	if err != nil {
		t.Fatal(err)
	}
	// take waits for a gen step on replica's subjects and removes it, as
	// the replica's worker does.
	take := func(replica string) {
		t.Helper()
		testkit.Eventually(t, wait, "x's step on "+replica, func() bool {
			m, err := st.GetLastMsgForSubject(ctx, "actloop.gen."+replica+".>")
			if err != nil {
				return false
			}
			var g schema.GenStep
			if json.Unmarshal(m.Data, &g) != nil || g.TrajID != "x" || g.Replica != replica {
				t.Fatalf("step on %s: %s", replica, m.Data)
			}
			return st.DeleteMsg(ctx, m.Sequence) == nil
		})
	}
	n, err := traj.NextOf(x, traj.LowOnly{})
	if err != nil {
		t.Fatal(err)
	}
	if err := traj.Publish(ctx, d.Pub, "", n); err != nil {
		t.Fatal(err)
	}
	take("r0")

	cfg := s.CoordinatorConfig()
	cfg.ReplicaTimeout = time.Second
	c, err := s.StartCoordinator(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	up["r0"].Store(false)
	take("r1")
	late := schema.Prediction{V: schema.Version, TrajID: "x", Replica: "r0", TurnSeq: 1, Turns: 1}
	if err := traj.ReportProgress(ctx, d.Pub, time.Now(), late); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, wait, "the late report read", func() bool {
		st, err := c.Status(ctx)
		return err == nil && len(st.Replicas) == 2 && st.Replicas[0].Name == "r0" && st.Replicas[0].Active == 1
	})
	up["r0"].Store(true)
	up["r1"].Store(false)
	take("r0")
	if got, err := d.Store.Load(ctx, "x", 0); err != nil || got.Replica != "r0" {
		t.Fatalf("x: %+v %v, want it back on r0", got, err)
	}
}
