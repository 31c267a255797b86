package devstack_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/actloop/actloop/internal/coordinator"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/pkg/llm"
)

// recordSpans installs a tracer provider that records every span, and the
// W3C propagator, until the end of t.
func recordSpans(t *testing.T) *tracetest.SpanRecorder {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() {
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
	})
	return rec
}

// One span per trajectory, one per step, all in the trajectory's trace,
// across services, through the W3C trace context in NATS headers.
func TestStepSpansJoinTheTrajectoryTrace(t *testing.T) {
	rec := recordSpans(t)

	e := newEnv(t, 1)
	if _, err := e.stack.StartAll(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.submit(simSample("traced", "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"))
	e.results(1)
	// The last env step's span ends after its commit, which may be after the
	// result is out: wait for the trajectory span and one span of each step
	// (a step delivered twice has a second span, so a count is not enough).
	var traj sdktrace.ReadOnlySpan
	testkit.Eventually(t, wait, "the trajectory span and its gen, start, exec and finish spans to end", func() bool {
		traj = nil
		seen := map[string]bool{}
		for _, s := range rec.Ended() {
			switch s.Name() {
			case "trajectory":
				traj = s
			case "gen-r0":
				seen["gen"] = true
			case "env-env-0":
				for _, kv := range s.Attributes() {
					if kv.Key == "kind" {
						seen[kv.Value.AsString()] = true
					}
				}
			}
		}
		return traj != nil && seen["gen"] && seen["start"] && seen["exec"] && seen["finish"]
	})
	steps := map[string]int{}
	for _, s := range rec.Ended() {
		switch s.Name() {
		case "gen-r0", "env-env-0":
			steps[s.Name()]++
			if s.SpanContext().TraceID() != traj.SpanContext().TraceID() || s.Parent().SpanID() != traj.SpanContext().SpanID() {
				t.Errorf("%s span (trace %s, parent %s) is not a child of the trajectory span (trace %s, id %s)", s.Name(),
					s.SpanContext().TraceID(), s.Parent().SpanID(), traj.SpanContext().TraceID(), traj.SpanContext().SpanID())
			}
		}
	}
	// The step spans say what the step did.
	attrs := func(s sdktrace.ReadOnlySpan) map[string]attribute.Value {
		m := map[string]attribute.Value{}
		for _, kv := range s.Attributes() {
			m[string(kv.Key)] = kv.Value
		}
		return m
	}
	for _, s := range rec.Ended() {
		a := attrs(s)
		switch {
		case s.Name() == "gen-r0":
			if a["replica"].AsString() != "r0" || a["tokens_in"].AsInt64() <= 0 || a["tokens_out"].AsInt64() <= 0 ||
				a["weight_version"].Type() != attribute.INT64 || a["preempted"].Type() != attribute.BOOL || a["queue_wait_ms"].Type() != attribute.INT64 {
				t.Errorf("gen span attributes %v", a)
			}
		case s.Name() == "env-env-0" && a["kind"].AsString() == "exec":
			if a["exit_code"].Type() != attribute.INT64 || a["exec_ms"].Type() != attribute.INT64 {
				t.Errorf("exec span attributes %v", a)
			}
		}
	}
	// start, exec (submits), finish; one generation. A loaded machine may
	// deliver a step twice (its ack late): the copy has a span of its own
	// but runs no other kind of step.
	kinds := map[string]bool{}
	for _, s := range rec.Ended() {
		if k := attrs(s)["kind"].AsString(); s.Name() == "env-env-0" && k != "" {
			kinds[k] = true
		}
	}
	if steps["gen-r0"] != 1 || steps["env-env-0"] < 3 || len(kinds) != 3 || !kinds["start"] || !kinds["exec"] || !kinds["finish"] {
		for _, s := range rec.Ended() {
			t.Logf("span %s trace %s id %s parent %s", s.Name(), s.SpanContext().TraceID(), s.SpanContext().SpanID(), s.Parent().SpanID())
		}
		t.Errorf("step spans %v (env kinds %v), want 1 gen and env start, exec and finish", steps, kinds)
	}
}

// gatedGen is the simulator's client whose first generation waits for
// open.
type gatedGen struct {
	*llm.SGLang
	once    sync.Once
	arrived chan struct{} // closed at the first generation
	open    chan struct{}
}

func (g *gatedGen) Generate(ctx context.Context, req llm.Request) (llm.Result, error) {
	g.once.Do(func() { close(g.arrived) })
	select {
	case <-g.open:
	case <-ctx.Done():
		return llm.Result{}, ctx.Err()
	}
	return g.SGLang.Generate(ctx, req)
}

// A trajectory admitted under one coordinator and run on under the next
// (the first cut off, the standby taking the lease) stays one trace: its
// span context is stored with its state, so the steps after the change are
// children of the trajectory span the first leader started, and that
// leader ended the span, handed over, when its term ended, so the trace
// keeps its root.
func TestTrajectoryTraceSurvivesLeaderChange(t *testing.T) {
	rec := recordSpans(t)
	e := newEnv(t, 1)
	cfg := e.stack.CoordinatorConfig()
	cfg.LeaderLease = time.Second
	elected := map[string]*coordinator.Elected{}
	deps := map[string]*service.Deps{}
	for _, id := range []string{"a", "b"} {
		c := cfg
		c.CoordinatorID = id
		var err error
		if elected[id], deps[id], err = e.stack.StartElectedCoordinator(e.ctx, c); err != nil {
			t.Fatal(err)
		}
		if id == "a" {
			testkit.Eventually(t, wait, "a to lead", func() bool { return elected["a"].Current() != nil })
		}
	}
	if _, err := e.stack.StartEnvWorker(e.ctx, e.stack.EnvWorkerConfig("env-0")); err != nil {
		t.Fatal(err)
	}
	// The first generation waits until b leads: everything after the
	// sandbox's start runs under b.
	gen := &gatedGen{SGLang: llm.NewSGLang(e.stack.SimURLs["r0"], llm.SGLangOptions{}),
		arrived: make(chan struct{}), open: make(chan struct{})}
	if _, err := e.stack.StartGenWorker(e.ctx, "r0", gen); err != nil {
		t.Fatal(err)
	}
	e.submit(simSample("leader-change", "```bash\necho one\n```", "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"))
	select {
	case <-gen.arrived:
	case <-time.After(wait):
		t.Fatal("no generation")
	}
	deps["a"].NC.Close() // cut off: its renewals fail
	testkit.Eventually(t, wait, "a to step down and b to lead", func() bool {
		return elected["a"].Current() == nil && elected["b"].Current() != nil
	})
	changed := time.Now()
	close(gen.open)
	if r := e.results(1)["leader-change"]; !r.Solved() {
		t.Fatalf("result %s %q", r.Status, r.Reason)
	}

	var traj sdktrace.ReadOnlySpan
	testkit.Eventually(t, wait, "the trajectory span and the finish step's span to end", func() bool {
		traj = nil
		finished := false
		for _, s := range rec.Ended() {
			a := attrsOf(s)
			switch {
			case s.Name() == "trajectory" && a["traj_id"].AsString() == "leader-change":
				traj = s
			case s.Name() == "env-env-0" && a["traj_id"].AsString() == "leader-change" && a["kind"].AsString() == "finish":
				finished = true
			}
		}
		return traj != nil && finished
	})
	if !attrsOf(traj)["handed_over"].AsBool() {
		t.Errorf("trajectory span attributes %v: want handed_over (a's term ended before the result)", attrsOf(traj))
	}
	after := 0
	for _, s := range rec.Ended() {
		a := attrsOf(s)
		if (s.Name() != "gen-r0" && s.Name() != "env-env-0") || a["traj_id"].AsString() != "leader-change" {
			continue
		}
		if s.SpanContext().TraceID() != traj.SpanContext().TraceID() || s.Parent().SpanID() != traj.SpanContext().SpanID() {
			t.Errorf("%s span (kind %q, trace %s, parent %s) is not a child of the trajectory span (trace %s, id %s)",
				s.Name(), a["kind"].AsString(), s.SpanContext().TraceID(), s.Parent().SpanID(),
				traj.SpanContext().TraceID(), traj.SpanContext().SpanID())
		}
		if s.StartTime().After(changed) {
			after++
		}
	}
	if after < 3 { // the second generation, both commands and the finish at least
		t.Errorf("%d step spans started under the new leader, want the steps after the first generation", after)
	}
}

func attrsOf(s sdktrace.ReadOnlySpan) map[string]attribute.Value {
	m := map[string]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value
	}
	return m
}
