package devstack_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/actloop/actloop/internal/coordinator"
	"github.com/actloop/actloop/internal/demo"
	"github.com/actloop/actloop/internal/devstack"
	"github.com/actloop/actloop/internal/localredis"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/pkg/schema"
)

// A stack's servers want the credentials it generated: its NATS refuses a
// client without a user or with a wrong password, its Redis one without
// the password, the coordinator's write calls one without the API token.
// With LeastPrivilege each service logs in as its own user, a batch runs
// without a permission violation, and the coordinator's status, page and
// metrics are whole.
func TestServersRefuseUnauthenticatedClients(t *testing.T) {
	e := newEnvWith(t, 1, func(o *devstack.Options) { o.LeastPrivilege = true })
	c, err := e.stack.StartAll(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	url := e.stack.NATS.ClientURL()
	if nc, err := nats.Connect(url); err == nil || !strings.Contains(err.Error(), "Authorization Violation") {
		if nc != nil {
			nc.Close()
		}
		t.Errorf("NATS without credentials: %v", err)
	}
	if nc, err := nats.Connect(url, nats.UserInfo(devstack.TrainerUser, "wrong")); err == nil {
		nc.Close()
		t.Error("NATS with a wrong password: connected")
	}
	rc := redis.NewClient(&redis.Options{Addr: e.stack.Redis.Addr})
	if err := rc.Ping(e.ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("Redis without the password: %v", err)
	}
	_ = rc.Close()

	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	post := func(token string) int {
		req, _ := http.NewRequestWithContext(e.ctx, http.MethodPost, srv.URL+"/v1/resume", strings.NewReader(`{}`))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(""); code != http.StatusUnauthorized {
		t.Errorf("POST /v1/resume without the token: %d", code)
	}
	if code := post("wrong"); code != http.StatusUnauthorized {
		t.Errorf("POST /v1/resume with a wrong token: %d", code)
	}
	if code := post(e.stack.Creds.APIToken); code != http.StatusOK {
		t.Errorf("POST /v1/resume with the token: %d", code)
	}

	e.submit(demo.Samples(2, e.ws, "auth")...)
	for id, r := range e.results(2) {
		if r.Status != schema.StatusSubmitted {
			t.Errorf("%s: %s %s", id, r.Status, r.Reason)
		}
	}
	// The read-only views read NATS and Redis as the coordinator's users:
	// whole.
	get := func(path string) string {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s %v: %.500s", path, resp.Status, err, b)
		}
		return string(b)
	}
	// The coordinator counts a result when it reads it back, which may be
	// after the trainer has it.
	var st coordinator.Status
	testkit.Eventually(t, wait, "both results counted in /v1/status", func() bool {
		st = coordinator.Status{}
		err := json.Unmarshal([]byte(get("/v1/status")), &st)
		return err == nil && st.Finished[schema.StatusSubmitted] == 2
	})
	if len(st.Errors) > 0 {
		t.Errorf("GET /v1/status: %+v", st)
	}
	if page := get("/"); strings.Contains(page, `id="errors"`) {
		t.Errorf("GET /: the page names sources it could not read:\n%s", page)
	}
	fams := scrape(t, srv.URL+"/metrics")
	for _, name := range []string{"actloop_samples_waiting", "actloop_queue_depth", "actloop_trajectories_active"} {
		if fams[name] == nil {
			t.Errorf("GET /metrics lacks %s", name)
		}
	}
	if v := e.stack.Violations(); len(v) > 0 {
		t.Errorf("permission violations:\n%s", strings.Join(v, "\n"))
	}
}

// Both kinds of local Redis want the password they were started with.
func TestLocalRedisWantsPassword(t *testing.T) {
	for _, kind := range testkit.RedisKinds(t) {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			srv, err := localredis.StartWithPassword(ctx, kind, t.TempDir(), "s3cret")
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			for pw, ok := range map[string]bool{"": false, "wrong": false, "s3cret": true} {
				c := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: pw})
				err := c.Ping(ctx).Err()
				_ = c.Close()
				if (err == nil) != ok {
					t.Errorf("password %q: %v", pw, err)
				}
			}
		})
	}
}
