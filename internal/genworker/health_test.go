package genworker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"encoding/json"

	"github.com/actloop/actloop/internal/batching"
	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/sim"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/pkg/llm"
	"github.com/actloop/actloop/pkg/priority"
	"github.com/actloop/actloop/pkg/schema"
)

// flakyServer answers 503 to everything while failing is set, then a /health
// 200 and a finished /generate.
type flakyServer struct {
	failing atomic.Bool
	probes  atomic.Int32 // /health calls while failing
	srv     *httptest.Server
}

func newFlakyServer(t *testing.T) *flakyServer {
	f := &flakyServer{}
	f.failing.Store(true)
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f.failing.Load() {
			if r.URL.Path == "/health" {
				f.probes.Add(1)
			}
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		if r.URL.Path == "/generate" {
			_, _ = io.WriteString(w, `{"output_ids":[1],"meta_info":{"finish_reason":{"type":"length","length":1},"output_token_logprobs":[[-1,1,null]]}}`)
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

var discard = slog.New(slog.DiscardHandler)

// TestReplicaHealth takes a replica down after consecutive failed
// generations, keeps it down while /health fails, and brings it back when
// /health succeeds.
func TestReplicaHealth(t *testing.T) {
	f := newFlakyServer(t)
	gen := llm.NewSGLang(f.srv.URL, llm.SGLangOptions{HTTPClient: f.srv.Client(), Retries: -1})
	h := newReplicaHealth(3, 10*time.Millisecond, gen, discard)
	req := llm.Request{RID: llm.NewRID(), InputIDs: []int32{1}, Sampling: llm.SamplingParams{MaxNewTokens: 1}}
	generate := func() error { _, err := gen.Generate(context.Background(), req); return err }

	// A rejection (4xx) is an answer: the server is up.
	h.record(&llm.HTTPError{Status: 400})
	h.record(&llm.HTTPError{Status: 400})
	h.record(&llm.HTTPError{Status: 400})
	if h.isDown() {
		t.Fatal("down after rejections")
	}
	for i := range 3 {
		if h.isDown() {
			t.Fatalf("down after %d failures", i)
		}
		err := generate()
		if !llm.Temporary(err) {
			t.Fatalf("generate on a failing server: %v", err)
		}
		h.record(err)
	}
	if !h.isDown() {
		t.Fatal("not down after 3 consecutive failures")
	}
	select {
	case <-h.changed:
	default:
		t.Fatal("going down was not signalled")
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = h.run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	testkit.Eventually(t, 10*time.Second, "probes of the failing server", func() bool { return f.probes.Load() >= 3 })
	if !h.isDown() {
		t.Fatal("back up while /health fails")
	}
	f.failing.Store(false)
	testkit.Eventually(t, 10*time.Second, "the replica back up", func() bool { return !h.isDown() })
	if err := generate(); err != nil {
		t.Fatal(err)
	}
	h.record(nil)
}

// TestFailuresMustBeConsecutive: a success between failures resets the
// count; 0 never takes the replica down.
func TestFailuresMustBeConsecutive(t *testing.T) {
	fail := &llm.HTTPError{Status: 502}
	h := newReplicaHealth(2, time.Second, nil, discard)
	h.record(fail)
	h.record(nil)
	h.record(fail)
	if h.isDown() {
		t.Fatal("down after failures that were not consecutive")
	}
	h.observe(errors.New("probe failed"), true)
	if !h.isDown() {
		t.Fatal("a failed probe does not count")
	}
	never := newReplicaHealth(0, time.Second, nil, discard)
	for range 10 {
		never.record(fail)
	}
	if never.isDown() {
		t.Fatal("down with LLM_DOWN_AFTER 0")
	}
}

// TestHeartbeatWhileDown: a down replica's worker removes its heartbeat
// entry (the coordinator then moves the replica's trajectories) and puts it
// back when it comes back up.
func TestHeartbeatWhileDown(t *testing.T) {
	js, kv := heartbeatsKV(t)
	ctx, cancel := context.WithCancel(context.Background())
	w := &Worker{cfg: Config{Replica: "r0", Slots: 1, HeartbeatInterval: 10 * time.Millisecond, KVBudget: 1, Scheduling: priority.SchedulingAction},
		d: &service.Deps{JS: js, Log: discard, Now: time.Now}, id: "w1",
		tracker: newTracker(false, nil, time.Now), health: newReplicaHealth(1, time.Second, nil, discard)}
	w.sched = &schedulingCheck{own: priority.SchedulingAction, log: discard, wake: w.health.signal}
	w.sched.observe(schema.Control{Scheduling: priority.SchedulingAction})
	done := make(chan error, 1)
	go func() { done <- w.heartbeat(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	present := func() bool { _, err := kv.Get(ctx, "gen.r0.w1"); return err == nil }
	testkit.Eventually(t, 10*time.Second, "a heartbeat", present)
	w.health.record(&llm.HTTPError{Status: 503})
	testkit.Eventually(t, 10*time.Second, "the entry removed while down", func() bool { return !present() })
	w.health.observe(nil, true)
	testkit.Eventually(t, 10*time.Second, "heartbeats again", present)

	// So while its ACTLOOP_SCHEDULING differs from the coordinator's.
	w.sched.observe(schema.Control{Scheduling: priority.SchedulingTrajectory})
	testkit.Eventually(t, 10*time.Second, "the entry removed while the modes differ", func() bool { return !present() })
	w.sched.observe(schema.Control{Scheduling: priority.SchedulingAction})
	testkit.Eventually(t, 10*time.Second, "heartbeats once they agree", present)
}

func TestConfigValidateLLM(t *testing.T) {
	var cfg Config
	service.Defaults(&cfg)
	if err := cfg.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if cfg.LLMAPI != llm.APISGLang || cfg.LLMDownAfter != 3 {
		t.Fatalf("defaults: api %q, down after %d", cfg.LLMAPI, cfg.LLMDownAfter)
	}
	if _, ok := NewGenerator(cfg).(*llm.SGLang); !ok {
		t.Fatal("sglang: not the SGLang client")
	}
	cfg.LLMAPI = llm.APIOpenAI
	if _, ok := NewGenerator(cfg).(*llm.OpenAI); !ok {
		t.Fatal("openai: not the OpenAI client")
	}
	for _, tt := range []struct {
		mutate func(*Config)
		want   string
	}{
		{func(c *Config) { c.LLMAPI = "vllm" }, "ACTLOOP_LLM_API"},
		{func(c *Config) { c.LLMDownAfter = -1 }, "ACTLOOP_LLM_DOWN_AFTER"},
		{func(c *Config) { c.LLMHealthInterval = 0 }, "ACTLOOP_LLM_HEALTH_INTERVAL"},
	} {
		c := cfg
		tt.mutate(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Validate = %v, want an error naming %s", err, tt.want)
		}
	}
}

// TestHeartbeatCarriesServerLoad: the heartbeat reports the inference
// server's KV pool and occupancy as the server's /metrics says them.
func TestHeartbeatCarriesServerLoad(t *testing.T) {
	js, kv := heartbeatsKV(t)
	ctx, cancel := context.WithCancel(context.Background())
	m := batching.DefaultConfig()
	ts := httptest.NewServer(sim.New(sim.Config{Model: &m}))
	t.Cleanup(ts.Close)
	w := &Worker{cfg: Config{Replica: "r0", Slots: 1, HeartbeatInterval: 10 * time.Millisecond, KVBudget: 1, Scheduling: priority.SchedulingAction},
		d: &service.Deps{JS: js, Log: discard, Now: time.Now}, id: "w1",
		gen:     llm.NewSGLang(ts.URL, llm.SGLangOptions{HTTPClient: ts.Client()}),
		tracker: newTracker(false, nil, time.Now), health: newReplicaHealth(1, time.Second, nil, discard)}
	w.sched = &schedulingCheck{own: priority.SchedulingAction, log: discard, wake: w.health.signal}
	w.sched.observe(schema.DefaultControl()) // a control state read
	done := make(chan error, 2)
	go func() { done <- w.heartbeat(ctx) }()
	go func() { done <- w.loadLoop(ctx) }()
	t.Cleanup(func() { cancel(); <-done; <-done })

	testkit.Eventually(t, 10*time.Second, "a heartbeat with the server's pool", func() bool {
		e, err := kv.Get(ctx, "gen.r0.w1")
		if err != nil {
			return false
		}
		var h schema.Heartbeat
		return json.Unmarshal(e.Value(), &h) == nil && h.ServerKVTokens == m.MaxTotalTokens && h.ServerCacheHitRate == 0
	})

	// Beyond its one slot, the worker may run as many generations as fit
	// in the pool the server reported: one of 10,000 tokens runs, so 40
	// more of that size fit in 418,000.
	w.tracker.inFlight.Store(1)
	w.tracker.inFlightKV.Store(10000)
	if got, want := w.limit(), 1+(m.MaxTotalTokens-10000)/10000; got != want {
		t.Fatalf("dispatch limit %d, want %d", got, want)
	}
	w.cfg.Scheduling = priority.SchedulingTrajectory
	if got := w.limit(); got != 1 {
		t.Fatalf("dispatch limit %d under trajectory scheduling, want the one slot", got)
	}
}

// heartbeatsKV starts NATS with actloop's KV buckets and returns JetStream
// and the heartbeats bucket.
func heartbeatsKV(t *testing.T) (jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
	js := testkit.JetStream(t, testkit.StartNATS(t))
	if err := (bus.Topology{Memory: true}).EnsureKV(context.Background(), js); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), bus.BucketHeartbeats)
	if err != nil {
		t.Fatal(err)
	}
	return js, kv
}
