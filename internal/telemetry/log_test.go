package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

func TestLogHandlerAddsTraceAndTrajectory(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(LogHandler{slog.NewJSONHandler(&buf, nil)}).With("service", "gen-worker")
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	ctx = WithLogAttrs(ctx)
	AddLogAttrs(ctx, "traj_id", "t-1", "seq", int64(4))

	lines := []map[string]any{}
	for _, f := range []func(){
		func() { log.WarnContext(ctx, "step failed", "error", "boom") },
		func() { log.InfoContext(ctx, "named again", "traj_id", "t-1") }, // not twice
		func() { log.Info("no context") },
	} {
		buf.Reset()
		f()
		var m map[string]any
		if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
			t.Fatalf("%s: %v", buf.String(), err)
		}
		lines = append(lines, m)
		if n := bytes.Count(buf.Bytes(), []byte(`"traj_id"`)); n > 1 {
			t.Errorf("traj_id %d times: %s", n, buf.String())
		}
	}
	for i, m := range lines[:2] {
		if m["trace_id"] != tid.String() || m["span_id"] != sid.String() || m["traj_id"] != "t-1" || m["service"] != "gen-worker" {
			t.Errorf("line %d = %v, want the trace, the span and the trajectory", i, m)
		}
	}
	if lines[0]["seq"] != float64(4) {
		t.Errorf("seq = %v", lines[0]["seq"])
	}
	if _, ok := lines[2]["trace_id"]; ok {
		t.Errorf("a line without a context has a trace id: %v", lines[2])
	}
	AddLogAttrs(context.Background(), "traj_id", "x") // no room: nothing happens
}
