package devstack_test

import (
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/actloop/actloop/internal/testkit"
)

// One span per trajectory, one per step, all in the trajectory's trace,
// across services, through the W3C trace context in NATS headers.
func TestStepSpansJoinTheTrajectoryTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() {
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
	})

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
