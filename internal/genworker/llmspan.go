package genworker

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0" // the last with the GenAI conventions
	"go.opentelemetry.io/otel/trace"

	"github.com/actloop/actloop/pkg/llm"
)

// Providers (gen_ai.provider.name) of the inference servers the gen-worker
// speaks to, named by the server its API is written against: none is among
// the conventions' well-known values.
const (
	providerSGLang = "sglang"
	providerVLLM   = "vllm" // ACTLOOP_LLM_API=openai
)

// Model lookups: how long one may take, and how soon one that failed is
// tried again.
const (
	modelLookupTimeout = 2 * time.Second
	modelLookupEvery   = 30 * time.Second
)

// llmSpans starts the client span of each generation the worker asks of its
// inference server, as the OpenTelemetry GenAI semantic conventions name
// it: "text_completion <model>", kind client, a child of the gen step's
// span, with the request's model, sampling and server and the answer's
// token counts and finish reason.
type llmSpans struct {
	provider string
	address  string
	port     int
	namer    llm.ModelNamer // nil: the model is cfg.LLMModel or unknown
	now      func() time.Time

	mu    sync.Mutex
	model string
	tried time.Time // the last lookup that failed
}

func newLLMSpans(cfg Config, gen llm.Generator, now func() time.Time) *llmSpans {
	if now == nil {
		now = time.Now
	}
	s := &llmSpans{provider: providerSGLang, model: cfg.LLMModel, now: now}
	if cfg.LLMAPI == llm.APIOpenAI {
		s.provider = providerVLLM
	}
	if n, ok := gen.(llm.ModelNamer); ok {
		s.namer = n
	}
	if u, err := url.Parse(cfg.LLMURL); err == nil && u.Hostname() != "" {
		s.address = u.Hostname()
		if p, err := strconv.Atoi(u.Port()); err == nil {
			s.port = p
		} else if p, err := net.LookupPort("tcp", u.Scheme); err == nil {
			s.port = p
		}
	}
	return s
}

// modelName is the model the server serves: ACTLOOP_LLM_MODEL, or what
// the server says, asked once (again after a while when asking failed);
// "" while unknown.
func (s *llmSpans) modelName(ctx context.Context) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.model != "" || s.namer == nil || (!s.tried.IsZero() && s.now().Sub(s.tried) < modelLookupEvery) {
		return s.model
	}
	ctx, cancel := context.WithTimeout(ctx, modelLookupTimeout)
	defer cancel()
	m, err := s.namer.ModelName(ctx)
	if err != nil {
		s.tried = s.now()
		return ""
	}
	s.model = m
	return m
}

// start starts req's span in ctx.
func (s *llmSpans) start(ctx context.Context, req llm.Request) (context.Context, trace.Span) {
	op := semconv.GenAIOperationNameTextCompletion
	name := op.Value.AsString()
	attrs := []attribute.KeyValue{op, semconv.GenAIProviderNameKey.String(s.provider),
		semconv.GenAIRequestMaxTokens(req.Sampling.MaxNewTokens), semconv.GenAIRequestTemperature(req.Sampling.Temperature)}
	if m := s.modelName(ctx); m != "" {
		name += " " + m
		attrs = append(attrs, semconv.GenAIRequestModel(m))
	}
	if s.address != "" {
		attrs = append(attrs, semconv.ServerAddress(s.address))
		if s.port > 0 {
			attrs = append(attrs, semconv.ServerPort(s.port))
		}
	}
	if p := req.Sampling.TopP; p > 0 {
		attrs = append(attrs, semconv.GenAIRequestTopP(p))
	}
	if k := req.Sampling.TopK; k > 0 {
		attrs = append(attrs, semconv.GenAIRequestTopK(float64(k)))
	}
	if len(req.Sampling.Stop) > 0 {
		attrs = append(attrs, semconv.GenAIRequestStopSequences(req.Sampling.Stop...))
	}
	return tracer().Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

// end ends span with the answer to req: its token counts (the server's,
// or counted here when it reports none) and finish reason, or err.
func (s *llmSpans) end(span trace.Span, req llm.Request, res llm.Result, err error) {
	defer span.End()
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(errorType(err))
		return
	}
	in, out := res.PromptTokens, res.CompletionTokens
	if in == 0 {
		in = len(req.InputIDs)
	} else { // the server counts: its prefix cache's too
		span.SetAttributes(semconv.GenAIUsageCacheReadInputTokens(res.CachedTokens))
	}
	if out == 0 {
		out = len(res.OutputIDs)
	}
	span.SetAttributes(semconv.GenAIUsageInputTokens(in), semconv.GenAIUsageOutputTokens(out))
	if res.Finish.Type != 0 {
		span.SetAttributes(semconv.GenAIResponseFinishReasons(res.Finish.Type.String()))
	}
}

// errorType is the error.type of a failed generation: the HTTP status the
// server answered, timeout, bad_response, or _OTHER.
func errorType(err error) attribute.KeyValue {
	var he *llm.HTTPError
	switch {
	case errors.As(err, &he):
		return semconv.ErrorTypeKey.String(strconv.Itoa(he.Status))
	case errors.Is(err, context.DeadlineExceeded):
		return semconv.ErrorTypeKey.String("timeout")
	case errors.Is(err, llm.ErrBadResponse):
		return semconv.ErrorTypeKey.String("bad_response")
	}
	return semconv.ErrorTypeOther
}

// tracer is looked up per use so that a tracer provider installed after
// start-up (or replaced in tests) takes effect.
func tracer() trace.Tracer { return otel.Tracer("github.com/actloop/actloop/internal/genworker") }
