package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/actloop/actloop/internal/telemetry"
)

// One consumer span per message, a child of the publisher's span when the
// headers carry one; the handler's log lines carry what it added and the
// trace id; an error marks the span.
func TestTracing(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() {
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
		_ = tp.Shutdown(context.Background())
	})
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	tests := []struct {
		name       string
		headers    nats.Header
		err        error
		wantParent string
		wantStatus codes.Code
	}{
		{name: "child of the publisher", headers: nats.Header{"traceparent": {"00-" + traceID + "-" + parentID + "-01"}},
			wantParent: parentID, wantStatus: codes.Unset},
		{name: "root without trace context", headers: nil, wantStatus: codes.Unset},
		{name: "error", headers: nats.Header{"traceparent": {"00-" + traceID + "-" + parentID + "-01"}},
			err: errTransient, wantParent: parentID, wantStatus: codes.Error},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(telemetry.LogHandler{Handler: slog.NewJSONHandler(&buf, nil)})
			m := newFakeMsg(1)
			m.headers = tt.headers
			var inner trace.SpanContext
			err := Tracing("gen-r0")(func(ctx context.Context, _ jetstream.Msg) error {
				inner = trace.SpanContextFromContext(ctx)
				telemetry.AddLogAttrs(ctx, "traj_id", "t-1")
				log.InfoContext(ctx, "step")
				return tt.err
			})(context.Background(), m)
			if !errors.Is(err, tt.err) || (err == nil) != (tt.err == nil) {
				t.Fatalf("returned %v, want %v", err, tt.err)
			}
			ended := rec.Ended()
			s := ended[len(ended)-1]
			if s.Name() != "gen-r0" || s.SpanKind() != trace.SpanKindConsumer || s.SpanContext().SpanID() != inner.SpanID() {
				t.Fatalf("span %s (%v, %s), want gen-r0, a consumer span, the handler's", s.Name(), s.SpanKind(), s.SpanContext().SpanID())
			}
			if got := s.Parent().SpanID(); (tt.wantParent == "" && got.IsValid()) || (tt.wantParent != "" && got.String() != tt.wantParent) {
				t.Errorf("parent %s, want %q", got, tt.wantParent)
			}
			if tt.wantParent != "" && s.SpanContext().TraceID().String() != traceID {
				t.Errorf("trace %s, want the publisher's %s", s.SpanContext().TraceID(), traceID)
			}
			if s.Status().Code != tt.wantStatus {
				t.Errorf("status %v, want %v", s.Status(), tt.wantStatus)
			}
			var line map[string]any
			if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
				t.Fatal(err)
			}
			if line["traj_id"] != "t-1" || line["trace_id"] != s.SpanContext().TraceID().String() {
				t.Errorf("log line %v: want traj_id and the span's trace_id", line)
			}
		})
	}
}
