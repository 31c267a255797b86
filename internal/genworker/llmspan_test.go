package genworker

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/actloop/actloop/pkg/llm"
)

// namer is a Generator whose server names its model, or fails to.
type namer struct {
	llm.Generator
	name  string
	err   error
	calls int
}

func (n *namer) ModelName(context.Context) (string, error) {
	n.calls++
	return n.name, n.err
}

// The LLM call's span: named and attributed as the GenAI conventions say,
// a client child of the step's span, with the server's token counts (or
// the request's and answer's lengths when it reports none), and an error
// status and error.type for a failed call.
func TestLLMSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	now := time.Unix(0, 0)
	n := &namer{err: errors.New("down")}
	s := newLLMSpans(Config{LLMURL: "http://10.0.0.5:30000", LLMAPI: llm.APISGLang}, n, func() time.Time { return now })
	req := llm.Request{InputIDs: []int32{1, 2, 3}, Sampling: llm.SamplingParams{MaxNewTokens: 16, Temperature: 1, TopP: 0.9}}
	step, parent := otel.Tracer("test").Start(context.Background(), "gen-r0")

	// The model is unknown while the server does not say, asked again
	// only after a while.
	_, span := s.start(step, req)
	s.end(span, req, llm.Result{}, fmt.Errorf("generate: %w", &llm.HTTPError{Status: 503}))
	_, span = s.start(step, req)
	s.end(span, req, llm.Result{OutputIDs: []int32{7, 8}, Finish: llm.Finish{Type: llm.FinishStop}}, nil)
	if n.calls != 1 {
		t.Fatalf("model asked %d times within %v, want once", n.calls, modelLookupEvery)
	}
	now = now.Add(modelLookupEvery)
	n.name, n.err = "Qwen/Qwen3-8B", nil
	_, span = s.start(step, req)
	s.end(span, req, llm.Result{OutputIDs: []int32{7}, PromptTokens: 30, CompletionTokens: 1, CachedTokens: 20,
		Finish: llm.Finish{Type: llm.FinishLength}}, nil)
	parent.End()

	spans := rec.Ended()
	if len(spans) != 4 {
		t.Fatalf("%d spans, want 4", len(spans))
	}
	for _, tt := range []struct {
		name   string
		status codes.Code
		want   map[string]string
	}{
		{"text_completion", codes.Error, map[string]string{"error.type": "503", "gen_ai.operation.name": "text_completion",
			"gen_ai.provider.name": "sglang", "server.address": "10.0.0.5", "server.port": "30000", "gen_ai.request.max_tokens": "16"}},
		{"text_completion", codes.Unset, map[string]string{"gen_ai.usage.input_tokens": "3", "gen_ai.usage.output_tokens": "2",
			"gen_ai.response.finish_reasons": `["stop"]`}},
		{"text_completion Qwen/Qwen3-8B", codes.Unset, map[string]string{"gen_ai.request.model": "Qwen/Qwen3-8B",
			"gen_ai.usage.input_tokens": "30", "gen_ai.usage.output_tokens": "1", "gen_ai.usage.cache_read.input_tokens": "20"}},
	} {
		sp := spans[0]
		spans = spans[1:]
		got := map[string]string{}
		for _, kv := range sp.Attributes() {
			got[string(kv.Key)] = kv.Value.Emit()
		}
		if sp.Name() != tt.name || sp.SpanKind() != trace.SpanKindClient || sp.Status().Code != tt.status ||
			sp.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("span %q kind %v status %v parent %s; want %q, a client child of the step, status %v",
				sp.Name(), sp.SpanKind(), sp.Status().Code, sp.Parent().SpanID(), tt.name, tt.status)
		}
		for k, v := range tt.want {
			if got[k] != v {
				t.Errorf("span %q: %s = %q, want %q (all: %v)", sp.Name(), k, got[k], v, got)
			}
		}
	}
}
