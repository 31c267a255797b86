package predict

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/actloop/actloop/pkg/schema"
)

// maxReplyBytes bounds what a backend server's answer may hold.
const maxReplyBytes = 1 << 20

// HTTP asks an external model server: it POSTs the PredictRequest as JSON
// and expects 2xx with {"remaining_tokens": N, "remaining_turns": M}, both
// non-negative numbers. Anything else is an error naming the problem.
type HTTP struct {
	url     string
	timeout time.Duration
	hc      *http.Client
}

var _ Predictor = (*HTTP)(nil)

// NewHTTP returns an HTTP predictor posting to url, each call bounded by
// timeout (none when <= 0) as well as by its context.
func NewHTTP(url string, timeout time.Duration) *HTTP {
	return &HTTP{url: url, timeout: timeout, hc: newClient()}
}

func newClient() *http.Client {
	return &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
}

// Close closes idle connections.
func (h *HTTP) Close() error {
	h.hc.CloseIdleConnections()
	return nil
}

// StatusError is a non-2xx answer of a backend server.
type StatusError struct {
	URL    string
	Status int
	Body   string // the start of the body
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s answered %d %s: %s", e.URL, e.Status, http.StatusText(e.Status), e.Body)
}

// Predict implements Predictor.
func (h *HTTP) Predict(ctx context.Context, req schema.PredictRequest) (schema.PredictReply, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return schema.PredictReply{}, fmt.Errorf("predict %s: %w", req.TrajID, err)
	}
	b, err := postJSON(ctx, h.hc, h.url, h.timeout, body)
	if err != nil {
		return schema.PredictReply{}, fmt.Errorf("predict %s: %w", req.TrajID, err)
	}
	rep, err := decodeHTTPReply(b)
	if err != nil {
		return schema.PredictReply{}, fmt.Errorf("predict %s: %s: %w", req.TrajID, h.url, err)
	}
	return rep, nil
}

// postJSON posts body to url (GETs when body is nil) and returns a 2xx
// answer's body.
func postJSON(ctx context.Context, hc *http.Client, url string, timeout time.Duration, body []byte) ([]byte, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	method, rd := http.MethodGet, io.Reader(nil)
	if body != nil {
		method, rd = http.MethodPost, bytes.NewReader(body)
	}
	hreq, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		hreq.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(hreq)
	if err != nil {
		return nil, err // names the method, the url and the cause (a deadline included)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxReplyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read answer of %s: %w", url, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, &StatusError{URL: url, Status: resp.StatusCode, Body: clip(string(b), 200)}
	}
	if len(b) > maxReplyBytes {
		return nil, fmt.Errorf("%s: answer larger than %d bytes: %w", url, maxReplyBytes, ErrBadReply)
	}
	return b, nil
}

// httpReply is what a model server answers.
type httpReply struct {
	RemainingTokens *float64 `json:"remaining_tokens"`
	RemainingTurns  *float64 `json:"remaining_turns"`
}

// decodeHTTPReply decodes a model server's answer. Every error wraps
// ErrBadReply and names the field.
func decodeHTTPReply(b []byte) (schema.PredictReply, error) {
	var in httpReply
	if err := json.Unmarshal(b, &in); err != nil {
		return schema.PredictReply{}, fmt.Errorf("%w: not a JSON object with numbers remaining_tokens and remaining_turns: %v (%q)",
			ErrBadReply, err, clip(string(b), 80))
	}
	for _, f := range []struct {
		name string
		v    *float64
	}{{"remaining_tokens", in.RemainingTokens}, {"remaining_turns", in.RemainingTurns}} {
		switch {
		case f.v == nil:
			return schema.PredictReply{}, fmt.Errorf("%w: %s missing", ErrBadReply, f.name)
		case *f.v < 0:
			return schema.PredictReply{}, fmt.Errorf("%w: %s must be >= 0, got %v", ErrBadReply, f.name, *f.v)
		}
	}
	return schema.PredictReply{V: schema.Version, RemainingTokens: *in.RemainingTokens,
		RemainingTurns: *in.RemainingTurns, Source: SourceHTTP}, nil
}

// clip shortens s for an error message.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
