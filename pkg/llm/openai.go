package llm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// OpenAIOptions configure an OpenAI client. Zero values take the defaults
// (those of SGLangOptions).
type OpenAIOptions struct {
	// HTTPClient sends the requests; nil means a new client keeping up to
	// 1024 idle connections. Its Timeout should stay 0: deadlines come from
	// the context.
	HTTPClient *http.Client
	// Timeout bounds a Generate call, retries included, whose context has no
	// deadline. Default 10m.
	Timeout time.Duration
	// Retries is how many times a transient failure (connection error, 5xx)
	// is retried. Default 3; negative means none.
	Retries int
	// Backoff is the base of the full-jitter back-off. Default 200ms.
	Backoff time.Duration
	// Model is sent as "model"; empty leaves it out, which vLLM reads as
	// its served model.
	Model string
}

// OpenAI is a client of an OpenAI-compatible completions server, written
// against vLLM (vllm/entrypoints/openai/api_server.py): POST /v1/completions
// with a token-id prompt, streamed, with the sampled tokens' log-probs and
// their ids ("token_id:<id>"); GET /health.
//
// Abort. vLLM has no abort endpoint: it aborts a request when its client
// disconnects (api_server.py wraps create_completion in with_cancellation;
// the engine's generate aborts the request when its consumer is
// cancelled). So Abort and AbortPrefix cancel the in-flight calls with the
// matching request ids, and those calls return a FinishAbort Result holding
// every token that had streamed in before the cancel: a prefix of what the
// server generated, shorter by what was still in flight. The request id
// travels as the X-Request-Id header (OpenAIServing._base_request_id in
// vllm/entrypoints/openai/serving_engine.py) and as request_id.
//
// vLLM reports no weight version: Result.WeightVersion stays empty and OpenAI
// is not a VersionSetter.
//
// It is safe for concurrent use.
type OpenAI struct {
	httpCore
	model string

	mu      sync.Mutex
	flights map[*flight]struct{}
}

var (
	_ Generator     = (*OpenAI)(nil)
	_ PrefixAborter = (*OpenAI)(nil)
	_ HealthChecker = (*OpenAI)(nil)
)

// flight is one in-flight Generate call.
type flight struct {
	rid      string
	cancel   context.CancelCauseFunc
	received atomic.Int64 // output tokens streamed in by the current attempt
}

// errAbort is the cancel cause of a call aborted by Abort or AbortPrefix.
var errAbort = errors.New("aborted by the client")

// NewOpenAI returns a client of the OpenAI-compatible server at baseURL
// (e.g. "http://10.0.0.5:8000"; without the /v1).
func NewOpenAI(baseURL string, opts OpenAIOptions) *OpenAI {
	return &OpenAI{
		httpCore: newHTTPCore(baseURL, opts.HTTPClient, opts.Timeout, opts.Retries, opts.Backoff),
		model:    opts.Model,
		flights:  map[*flight]struct{}{},
	}
}

// Generate implements Generator with a streamed POST /v1/completions. It
// retries transient failures under the same request id, starting over: the
// output is taken only from the attempt that finished.
func (c *OpenAI) Generate(ctx context.Context, req Request) (Result, error) {
	if err := req.Validate(); err != nil {
		return Result{}, err
	}
	body, err := encodeCompletionRequest(req, c.model)
	if err != nil {
		return Result{}, fmt.Errorf("generate %s: encode: %w", req.RID, err)
	}
	ctx, cancel := withDefaultTimeout(ctx, c.timeout)
	defer cancel()
	ctx, abort := context.WithCancelCause(ctx)
	defer abort(nil)
	f := &flight{rid: req.RID, cancel: abort}
	c.mu.Lock()
	c.flights[f] = struct{}{}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.flights, f)
		c.mu.Unlock()
	}()

	var t tries
	res, err := backoff.Retry(ctx, func() (Result, error) {
		var acc completion
		f.received.Store(0)
		err := c.stream(ctx, req.RID, body, &acc, &f.received)
		aborted := errors.Is(context.Cause(ctx), errAbort)
		switch {
		case err == nil || (aborted && acc.finish != nil):
			return acc.result(), nil // an abort after the last token changes nothing
		case aborted:
			return acc.aborted(), nil
		}
		return Result{}, t.failed(ctx, err)
	}, c.retry()...)
	switch {
	case err == nil:
		return res, nil
	case errors.Is(context.Cause(ctx), errAbort): // aborted while waiting to try again
		return Result{Finish: Finish{Type: FinishAbort, Matched: -1, Message: errAbort.Error()}}, nil
	}
	return Result{}, fmt.Errorf("generate %s: %w", req.RID, t.wrap(err))
}

// stream runs one attempt, adding each event to acc.
func (c *OpenAI) stream(ctx context.Context, rid string, body []byte, acc *completion, received *atomic.Int64) error {
	h := http.Header{}
	h.Set("Accept", "text/event-stream")
	h.Set("X-Request-Id", rid)
	resp, err := c.send(ctx, http.MethodPost, "/v1/completions", body, h)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	rd := io.LimitReader(resp.Body, maxResponse)
	add := func(b []byte) error {
		d, err := decodeCompletionChunk(b)
		if err != nil {
			return err
		}
		if err := acc.add(d); err != nil {
			return err
		}
		received.Store(int64(len(acc.ids)))
		return nil
	}
	if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct == "application/json" {
		// A server that answered without streaming: one whole response.
		b, err := io.ReadAll(rd)
		if err == nil {
			err = add(b)
		}
		if err == nil && acc.finish == nil {
			err = badResponse("choices[0].finish_reason: missing")
		}
		return c.readErr(ctx, err)
	}
	err = readSSE(rd, add)
	if err == nil && acc.finish == nil {
		err = badResponse("event stream: [DONE] before a finish_reason")
	}
	if errors.Is(err, io.ErrUnexpectedEOF) && acc.finish != nil && acc.usage != nil {
		err = nil // everything arrived but the closing [DONE]
	}
	return c.readErr(ctx, err)
}

// readErr classifies an error met while reading a response body.
func (c *OpenAI) readErr(ctx context.Context, err error) error {
	var he *HTTPError
	switch {
	case err == nil, errors.Is(err, ErrBadResponse), errors.As(err, &he):
		return err
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return &transportError{fmt.Errorf("read event stream: %w", err)}
}

// Abort implements Generator: it cancels the in-flight Generate calls with
// request id rid, which then return what they had received as a FinishAbort
// Result; vLLM aborts a request whose client went away. An unknown or
// finished rid is harmless. It does not talk to the server.
func (c *OpenAI) Abort(_ context.Context, rid string) error {
	if !ValidRID(rid) {
		return fmt.Errorf("abort: %w: rid %q is not 32 lower-case hex digits", ErrInvalidRequest, rid)
	}
	c.cancelMatching(func(r string) bool { return r == rid })
	return nil
}

// AbortPrefix implements PrefixAborter by cancelling every in-flight call
// whose rid starts with prefix.
func (c *OpenAI) AbortPrefix(_ context.Context, prefix string) error {
	if len(prefix) != RIDPrefixLen || !isHex(prefix) {
		return fmt.Errorf("abort prefix: %w: %q is not %d lower-case hex digits", ErrInvalidRequest, prefix, RIDPrefixLen)
	}
	c.cancelMatching(func(r string) bool { return strings.HasPrefix(r, prefix) })
	return nil
}

func (c *OpenAI) cancelMatching(match func(rid string) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for f := range c.flights {
		if match(f.rid) {
			f.cancel(errAbort)
		}
	}
}

// Received reports how many output tokens the in-flight call with request
// id rid has streamed in so far (what an abort now would keep); ok is false
// when no call with that rid is in flight.
func (c *OpenAI) Received(rid string) (n int, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for f := range c.flights {
		if f.rid == rid {
			return int(f.received.Load()), true
		}
	}
	return 0, false
}

// Health checks GET /health once (no retries): nil means the server answered
// 200.
func (c *OpenAI) Health(ctx context.Context) error { return c.health(ctx) }

// completion accumulates the events of one streamed completion.
type completion struct {
	ids    []int32
	lps    []float32
	finish *Finish
	usage  *usageInfo
}

func (a *completion) add(d delta) error {
	if a.finish != nil && len(d.ids) > 0 {
		return badResponse("event stream: tokens after finish_reason")
	}
	a.ids = append(a.ids, d.ids...)
	a.lps = append(a.lps, d.lps...)
	if d.finish != nil {
		a.finish = d.finish
	}
	if d.usage != nil {
		a.usage = d.usage
	}
	return nil
}

// result is the finished completion.
func (a *completion) result() Result {
	res := Result{OutputIDs: a.ids, Logprobs: a.lps, Finish: *a.finish, CompletionTokens: len(a.ids)}
	if res.OutputIDs == nil {
		res.OutputIDs, res.Logprobs = []int32{}, []float32{}
	}
	if res.Finish.Type == FinishLength && res.Finish.Length < 0 {
		res.Finish.Length = len(a.ids)
	}
	if u := a.usage; u != nil {
		if u.PromptTokens != nil {
			res.PromptTokens = *u.PromptTokens
		}
		if u.CompletionTokens != nil {
			res.CompletionTokens = *u.CompletionTokens
		}
		if d := u.PromptTokensDetails; d != nil && d.CachedTokens != nil {
			res.CachedTokens = *d.CachedTokens
		}
	}
	return res
}

// aborted is what a cancelled call had received.
func (a *completion) aborted() Result {
	return Result{OutputIDs: a.ids, Logprobs: a.lps, CompletionTokens: len(a.ids),
		Finish: Finish{Type: FinishAbort, Matched: -1, Message: errAbort.Error()}}
}
