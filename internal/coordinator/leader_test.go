package coordinator

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/actloop/actloop/internal/service"
)

// A standby is alive but not ready, and names the leader.
func TestStandbyHTTP(t *testing.T) {
	e := NewElected(Config{CoordinatorID: "b"}, &service.Deps{})
	leader := "a"
	e.leader.Store(&leader)
	for _, tt := range []struct {
		path   string
		status int
		body   string
	}{
		{"/healthz", http.StatusOK, "ok"},
		{"/readyz", http.StatusServiceUnavailable, "coordinator b is standing by (leader: a)"},
		{"/v1/status", http.StatusServiceUnavailable, "leader: a"},
	} {
		rec := httptest.NewRecorder()
		e.handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tt.path, nil))
		if rec.Code != tt.status || !strings.Contains(rec.Body.String(), tt.body) {
			t.Errorf("GET %s: %d %q, want %d %q", tt.path, rec.Code, rec.Body.String(), tt.status, tt.body)
		}
	}
}
