package predict_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/predict"
	"github.com/actloop/actloop/pkg/schema"
)

func TestHTTPAnswers(t *testing.T) {
	tests := []struct {
		name     string
		status   int
		body     string
		want     schema.PredictReply
		wantErr  error
		wantText string
	}{
		{name: "ok", status: 200, body: `{"remaining_tokens": 1234.5, "remaining_turns": 3, "extra": true}`,
			want: reply(1234.5, 3, predict.SourceHTTP)},
		{name: "zero", status: 201, body: `{"remaining_tokens": 0, "remaining_turns": 0}`,
			want: reply(0, 0, predict.SourceHTTP)},
		{name: "server error", status: 500, body: "model crashed", wantText: "500 Internal Server Error: model crashed"},
		{name: "not found", status: 404, body: "", wantText: "404"},
		{name: "not JSON", status: 200, body: `<html>`, wantErr: predict.ErrBadReply, wantText: "not a JSON object"},
		{name: "empty", status: 200, body: ``, wantErr: predict.ErrBadReply},
		{name: "missing turns", status: 200, body: `{"remaining_tokens": 5}`, wantErr: predict.ErrBadReply, wantText: "remaining_turns missing"},
		{name: "missing tokens", status: 200, body: `{"remaining_turns": 5}`, wantErr: predict.ErrBadReply, wantText: "remaining_tokens missing"},
		{name: "negative", status: 200, body: `{"remaining_tokens": -1, "remaining_turns": 5}`, wantErr: predict.ErrBadReply, wantText: "remaining_tokens must be >= 0"},
		{name: "string", status: 200, body: `{"remaining_tokens": "5", "remaining_turns": 5}`, wantErr: predict.ErrBadReply, wantText: "remaining_tokens"},
		{name: "array", status: 200, body: `[1, 2]`, wantErr: predict.ErrBadReply},
		{name: "too large", status: 200, body: `{"remaining_tokens": 1, "remaining_turns": 1, "pad": "` + strings.Repeat("x", 1<<20) + `"}`,
			wantErr: predict.ErrBadReply, wantText: "larger than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got struct {
				method, ctype string
				req           schema.PredictRequest
			}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got.method, got.ctype = r.Method, r.Header.Get("Content-Type")
				b, _ := io.ReadAll(r.Body)
				got.req, _ = schema.Decode[schema.PredictRequest](b)
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			}))
			t.Cleanup(srv.Close)
			p := predict.NewHTTP(srv.URL+"/predict", time.Minute)
			t.Cleanup(func() { _ = p.Close() })
			req := request("traj-1", "g", "fam", 4, 321)
			rep, err := p.Predict(context.Background(), req)
			if got.method != http.MethodPost || got.ctype != "application/json" || got.req != req {
				t.Fatalf("server saw %s %q %+v, want POST application/json %+v", got.method, got.ctype, got.req, req)
			}
			if tt.wantErr == nil && tt.wantText == "" {
				if err != nil || rep != tt.want {
					t.Fatalf("Predict = %+v, %v; want %+v", rep, err, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("Predict = %+v, want an error", rep)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("Predict: %v, want %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantText) || !strings.Contains(err.Error(), "traj-1") {
				t.Fatalf("error %q does not name %q and the trajectory", err, tt.wantText)
			}
		})
	}
}

func TestHTTPStatusError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "overloaded", http.StatusTooManyRequests)
	}))
	t.Cleanup(srv.Close)
	p := predict.NewHTTP(srv.URL, time.Minute)
	t.Cleanup(func() { _ = p.Close() })
	_, err := p.Predict(context.Background(), request("a", "", "", 0, 0))
	var se *predict.StatusError
	if !errors.As(err, &se) || se.Status != http.StatusTooManyRequests || !strings.HasPrefix(se.Body, "overloaded") {
		t.Fatalf("Predict: %v, want a StatusError 429", err)
	}
}

// A server that does not answer in time: the timeout ends the call.
func TestHTTPTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	p := predict.NewHTTP(srv.URL, 20*time.Millisecond)
	t.Cleanup(func() { _ = p.Close() })
	if _, err := p.Predict(context.Background(), request("a", "", "", 0, 0)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Predict on a hung server: %v, want a deadline error", err)
	}
}

func TestHTTPUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	p := predict.NewHTTP(url, time.Minute)
	t.Cleanup(func() { _ = p.Close() })
	if _, err := p.Predict(context.Background(), request("a", "", "", 0, 0)); err == nil || !strings.Contains(err.Error(), url) {
		t.Fatalf("Predict on a closed server: %v, want an error naming %s", err, url)
	}
}
