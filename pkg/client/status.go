package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Coordinator is the coordinator's HTTP API.
type Coordinator struct {
	// URL is its base, such as http://127.0.0.1:8080.
	URL string
	// Token, if set, is sent as the bearer token (the coordinator's
	// ACTLOOP_API_TOKEN, needed when its status is not open).
	Token string
	// HTTP sends the requests; nil means http.DefaultClient.
	HTTP *http.Client
}

// HTTPError is an answer other than 200 OK.
type HTTPError struct {
	StatusCode int
	Status     string // such as "401 Unauthorized"
	Body       string // its first line
}

func (e *HTTPError) Error() string {
	if e.Body == "" {
		return e.Status
	}
	return e.Status + ": " + e.Body
}

// Status returns GET /v1/status as sent: one JSON object (admission,
// replicas, queues, the control state). Without a deadline on ctx it waits
// 10 s at most.
func (c *Coordinator) Status(ctx context.Context) (json.RawMessage, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL+"/v1/status", nil)
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("status from %s: %w", c.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("status from %s: %w", c.URL, err)
	}
	if resp.StatusCode != http.StatusOK {
		line, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
		return nil, fmt.Errorf("status: %w", &HTTPError{StatusCode: resp.StatusCode, Status: resp.Status, Body: line})
	}
	if !json.Valid(body) {
		return nil, fmt.Errorf("status from %s: not JSON", c.URL)
	}
	return json.RawMessage(body), nil
}
