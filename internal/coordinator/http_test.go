package coordinator

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/actloop/actloop/internal/service"
)

// With ACTLOOP_API_TOKEN the mutating calls need the token, and with
// ACTLOOP_STATUS_OPEN=false the read-only ones too; probes and metrics stay
// open.
func TestAPIToken(t *testing.T) {
	for _, open := range []bool{true, false} {
		c := &Coordinator{cfg: Config{APIToken: "s3cret", StatusOpen: open}, d: &service.Deps{}}
		h := c.Handler()
		for _, tt := range []struct {
			method, path, auth string
			want               int
		}{
			{http.MethodPost, "/v1/pause", "", http.StatusUnauthorized},
			{http.MethodPost, "/v1/resume", "Bearer wrong", http.StatusUnauthorized},
			{http.MethodPost, "/v1/pause", "s3cret", http.StatusUnauthorized}, // not a bearer token
			{http.MethodGet, "/v1/trajectories/t1", "", http.StatusUnauthorized},
			{http.MethodGet, "/healthz", "", http.StatusOK},
			{http.MethodGet, "/metrics", "", http.StatusOK},
		} {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(tt.method, tt.path, nil)
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			h.ServeHTTP(rec, req)
			if rec.Code != tt.want {
				t.Errorf("open %v: %s %s (%q): %d %s, want %d", open, tt.method, tt.path, tt.auth, rec.Code, rec.Body, tt.want)
			}
		}
		if !open {
			for _, path := range []string{"/", "/v1/status", "/v1/control"} {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
				if rec.Code != http.StatusUnauthorized || rec.Header().Get("WWW-Authenticate") == "" {
					t.Errorf("closed status: GET %s without the token: %d", path, rec.Code)
				}
			}
		}
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/v1/pause", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	service.Bearer("s3cret", ok).ServeHTTP(rec, req)
	if rec.Code != http.StatusNoContent {
		t.Errorf("the right token: %d", rec.Code)
	}
	rec = httptest.NewRecorder()
	service.Bearer("", ok).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/pause", nil))
	if rec.Code != http.StatusNoContent {
		t.Errorf("no token set: %d, want every call let through", rec.Code)
	}
	if err := (&Config{Replicas: []string{"r0"}, StatusOpen: false}).Validate(); err == nil || !strings.Contains(err.Error(), "ACTLOOP_STATUS_OPEN") {
		t.Error("ACTLOOP_STATUS_OPEN=false without a token validated")
	}
}
