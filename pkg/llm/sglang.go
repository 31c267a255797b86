package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"
)

// SGLangOptions configure an SGLang client. Zero values take the defaults.
type SGLangOptions struct {
	// HTTPClient sends the requests; nil means a new client over a clone
	// of http.DefaultTransport keeping up to 1024 idle connections. Deadlines come from the context, so the
	// client's own Timeout should stay 0.
	HTTPClient *http.Client
	// Timeout bounds a Generate call, retries included, whose context has no
	// deadline. Default 10m.
	Timeout time.Duration
	// Retries is how many times a transient failure (connection error, 5xx)
	// is retried. Default 3; negative means none.
	Retries int
	// Backoff is the base delay between retries: attempt n waits a uniformly
	// random time in [0, Backoff·2ⁿ) ("full jitter"), at most 32·Backoff.
	// Default 200ms.
	Backoff time.Duration
}

// Defaults of SGLangOptions.
const (
	DefaultTimeout = 10 * time.Minute
	DefaultRetries = 3
	DefaultBackoff = 200 * time.Millisecond
	// controlTimeout bounds Abort and Health calls whose context has no
	// deadline.
	controlTimeout = 30 * time.Second
	// maxIdleConns is how many idle connections the default client keeps.
	maxIdleConns = 1024
	// maxResponse bounds a response body.
	maxResponse = 256 << 20
)

// SGLang is a client of SGLang's native HTTP API (/generate, /abort_request,
// /health). It is safe for concurrent use.
type SGLang struct {
	base    string
	hc      *http.Client
	timeout time.Duration
	retries int
	backoff time.Duration
}

var _ Generator = (*SGLang)(nil)

// NewSGLang returns a client of the SGLang server at baseURL
// (e.g. "http://10.0.0.5:30000").
func NewSGLang(baseURL string, opts SGLangOptions) *SGLang {
	c := &SGLang{
		base:    strings.TrimRight(baseURL, "/"),
		hc:      opts.HTTPClient,
		timeout: opts.Timeout,
		retries: opts.Retries,
		backoff: opts.Backoff,
	}
	if c.hc == nil {
		// One server, as many requests at once as the worker has slots
		// (plus their aborts): keep their connections instead of the
		// default two idle ones per host.
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = maxIdleConns
		c.hc = &http.Client{Transport: t}
	}
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	switch {
	case c.retries == 0:
		c.retries = DefaultRetries
	case c.retries < 0:
		c.retries = 0
	}
	if c.backoff <= 0 {
		c.backoff = DefaultBackoff
	}
	return c
}

// Generate implements Generator with POST /generate (non-streamed, with
// log-probs). It retries transient failures under the same rid.
func (c *SGLang) Generate(ctx context.Context, req Request) (Result, error) {
	if err := req.Validate(); err != nil {
		return Result{}, err
	}
	body, err := encodeGenerateRequest(req)
	if err != nil {
		return Result{}, fmt.Errorf("generate %s: encode: %w", req.RID, err)
	}
	ctx, cancel := withDefaultTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.call(ctx, http.MethodPost, "/generate", body)
	if err != nil {
		return Result{}, fmt.Errorf("generate %s: %w", req.RID, err)
	}
	res, id, err := decodeGenerate(resp)
	if err != nil {
		return Result{}, fmt.Errorf("generate %s: %w", req.RID, err)
	}
	if id != "" && id != req.RID {
		return Result{}, fmt.Errorf("generate %s: %w", req.RID, badResponse("meta_info.id: %q is not the request's rid", id))
	}
	return res, nil
}

// Abort implements Generator with POST /abort_request {"rid": rid}. SGLang
// aborts every request whose rid starts with rid, so rid must be a full,
// valid request id (an empty one would match everything).
func (c *SGLang) Abort(ctx context.Context, rid string) error {
	if !ValidRID(rid) {
		return fmt.Errorf("abort: %w: rid %q is not 32 lower-case hex digits", ErrInvalidRequest, rid)
	}
	body, err := json.Marshal(abortRequest{RID: rid})
	if err != nil {
		return fmt.Errorf("abort %s: encode: %w", rid, err)
	}
	ctx, cancel := withDefaultTimeout(ctx, controlTimeout)
	defer cancel()
	if _, err := c.call(ctx, http.MethodPost, "/abort_request", body); err != nil {
		return fmt.Errorf("abort %s: %w", rid, err)
	}
	return nil
}

// AbortPrefix implements PrefixAborter with POST /abort_request {"rid":
// prefix}: SGLang aborts every request whose rid starts with it.
func (c *SGLang) AbortPrefix(ctx context.Context, prefix string) error {
	if len(prefix) != RIDPrefixLen || !isHex(prefix) {
		return fmt.Errorf("abort prefix: %w: %q is not %d lower-case hex digits", ErrInvalidRequest, prefix, RIDPrefixLen)
	}
	body, err := json.Marshal(abortRequest{RID: prefix})
	if err != nil {
		return fmt.Errorf("abort prefix %s: encode: %w", prefix, err)
	}
	ctx, cancel := withDefaultTimeout(ctx, controlTimeout)
	defer cancel()
	if _, err := c.call(ctx, http.MethodPost, "/abort_request", body); err != nil {
		return fmt.Errorf("abort prefix %s: %w", prefix, err)
	}
	return nil
}

// SetWeightVersion implements VersionSetter with POST
// /update_weight_version, passing abort_all_requests false: the endpoint
// aborts every in-flight request by default.
func (c *SGLang) SetWeightVersion(ctx context.Context, version string) error {
	body, err := json.Marshal(updateWeightVersionRequest{NewVersion: version, AbortAllRequests: false})
	if err != nil {
		return fmt.Errorf("update weight version: encode: %w", err)
	}
	ctx, cancel := withDefaultTimeout(ctx, controlTimeout)
	defer cancel()
	if _, err := c.call(ctx, http.MethodPost, "/update_weight_version", body); err != nil {
		return fmt.Errorf("update weight version to %s: %w", version, err)
	}
	return nil
}

// Health checks GET /health once (no retries): nil means the server answered
// 200.
func (c *SGLang) Health(ctx context.Context) error {
	ctx, cancel := withDefaultTimeout(ctx, controlTimeout)
	defer cancel()
	if _, err := c.once(ctx, http.MethodGet, "/health", nil); err != nil {
		return fmt.Errorf("health: %w", err)
	}
	return nil
}

// call sends one request, retrying transient failures with back-off.
func (c *SGLang) call(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	for attempt := 0; ; attempt++ {
		resp, err := c.once(ctx, method, path, body)
		if err == nil {
			return resp, nil
		}
		if attempt >= c.retries || !Temporary(err) || ctx.Err() != nil {
			if attempt > 0 {
				return nil, fmt.Errorf("after %d attempts: %w", attempt+1, err)
			}
			return nil, err
		}
		t := time.NewTimer(c.delay(attempt))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("after %d attempts: %w (last error: %v)", attempt+1, ctx.Err(), err)
		}
	}
}

// delay is the full-jitter back-off before retry attempt+1.
func (c *SGLang) delay(attempt int) time.Duration {
	ceiling := c.backoff << min(attempt, 5)
	return rand.N(ceiling) + 1
}

// once sends one request and returns the body of a 2xx answer.
func (c *SGLang) once(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	hreq, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		hreq.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &transportError{err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &transportError{fmt.Errorf("read response: %w", err)}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		if len(b) > maxErrorBody {
			b = b[:maxErrorBody]
		}
		return nil, &HTTPError{Status: resp.StatusCode, Body: string(b)}
	}
	return b, nil
}

// withDefaultTimeout gives a deadline-less ctx the timeout d.
func withDefaultTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}
