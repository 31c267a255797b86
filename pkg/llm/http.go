package llm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
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

// call sends one request, retrying transient failures as retry says.
func (c *httpCore) call(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	var t tries
	b, err := backoff.Retry(ctx, func() ([]byte, error) {
		b, err := c.once(ctx, method, path, body)
		return b, t.failed(ctx, err)
	}, c.retry()...)
	if err != nil {
		return nil, t.wrap(err)
	}
	return b, nil
}

// retry is how a call is retried: up to retries times more, after
// exponential back-off from backoff (each wait drawn from (0, 2×] its step,
// the step doubling up to 32×), for as long as it takes.
func (c *httpCore) retry() []backoff.RetryOption {
	return []backoff.RetryOption{backoff.WithBackOff(&backoff.ExponentialBackOff{InitialInterval: c.backoff,
		RandomizationFactor: 1, Multiplier: 2, MaxInterval: c.backoff << 5}),
		backoff.WithMaxTries(uint(c.retries) + 1), backoff.WithMaxElapsedTime(0)}
}

// tries counts a call's attempts and keeps the last one's error, for the
// error the call returns.
type tries struct {
	n    int
	last error
}

// failed records an attempt that ended with err (nil: it did not) and
// returns err, marked permanent when no retry can help: it is not
// Temporary, or ctx has ended.
func (t *tries) failed(ctx context.Context, err error) error {
	t.n++
	if t.last = err; err != nil && (!Temporary(err) || ctx.Err() != nil) {
		return backoff.Permanent(err)
	}
	return err
}

// wrap is the error of a call that failed with err: as it is after one
// attempt, else saying how many there were (and the last attempt's error
// when err is ctx's, which ended a wait).
func (t *tries) wrap(err error) error {
	switch {
	case t.n <= 1:
		return err
	case !errors.Is(err, t.last):
		return fmt.Errorf("after %d attempts: %w (last error: %v)", t.n, err, t.last)
	}
	return fmt.Errorf("after %d attempts: %w", t.n, err)
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
