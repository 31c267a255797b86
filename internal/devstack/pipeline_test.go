package devstack_test

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/coordinator"
	"github.com/actloop/actloop/internal/demo"
	"github.com/actloop/actloop/internal/devstack"
	"github.com/actloop/actloop/internal/envworker"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/client"
	"github.com/actloop/actloop/pkg/llm"
	"github.com/actloop/actloop/pkg/priority"
	"github.com/actloop/actloop/pkg/sandbox"
	"github.com/actloop/actloop/pkg/schema"
)

const wait = 2 * time.Minute // generous: CI machines are small and loaded

type env struct {
	t     *testing.T
	stack *devstack.Stack
	ctx   context.Context
	js    jetstream.JetStream
	pub   *bus.Publisher
	st    *traj.Store
	ws    string
}

func newEnv(t *testing.T, replicas int) *env {
	t.Helper()
	return newEnvWith(t, replicas, nil)
}

func newEnvWith(t *testing.T, replicas int, tweak func(*devstack.Options)) *env {
	t.Helper()
	common := service.CommonDefaults()
	common.AckWait = 2 * time.Second // the crash test waits for redelivery
	common.PullWait = 100 * time.Millisecond
	common.ShutdownTimeout = 5 * time.Second
	dir := testkit.SearchableTempDir(t) // sandboxes run isolated when bwrap works here
	ctx, cancel := context.WithCancel(context.Background())
	opts := devstack.Options{Dir: dir, RedisKind: testkit.PreferredRedis(t),
		Replicas: replicas, Slots: 2, EnvSlots: 4, Common: common, Log: testLogger(t)}
	if tweak != nil {
		tweak(&opts)
	}
	s, err := devstack.StartInfra(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := s.Wait(); err != nil {
			t.Errorf("services: %v", err)
		}
		s.Close()
	})
	d, err := s.Deps(ctx, "trainer")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	ws, err := demo.Workspace(dir)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, stack: s, ctx: ctx, js: d.JS, pub: d.Pub, st: d.Store, ws: ws}
}

func (e *env) submit(samples ...schema.Sample) {
	e.t.Helper()
	for _, s := range samples {
		if err := e.pub.Publish(e.ctx, schema.SubjectSamples, s.ID, s); err != nil {
			e.t.Fatal(err)
		}
	}
}

// results reads the results stream until it holds n distinct trajectories.
func (e *env) results(n int) map[string]schema.Result {
	e.t.Helper()
	heads := readStream[schema.ResultHead](e, schema.StreamResults, schema.SubjectResults, n, func(r schema.ResultHead) string { return r.TrajID })
	bodies := client.NewBodies(e.js)
	out := make(map[string]schema.Result, len(heads))
	for id, h := range heads {
		r, err := bodies.Result(e.ctx, h)
		if err != nil {
			e.t.Fatal(err)
		}
		out[id] = r
	}
	return out
}

func readStream[T any](e *env, stream, subject string, n int, key func(T) string) map[string]T {
	e.t.Helper()
	c, err := e.js.OrderedConsumer(e.ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]T{}
	deadline := time.Now().Add(wait)
	for len(out) < n {
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: got %d of %d messages within %v", stream, len(out), n, wait)
		}
		m, err := c.Next(jetstream.FetchMaxWait(time.Second))
		if err != nil {
			continue
		}
		var v T
		if err := json.Unmarshal(m.Data(), &v); err != nil {
			e.t.Fatalf("%s: %v", stream, err)
		}
		out[key(v)] = v
	}
	return out
}

// testTemplate is the chat template of the stacks these tests start: the
// real Qwen tokenizer with ChatML.
func testTemplate(t testing.TB) tokenize.ChatTemplate {
	t.Helper()
	return testkit.ChatTemplate(t, tokenize.TemplateChatML)
}

// checkConsistent asserts testkit.Consistent of a completed result.
func checkConsistent(t *testing.T, r schema.Result) {
	t.Helper()
	if err := testkit.Consistent(testTemplate(t), r); err != nil {
		t.Fatal(err)
	}
}

func TestPipelineSolvesDemoAndSimTasks(t *testing.T) {
	e := newEnv(t, 2)
	if _, err := e.stack.StartAll(e.ctx); err != nil {
		t.Fatal(err)
	}
	samples := demo.Samples(6, e.ws, "demo")
	// Unscripted trajectories on the simulated backend: the simulator
	// decides the turns and submits at the end.
	for i := range 4 {
		s := schema.Sample{V: schema.Version, ID: "sim-" + string(rune('a'+i)), Task: "simulated task",
			Env: schema.Env{Backend: schema.BackendSim, Eval: "exit 0"}, Sampling: schema.Sampling{MaxNewTokens: 4096},
			Metadata: json.RawMessage(`{"i":` + string(rune('0'+i)) + `}`)}
		s.Normalize()
		samples = append(samples, s)
	}
	e.submit(samples...)
	got := e.results(len(samples))
	for _, s := range samples {
		r, ok := got[s.ID]
		if !ok {
			t.Fatalf("no result for %s", s.ID)
		}
		if r.Status != schema.StatusSubmitted || r.Reason != "submitted" || !r.Solved() {
			t.Errorf("%s: status %s reason %q reward %g", s.ID, r.Status, r.Reason, r.Reward)
		}
		if string(r.Metadata) != string(s.Metadata) || r.GroupID != s.GroupID || r.GroupIndex != s.GroupIndex {
			t.Errorf("%s: sample fields not passed through: %s %s %d", s.ID, r.Metadata, r.GroupID, r.GroupIndex)
		}
		checkConsistent(t, r)
		if s.Env.Backend == schema.BackendLocal && !strings.Contains(r.Diff, "+++ b/") {
			t.Errorf("%s: no diff in result: %q", s.ID, r.Diff)
		}
	}
	// The greet task's first reply has no bash block: a format error turn.
	greet := got["demo-002"]
	if greet.Turns != 4 || greet.Commands != 3 || !strings.Contains(greet.Messages[3].Content, "bash") {
		t.Errorf("greet: turns %d commands %d, messages %+v", greet.Turns, greet.Commands, greet.Messages)
	}
	testkit.Eventually(t, wait, "coordinator to see every result", func() bool {
		c, err := e.st.Counts(e.ctx)
		return err == nil && c[schema.StatusSubmitted] == int64(len(samples))
	})
}

// Bad input lands on the dead-letter subject with the reason and the
// original bytes; one that names itself (a valid id) also gets a fallback
// result with the reason, and counts towards its group; the consumer goes on
// and a good sample still completes.
func TestBadSamplesAreDeadLettered(t *testing.T) {
	e := newEnv(t, 1)
	if _, err := e.stack.StartAll(e.ctx); err != nil {
		t.Fatal(err)
	}
	bad := map[string]string{
		"malformed":       `{"v":1,"id":"x",`,
		"missing fields":  `{"v":1,"id":"m1"}`,
		"wrong types":     `{"v":1,"id":"w1","task":7,"env":{"backend":"sim"}}`,
		"unknown version": `{"v":99,"id":"u1","task":"t","env":{"backend":"sim"}}`,
		"oversized":       `{"v":1,"id":"o1","env":{"backend":"sim"},"task":"` + strings.Repeat("x", schema.MaxSampleBytes) + `"}`,
		"group member":    `{"v":1,"id":"g-1","group_id":"g","group_index":1,"group_size":2,"env":{"backend":"sim"}}`,
	}
	want := map[string]string{"malformed": "malformed JSON", "missing fields": "task: missing",
		"wrong types": "task: has JSON type number", "unknown version": "v: unsupported schema version 99",
		"oversized": "exceeds the sample limit", "group member": "task: missing"}
	ids := map[string]string{"missing fields": "m1", "wrong types": "w1", "unknown version": "u1", "oversized": "o1",
		"group member": "g-1"}
	for _, b := range bad {
		if err := e.pub.PublishRaw(e.ctx, schema.SubjectSamples, "", []byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	good := demo.Samples(1, e.ws, "good")
	e.submit(good...)
	e.submit(groupSample("g-0", "g", 0, 2))
	dl := readStream[schema.DLQEntry](e, schema.StreamDLQ, schema.SubjectDLQ, len(bad), func(d schema.DLQEntry) string { return string(d.Data) })
	for name, b := range bad {
		d, ok := dl[b]
		if !ok {
			t.Errorf("%s: original bytes not in the dead-letter stream", name)
			continue
		}
		if !strings.Contains(d.Reason, want[name]) || d.Subject != schema.SubjectSamples || d.Consumer != "coordinator-samples" {
			t.Errorf("%s: dead letter %q from %s/%s, want reason containing %q", name, d.Reason, d.Subject, d.Consumer, want[name])
		}
	}
	results := e.results(len(ids) + 2)
	if r := results["good-000"]; !r.Solved() {
		t.Fatalf("good sample after bad ones: %+v", r)
	}
	for name, id := range ids {
		if r := results[id]; r.Status != schema.StatusFailed || !strings.HasPrefix(r.Reason, "rejected: sample: ") ||
			!strings.Contains(r.Reason, want[name]) {
			t.Errorf("%s: result %s %q, want failed, naming %q", name, r.Status, r.Reason, want[name])
		}
	}
	resultsHandled(e)
	checkGroups(e, map[string][]string{"g": {"g-0", "g-1"}})
}

// blockingGen blocks the generations that block selects until released,
// ignoring cancellation, like a worker that hangs.
type blockingGen struct {
	llm.Generator
	block   func(call int64, req llm.Request) bool
	calls   atomic.Int64
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func newBlockingGen(url string, block func(call int64, req llm.Request) bool) *blockingGen {
	return &blockingGen{Generator: llm.NewSGLang(url, llm.SGLangOptions{}), block: block,
		entered: make(chan struct{}), release: make(chan struct{})}
}

func (b *blockingGen) Generate(ctx context.Context, req llm.Request) (llm.Result, error) {
	if b.block(b.calls.Add(1), req) {
		b.once.Do(func() { close(b.entered) })
		<-b.release
	}
	return b.Generator.Generate(context.WithoutCancel(ctx), req)
}

// A gen-worker cut off from NATS in the middle of a step (its ack can no
// longer arrive) while a second worker takes over after AckWait: every step
// is applied exactly once, and the step the first worker finishes late is
// stale and changes nothing.
func TestCrashedWorkerStepsApplyOnce(t *testing.T) {
	e := newEnv(t, 1)
	if _, err := e.stack.StartCoordinator(e.ctx, e.stack.CoordinatorConfig()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.stack.StartEnvWorker(e.ctx, e.stack.EnvWorkerConfig("env-0")); err != nil {
		t.Fatal(err)
	}
	blk := newBlockingGen(e.stack.SimURLs["r0"], func(call int64, _ llm.Request) bool { return call == 3 })
	var once sync.Once
	releaseBlocked := func() { once.Do(func() { close(blk.release) }) }
	t.Cleanup(releaseBlocked)
	crashed, err := e.stack.StartGenWorker(e.ctx, "r0", blk)
	if err != nil {
		t.Fatal(err)
	}
	samples := demo.Samples(4, e.ws, "crash")
	e.submit(samples...)
	select {
	case <-blk.entered:
	case <-time.After(wait):
		t.Fatal("the blocking generation never started")
	}
	crashed.NC.Close() // cut off: no ack, nak or publish from this worker any more
	if _, err := e.stack.StartGenWorker(e.ctx, "r0", nil); err != nil {
		t.Fatal(err)
	}
	got := e.results(len(samples))
	releaseBlocked() // the cut-off worker finishes its step late: a stale commit
	for _, s := range samples {
		r := got[s.ID]
		if !r.Solved() {
			t.Errorf("%s: %s %q reward %g", s.ID, r.Status, r.Reason, r.Reward)
		}
		checkConsistent(t, r)
	}
	// Re-deliver an old step of every trajectory: nothing changes.
	for _, s := range samples {
		old := schema.GenStep{V: schema.Version, TrajID: s.ID, Seq: 1, Replica: "r0"}
		if err := e.pub.Publish(e.ctx, bus.SubjectGen("r0", "lo"), "replay-"+s.ID, old); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, wait, "replayed steps to be consumed", func() bool {
		info, err := e.js.Stream(e.ctx, bus.StreamGen)
		if err != nil {
			return false
		}
		si, err := info.Info(e.ctx)
		return err == nil && si.State.Msgs == 0
	})
	for _, s := range samples {
		tr, err := e.st.Load(e.ctx, s.ID, traj.WithAll)
		if err != nil {
			t.Fatal(err)
		}
		if r := got[s.ID]; len(tr.Tokens) != len(r.Tokens) || tr.Calls != r.Turns || tr.Status != traj.StatusTerminated {
			t.Errorf("%s changed after replay: %d tokens (result %d), %d calls", s.ID, len(tr.Tokens), len(r.Tokens), tr.Calls)
		}
	}
}

// An env-worker that stops (SIGTERM) in the middle of a batch and comes back
// under the same id re-attaches its sandboxes by handle: every trajectory
// still completes and is solved.
func TestEnvWorkerRestartReattachesSandboxes(t *testing.T) {
	e := newEnv(t, 1)
	if _, err := e.stack.StartCoordinator(e.ctx, e.stack.CoordinatorConfig()); err != nil {
		t.Fatal(err)
	}
	// Generations after each trajectory's first wait until the first
	// env-worker is gone, so every trajectory is mid-flight when it stops.
	imStart := testTemplate(t).Tokenizer().Encode("<|im_start|>")[0]
	_, open := gatedGenWorker(t, e, func(req llm.Request) bool {
		return countOf(req.InputIDs, imStart) > 3 // past the first turn
	})
	first, stopFirst := context.WithCancel(e.ctx)
	defer stopFirst()
	if _, err := e.stack.StartEnvWorker(first, e.stack.EnvWorkerConfig("env-0")); err != nil {
		t.Fatal(err)
	}
	samples := demo.Samples(2, e.ws, "restart") // no more than the gen-worker's slots: blocked calls hold them
	e.submit(samples...)
	testkit.Eventually(t, wait, "every trajectory to have run a command", func() bool {
		for _, s := range samples {
			tr, err := e.st.Load(e.ctx, s.ID, 0)
			if err != nil || tr.Commands < 1 {
				return false
			}
		}
		return true
	})
	stopFirst()
	if _, err := e.stack.StartEnvWorker(e.ctx, e.stack.EnvWorkerConfig("env-0")); err != nil {
		t.Fatal(err)
	}
	open()
	got := e.results(len(samples))
	for _, s := range samples {
		r := got[s.ID]
		if !r.Solved() {
			t.Errorf("%s: %s %q reward %g", s.ID, r.Status, r.Reason, r.Reward)
		}
		checkConsistent(t, r)
	}
}

func countOf(ids []int32, id int32) int {
	n := 0
	for _, x := range ids {
		if x == id {
			n++
		}
	}
	return n
}

func decode(ids []int32) string {
	tok, err := tokenize.Qwen()
	if err != nil {
		return err.Error()
	}
	return tok.Decode(ids)
}

// ctxGen blocks the generations block selects until their context ends,
// like a replica that hangs.
type ctxGen struct {
	llm.Generator
	block func(req llm.Request) bool
}

func (g ctxGen) Generate(ctx context.Context, req llm.Request) (llm.Result, error) {
	if g.block(req) {
		<-ctx.Done()
		return llm.Result{}, ctx.Err()
	}
	return g.Generator.Generate(ctx, req)
}

// A gen-worker stops with trajectories in flight on its replica: the
// coordinator sees its heartbeat go, moves them to the live replica, and
// they finish there.
func TestReplicaLossMovesTrajectories(t *testing.T) {
	e := newEnv(t, 2)
	cfg := e.stack.CoordinatorConfig()
	cfg.ReplicaTimeout = time.Second
	coord, err := e.stack.StartCoordinator(e.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.stack.StartEnvWorker(e.ctx, e.stack.EnvWorkerConfig("env-0")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.stack.StartGenWorker(e.ctx, "r0", nil); err != nil {
		t.Fatal(err)
	}
	r1ctx, stopR1 := context.WithCancel(e.ctx)
	defer stopR1()
	hang := ctxGen{Generator: llm.NewSGLang(e.stack.SimURLs["r1"], llm.SGLangOptions{}),
		// Hang once a command has run (its observation is in the prompt).
		block: func(req llm.Request) bool { return strings.Contains(decode(req.InputIDs), "<returncode>") }}
	if _, err := e.stack.StartGenWorker(r1ctx, "r1", hang); err != nil {
		t.Fatal(err)
	}
	samples := demo.Samples(4, e.ws, "moved")
	e.submit(samples...)
	var onR1 []string
	testkit.Eventually(t, wait, "trajectories on r1 stuck after their first command", func() bool {
		onR1 = onR1[:0]
		for _, s := range samples {
			tr, err := e.st.Load(e.ctx, s.ID, 0)
			if err != nil {
				return false
			}
			if tr.Replica == "r1" {
				if tr.Commands < 1 {
					return false
				}
				onR1 = append(onR1, s.ID)
			}
		}
		return len(onR1) > 0
	})
	stopR1()
	got := e.results(len(samples))
	for _, s := range samples {
		if r := got[s.ID]; !r.Solved() {
			t.Errorf("%s: %s %q", s.ID, r.Status, r.Reason)
		}
	}
	for _, id := range onR1 {
		if tr, err := e.st.Load(e.ctx, id, 0); err != nil || tr.Replica != "r0" {
			t.Errorf("%s did not move to r0: %+v %v", id, tr, err)
		}
	}
	st, err := coord.Status(e.ctx)
	if err != nil || st.Moved < int64(len(onR1)) {
		t.Fatalf("status %+v %v", st, err)
	}
}

// downGen is a replica's inference server that fails (503) every
// generation after a command has run (its observation is in the prompt),
// and from then on its health check with it.
type downGen struct {
	llm.Generator
	failing atomic.Bool
}

func (g *downGen) Generate(ctx context.Context, req llm.Request) (llm.Result, error) {
	if strings.Contains(decode(req.InputIDs), "<returncode>") {
		g.failing.Store(true)
		return llm.Result{}, &llm.HTTPError{Status: 503, Body: "down"}
	}
	return g.Generator.Generate(ctx, req)
}

func (g *downGen) Health(ctx context.Context) error {
	if g.failing.Load() {
		return &llm.HTTPError{Status: 503, Body: "down"}
	}
	return g.Generator.(llm.HealthChecker).Health(ctx)
}

// A replica's inference server keeps failing while its gen-worker runs on:
// the worker takes the replica down (no claims, no heartbeat), the
// coordinator moves its trajectories, and they finish on the other replica.
func TestFailingServerMovesTrajectories(t *testing.T) {
	e := newEnv(t, 2)
	cfg := e.stack.CoordinatorConfig()
	cfg.ReplicaTimeout = time.Second
	coord, err := e.stack.StartCoordinator(e.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.stack.StartEnvWorker(e.ctx, e.stack.EnvWorkerConfig("env-0")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.stack.StartGenWorker(e.ctx, "r0", nil); err != nil {
		t.Fatal(err)
	}
	gc := e.stack.GenWorkerConfig("r1")
	gc.LLMDownAfter, gc.LLMHealthInterval = 2, 50*time.Millisecond
	if _, err := e.stack.StartGenWorkerWith(e.ctx, gc, &downGen{Generator: llm.NewSGLang(e.stack.SimURLs["r1"], llm.SGLangOptions{Retries: -1})}); err != nil {
		t.Fatal(err)
	}
	// Both replicas take trajectories before r1's server fails.
	testkit.Eventually(t, wait, "both replicas live", func() bool {
		st, err := coord.Status(e.ctx)
		return err == nil && len(st.Replicas) == 2 && st.Replicas[0].Live && st.Replicas[1].Live
	})
	samples := demo.Samples(4, e.ws, "down")
	e.submit(samples...)
	got := e.results(len(samples))
	for _, s := range samples {
		if r := got[s.ID]; !r.Solved() {
			t.Errorf("%s: %s %q", s.ID, r.Status, r.Reason)
		}
		if tr, err := e.st.Load(e.ctx, s.ID, 0); err == nil && tr.Replica != "r0" {
			t.Errorf("%s finished on %s", s.ID, tr.Replica)
		}
	}
	st, err := coord.Status(e.ctx)
	if err != nil || st.Moved < 1 {
		t.Fatalf("status %+v %v: want trajectories moved off the failing replica", st, err)
	}
}

// With stealing on, a worker with idle slots takes the low-priority gen
// steps waiting on a replica that has no worker; those trajectories finish
// and stay on the thief. The coordinator moves nothing (the silent replica
// is never timed out here).
func TestIdleReplicaStealsWaitingSteps(t *testing.T) {
	e := newEnv(t, 2)
	// Every step is low priority: only .lo steps may be stolen. The
	// coordinator publishes no snapshot of its own within the test (its
	// first would replace these in the bucket, and a process that starts
	// watching after it would class the steps by it).
	kv, err := e.js.KeyValue(e.ctx, bus.BucketPriority)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range e.stack.Replicas {
		b, err := (&priority.Snapshot{Replica: r, Version: math.MaxInt64, High: map[string]bool{}}).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(e.ctx, r, b); err != nil {
			t.Fatal(err)
		}
	}
	cfg := e.stack.CoordinatorConfig()
	cfg.ReplicaTimeout = time.Hour
	cfg.SnapshotInterval = time.Hour
	coord, err := e.stack.StartCoordinator(e.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.stack.StartEnvWorker(e.ctx, e.stack.EnvWorkerConfig("env-0")); err != nil {
		t.Fatal(err)
	}
	gc := e.stack.GenWorkerConfig("r0")
	gc.Steal, gc.StealAfter = true, 100*time.Millisecond
	if _, err := e.stack.StartGenWorkerWith(e.ctx, gc, nil); err != nil {
		t.Fatal(err)
	}
	samples := demo.Samples(4, e.ws, "stolen")
	e.submit(samples...)
	got := e.results(len(samples))
	for _, s := range samples {
		if r := got[s.ID]; !r.Solved() {
			t.Errorf("%s: %s %q", s.ID, r.Status, r.Reason)
		}
		checkConsistent(t, got[s.ID])
	}
	if st := e.stack.GenWorker("r0").Stats(); st.Stolen < 1 {
		t.Fatalf("nothing stolen: %+v", st)
	}
	st, err := coord.Status(e.ctx)
	if err != nil || st.Moved != 0 {
		t.Fatalf("status %+v %v", st, err)
	}
}

// Two coordinators under the leader lease: one leads, the other stands by.
// The leader is cut off from NATS mid-batch; it steps down, the standby
// takes the lease when it runs out, loads the view from Redis and the batch
// finishes. A clean stop of the new leader hands the lease back at once.
func TestCoordinatorStandbyTakesOver(t *testing.T) {
	e := newEnv(t, 1)
	cfg := e.stack.CoordinatorConfig()
	cfg.LeaderLease = time.Second
	elected := map[string]*coordinator.Elected{}
	deps := map[string]*service.Deps{}
	ctxs := map[string]context.CancelFunc{}
	for _, id := range []string{"a", "b"} {
		c := cfg
		c.CoordinatorID = id
		ctx, cancel := context.WithCancel(e.ctx)
		ctxs[id] = cancel
		var err error
		if elected[id], deps[id], err = e.stack.StartElectedCoordinator(ctx, c); err != nil {
			t.Fatal(err)
		}
		if id == "a" {
			testkit.Eventually(t, wait, "a to lead", func() bool { return elected["a"].Current() != nil })
		}
	}
	if _, err := e.stack.StartEnvWorker(e.ctx, e.stack.EnvWorkerConfig("env-0")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.stack.StartGenWorker(e.ctx, "r0", nil); err != nil {
		t.Fatal(err)
	}
	if elected["b"].Current() != nil {
		t.Fatal("b leads beside a")
	}
	samples := demo.Samples(6, e.ws, "lease")
	e.submit(samples[:3]...)
	testkit.Eventually(t, wait, "a to admit the first samples", func() bool {
		c := elected["a"].Current()
		return c != nil && c.ActiveCount() > 0
	})
	deps["a"].NC.Close() // cut off: its renewals fail
	testkit.Eventually(t, wait, "a to step down and b to lead", func() bool {
		return elected["a"].Current() == nil && elected["b"].Current() != nil
	})
	e.submit(samples[3:]...)
	got := e.results(len(samples))
	for _, s := range samples {
		if r := got[s.ID]; !r.Solved() {
			t.Errorf("%s: %s %q", s.ID, r.Status, r.Reason)
		}
	}
	// A clean stop hands the lease over: a third coordinator leads well
	// before the lease could have run out by itself.
	c := cfg
	c.CoordinatorID, c.LeaderLease = "c", time.Hour
	ctxs["a"]()
	next, _, err := e.stack.StartElectedCoordinator(e.ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	ctxs["b"]()
	testkit.Eventually(t, wait, "c to lead after b stopped", func() bool { return next.Current() != nil })
	if elected["a"].Terms() != 1 || elected["b"].Terms() != 1 {
		t.Fatalf("terms: a %d, b %d; want one each", elected["a"].Terms(), elected["b"].Terms())
	}
}

// An env-worker comes back without its sandboxes (a new machine, a wiped
// disk): the trajectory's sandbox is rebuilt by running its commands again,
// so the fix made before the loss is in the diff and the eval passes
// (without the replay the next command finds no sandbox and the trajectory
// ends with a fallback). The commands do the same again: the result counts
// the replay and no divergence.
func TestLostSandboxIsRebuiltByReplay(t *testing.T) {
	s := demo.Samples(1, "", "replay")[0] // add.sh: read, fix and check, submit
	r := loseSandboxAfter(t, s, "PASS add", 2)
	if !r.Solved() || !strings.Contains(r.Diff, "+echo $(( $1 + $2 ))") || r.Replays != 1 || r.Diverged != 0 {
		t.Fatalf("%s: %s %q reward %g, %d replays, %d diverged, diff %q", s.ID, r.Status, r.Reason, r.Reward,
			r.Replays, r.Diverged, r.Diff)
	}
	checkConsistent(t, r)
}

// A replayed command whose outcome differs from its first run (here, a
// random id) is counted in the result's diverged: the rest of the
// trajectory ran in a sandbox other than the one the model saw.
func TestReplayThatDivergesIsFlagged(t *testing.T) {
	s := simSample("diverge", "```bash\ncat /proc/sys/kernel/random/uuid | tee id.txt\n```",
		"```bash\necho the id is kept\n```", "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```")
	s.Env.Backend = schema.BackendLocal
	r := loseSandboxAfter(t, s, "the id is kept", 2)
	if r.Status != schema.StatusSubmitted || r.Replays != 1 || r.Diverged != 1 {
		t.Fatalf("%s: %s %q, %d replays, %d diverged", s.ID, r.Status, r.Reason, r.Replays, r.Diverged)
	}
}

// gatedGenWorker starts r0's gen-worker, holding the first generation
// that block picks until open is called (at the latest when the test ends).
func gatedGenWorker(t *testing.T, e *env, block func(req llm.Request) bool) (gate *blockingGen, open func()) {
	t.Helper()
	gate = newBlockingGen(e.stack.SimURLs["r0"], func(_ int64, req llm.Request) bool { return block(req) })
	var once sync.Once
	open = func() { once.Do(func() { close(gate.release) }) }
	t.Cleanup(open)
	if _, err := e.stack.StartGenWorker(e.ctx, "r0", gate); err != nil {
		t.Fatal(err)
	}
	return gate, open
}

// promptHas picks a generation whose prompt holds text.
func promptHas(text string) func(llm.Request) bool {
	return func(req llm.Request) bool { return strings.Contains(decode(req.InputIDs), text) }
}

// envWorkerToLose starts a coordinator, r0's gen-worker holding the first
// generation whose prompt holds gateText (see gatedGenWorker), and
// env-worker env-0 under a context of its own (stop ends it).
func envWorkerToLose(t *testing.T, gateText string) (e *env, gate *blockingGen, open func(), cfg envworker.Config, stop func()) {
	t.Helper()
	e = newEnv(t, 1)
	if _, err := e.stack.StartCoordinator(e.ctx, e.stack.CoordinatorConfig()); err != nil {
		t.Fatal(err)
	}
	gate, open = gatedGenWorker(t, e, promptHas(gateText))
	cfg = e.stack.EnvWorkerConfig("env-0")
	ctx, stop := context.WithCancel(e.ctx)
	t.Cleanup(stop)
	if _, err := e.stack.StartEnvWorker(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	return e, gate, open, cfg, stop
}

// loseSandboxAfter runs s (a local sandbox of the env's workspace) until its
// commandsBefore-th command has run, holds the next generation until the
// env-worker is gone with every sandbox (the gate opens on gateText in the
// prompt), starts it again empty, and returns the result.
func loseSandboxAfter(t *testing.T, s schema.Sample, gateText string, commandsBefore int) schema.Result {
	e, gate, open, cfg, stopFirst := envWorkerToLose(t, gateText)
	s.Env.Workspace = e.ws
	e.submit(s)
	testkit.Eventually(t, wait, "the commands before the loss to have run", func() bool {
		tr, err := e.st.Load(e.ctx, s.ID, 0)
		return err == nil && tr.Commands == commandsBefore
	})
	stopFirst()
	<-gate.entered
	if err := os.RemoveAll(cfg.SandboxRoot); err != nil {
		t.Fatal(err)
	}
	if _, err := e.stack.StartEnvWorker(e.ctx, cfg); err != nil {
		t.Fatal(err)
	}
	open()
	return e.results(1)[s.ID]
}

// The env-worker holding a trajectory's sandbox goes away for good: after
// ACTLOOP_ENV_WORKER_TIMEOUT the coordinator moves the trajectory to the
// other env-worker, which rebuilds the sandbox by replay, and the fix made
// before the loss still scores.
func TestDeadEnvWorkerTrajectoriesMove(t *testing.T) {
	e := newEnv(t, 1)
	cfg := e.stack.CoordinatorConfig()
	cfg.EnvWorkerTimeout = time.Second
	coord, err := e.stack.StartCoordinator(e.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	gate, open := gatedGenWorker(t, e, promptHas("PASS add"))
	stops := map[string]context.CancelFunc{}
	for _, id := range []string{"env-0", "env-1"} {
		c := e.stack.EnvWorkerConfig(id)
		c.HeartbeatInterval = 100 * time.Millisecond
		ctx, cancel := context.WithCancel(e.ctx)
		stops[id] = cancel
		if _, err := e.stack.StartEnvWorker(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	s := demo.Samples(1, e.ws, "orphan")[0]
	e.submit(s)
	var owner string
	testkit.Eventually(t, wait, "the fix to have run", func() bool {
		tr, err := e.st.Load(e.ctx, s.ID, 0)
		if err != nil {
			return false
		}
		owner = tr.Owner
		return tr.Commands == 2
	})
	stops[owner]()
	<-gate.entered
	if err := os.RemoveAll(e.stack.EnvWorkerConfig(owner).SandboxRoot); err != nil {
		t.Fatal(err)
	}
	open()
	r := e.results(1)[s.ID]
	if !r.Solved() || !strings.Contains(r.Diff, "+echo $(( $1 + $2 ))") {
		t.Fatalf("%s: %s %q reward %g, diff %q", s.ID, r.Status, r.Reason, r.Reward, r.Diff)
	}
	checkConsistent(t, r)
	st, err := coord.Status(e.ctx)
	if err != nil || st.EnvMoved != 1 {
		t.Fatalf("status %+v %v: want one trajectory moved off %s", st, err, owner)
	}
}

// An env-worker that ran a command and died before committing its step
// (the outcome recorded, the commit lost) does not make the command run
// twice in the same sandbox: the step's next delivery uses the recorded
// outcome. Here the command appends a line to a file; the diff has it once.
func TestCommandNotRunTwiceAfterLostCommit(t *testing.T) {
	e, gate, open, cfg, stopFirst := envWorkerToLose(t, "one-done")
	appendTwo := "echo two >> a.txt && cat a.txt"
	s := simSample("once", "```bash\necho one > a.txt && echo one-done\n```", "```bash\n"+appendTwo+"\n```",
		"```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached\n```")
	s.Env.Backend, s.Env.Workspace = schema.BackendLocal, e.ws
	e.submit(s)
	<-gate.entered
	stopFirst()
	open()
	testkit.Eventually(t, wait, "the second command to be pending", func() bool {
		tr, err := e.st.Load(e.ctx, s.ID, 0)
		return err == nil && tr.Status == traj.StatusNeedsEnvStep && tr.Action == appendTwo
	})
	// What the worker that died did: ran the command in the sandbox and
	// recorded its outcome, and never committed.
	tr, err := e.st.Load(e.ctx, s.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	local, err := sandbox.NewLocal(sandbox.LocalConfig{Root: cfg.SandboxRoot, Isolation: cfg.Isolation, AllowUnisolated: cfg.AllowUnisolated})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := local.Attach(e.ctx, tr.Handle)
	if err != nil {
		t.Fatal(err)
	}
	res, err := sb.Exec(e.ctx, appendTwo, time.Minute)
	if err != nil || res.Output != "one\ntwo\n" {
		t.Fatalf("the command: %q %v", res.Output, err)
	}
	if err := e.st.RecordExec(e.ctx, s.ID, traj.ExecRecord{Seq: tr.Seq, Output: res.Output, ReturnCode: res.ReturnCode}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.stack.StartEnvWorker(e.ctx, cfg); err != nil {
		t.Fatal(err)
	}
	r := e.results(1)[s.ID]
	if r.Status != schema.StatusSubmitted || !strings.Contains(r.Diff, "+one\n+two\n") || strings.Contains(r.Diff, "+two\n+two") {
		t.Fatalf("%s: %s %q, diff %q", s.ID, r.Status, r.Reason, r.Diff)
	}
	checkConsistent(t, r)
}
