package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/actloop/actloop/internal/telemetry/telemetrytest"
	"github.com/actloop/actloop/internal/testkit"
)

// `actloop dev` set up by the standard OTEL_* variables alone exports a
// trajectory's span tree over OTLP/HTTP: the trajectory span; under it its
// gen step spans, each with the LLM call's client span (GenAI semantic
// conventions, token counts), and its env step spans, with the sandbox's
// start, commands and eval; one trace; and on every resource the service
// name and attributes the variables gave, and the build's version.
func TestDevExportsTheSpanTreeOverOTLP(t *testing.T) {
	rec := telemetrytest.NewReceiver(t)
	for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_SAMPLER", "OTEL_PROPAGATORS", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_HEADERS"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rec.URL)
	t.Setenv("OTEL_SERVICE_NAME", "actloop-trace-test")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test")
	tp, prop := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	t.Cleanup(func() {
		otel.SetTracerProvider(tp)
		otel.SetTextMapPropagator(prop)
	})

	var stdout, stderr bytes.Buffer
	args := []string{"dev", "--tasks", "1", "--json", "--dir", t.TempDir(), "--addr", "127.0.0.1:0", "--replicas", "1"}
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("dev: %v\n%s", err, stderr.String())
	}
	// dev flushes its spans as it ends; the last may still be on its way.
	var root *telemetrytest.Span
	testkit.Eventually(t, time.Minute, "the trajectory span and its steps' spans at the receiver", func() bool {
		root = nil
		names := map[string]bool{}
		for _, s := range rec.Spans() {
			names[s.GetName()] = true
			if s.GetName() == "trajectory" {
				root = &s
			}
		}
		return root != nil && names["gen-r0"] && names["env-env-0"] && names["sandbox.start"] && names["sandbox.exec"] && names["sandbox.eval"]
	})
	if bad := rec.Refused(); len(bad) > 0 {
		t.Fatalf("refused exports: %v", bad)
	}
	spans := rec.Spans()
	byID := map[string]telemetrytest.Span{}
	for _, s := range spans {
		byID[hex.EncodeToString(s.GetSpanId())] = s
	}
	parentOf := func(s telemetrytest.Span) telemetrytest.Span { return byID[hex.EncodeToString(s.GetParentSpanId())] }
	trace := hex.EncodeToString(root.GetTraceId())

	// Every resource: the variables' service name and attribute, a version.
	for _, s := range spans {
		r := telemetrytest.Attrs(s.Resource.GetAttributes())
		if r["service.name"] != "actloop-trace-test" || r["deployment.environment.name"] != "test" || r["service.version"] == "" ||
			r["telemetry.sdk.language"] != "go" {
			t.Fatalf("span %s: resource %v", s.GetName(), r)
		}
	}
	// The tree, in the trajectory's trace.
	count := map[string]int{}
	envKind := map[string]bool{} // kinds of env step that had sandbox spans under them
	evalOnStep := false          // the finish step's span has the eval's outcome too
	for _, s := range spans {
		if hex.EncodeToString(s.GetTraceId()) != trace {
			continue // the services' own work (results, predictions): other traces
		}
		name, a, p := s.GetName(), telemetrytest.Attrs(s.GetAttributes()), parentOf(s)
		count[strings.SplitN(name, " ", 2)[0]]++
		switch {
		case name == "gen-r0", name == "env-env-0":
			if p.Span == nil || p.GetName() != "trajectory" {
				t.Errorf("%s span (kind %v): parent %v, want the trajectory span", name, a["kind"], p.GetName())
			}
			if _, ok := a["eval_exit_code"]; ok && a["kind"] == "finish" {
				evalOnStep = true
			}
		case strings.HasPrefix(name, "text_completion"):
			if p.Span == nil || p.GetName() != "gen-r0" || s.GetKind() != tracepb.Span_SPAN_KIND_CLIENT {
				t.Errorf("%s: kind %v, parent %v; want a client span under the gen step", name, s.GetKind(), p.GetName())
			}
			model, _ := a["gen_ai.request.model"].(string)
			if name != "text_completion "+model || model == "" || a["gen_ai.operation.name"] != "text_completion" ||
				a["gen_ai.provider.name"] != "sglang" || a["server.address"] != "127.0.0.1" || a["server.port"] == nil {
				t.Errorf("%s: attributes %v", name, a)
			}
			if in, _ := a["gen_ai.usage.input_tokens"].(int64); in <= 0 {
				t.Errorf("%s: gen_ai.usage.input_tokens %v", name, a["gen_ai.usage.input_tokens"])
			}
			if out, _ := a["gen_ai.usage.output_tokens"].(int64); out <= 0 {
				t.Errorf("%s: gen_ai.usage.output_tokens %v", name, a["gen_ai.usage.output_tokens"])
			}
		case strings.HasPrefix(name, "sandbox."):
			// The eval's own start and command are under its eval span.
			step := p
			if step.Span != nil && step.GetName() == "sandbox.eval" {
				step = parentOf(step)
			}
			if step.Span == nil || step.GetName() != "env-env-0" {
				t.Errorf("%s: not under an env step span (parent %v)", name, p.GetName())
				continue
			}
			kind, _ := telemetrytest.Attrs(step.GetAttributes())["kind"].(string)
			envKind[name+":"+kind] = true
			if a["sandbox.backend"] == nil {
				t.Errorf("%s: attributes %v", name, a)
			}
			if name == "sandbox.exec" {
				if _, ok := a["process.exit.code"].(int64); !ok {
					t.Errorf("%s: attributes %v", name, a)
				}
			}
		}
	}
	for _, want := range []string{"sandbox.start:start", "sandbox.exec:exec", "sandbox.eval:finish", "sandbox.start:finish", "sandbox.exec:finish"} {
		if !envKind[want] {
			t.Errorf("no %s span under an env step of kind %s (seen %v)", strings.Split(want, ":")[0], strings.Split(want, ":")[1], envKind)
		}
	}
	if !evalOnStep {
		t.Error("no finish step span with eval_exit_code")
	}
	if count["gen-r0"] == 0 || count["text_completion"] == 0 || count["env-env-0"] < 3 {
		t.Errorf("spans in the trajectory's trace %v: want gen steps each with its LLM call, and env steps", count)
	}
	if t.Failed() {
		for _, s := range spans {
			t.Logf("span %s trace %x id %x parent %x", s.GetName(), s.GetTraceId(), s.GetSpanId(), s.GetParentSpanId())
		}
	}
}
