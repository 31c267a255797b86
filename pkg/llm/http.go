package llm

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"
)

// httpCore is the HTTP plumbing both clients share: one server, a default
// deadline, retries of transient failures with full-jitter back-off.
type httpCore struct {
	base    string
	hc      *http.Client
	timeout time.Duration
	retries int
	backoff time.Duration
}

func newHTTPCore(baseURL string, hc *http.Client, timeout time.Duration, retries int, backoff time.Duration) httpCore {
	c := httpCore{base: strings.TrimRight(baseURL, "/"), hc: hc, timeout: timeout, retries: retries, backoff: backoff}
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

// call sends one request, retrying transient failures with back-off.
func (c *httpCore) call(ctx context.Context, method, path string, body []byte) ([]byte, error) {
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
		if werr := c.wait(ctx, attempt); werr != nil {
			return nil, fmt.Errorf("after %d attempts: %w (last error: %v)", attempt+1, werr, err)
		}
	}
}

// wait sleeps the back-off before retry attempt+1, or until ctx ends.
func (c *httpCore) wait(ctx context.Context, attempt int) error {
	t := time.NewTimer(c.delay(attempt))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// delay is the full-jitter back-off before retry attempt+1.
func (c *httpCore) delay(attempt int) time.Duration {
	ceiling := c.backoff << min(attempt, 5)
	return rand.N(ceiling) + 1
}

// once sends one request and returns the body of a 2xx answer.
func (c *httpCore) once(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	resp, err := c.send(ctx, method, path, body, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &transportError{fmt.Errorf("read response: %w", err)}
	}
	return b, nil
}

// send sends one request and returns a 2xx response, whose body the caller
// closes; any other answer is an *HTTPError.
func (c *httpCore) send(ctx context.Context, method, path string, body []byte, header http.Header) (*http.Response, error) {
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
	for k, vs := range header {
		hreq.Header[k] = vs
	}
	resp, err := c.hc.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &transportError{err}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		if err != nil && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &HTTPError{Status: resp.StatusCode, Body: string(b)}
	}
	return resp, nil
}

// health checks GET /health once (no retries).
func (c *httpCore) health(ctx context.Context) error {
	ctx, cancel := withDefaultTimeout(ctx, controlTimeout)
	defer cancel()
	if _, err := c.once(ctx, http.MethodGet, "/health", nil); err != nil {
		return fmt.Errorf("health: %w", err)
	}
	return nil
}

// withDefaultTimeout gives a deadline-less ctx the timeout d.
func withDefaultTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}
