package predict_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/actloop/actloop/internal/predict"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/internal/traj"
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

// capture is a model server that keeps the last body it got, decoded as a
// Go model server reads it, and answers a fixed prediction.
func capture(t *testing.T) (url string, last func() predict.HTTPRequest) {
	t.Helper()
	var mu sync.Mutex
	var got predict.HTTPRequest
	var gotErr error
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got, gotErr = predict.DecodeHTTPRequest(b)
		mu.Unlock()
		_, _ = io.WriteString(w, `{"remaining_tokens": 10, "remaining_turns": 1}`)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() predict.HTTPRequest {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if gotErr != nil {
			t.Fatalf("the model server could not decode the body: %v", gotErr)
		}
		return got
	}
}

// Without sources the body is the request, with its protocol and last
// exit code, and nothing read beside it.
func TestHTTPBodyWithoutSources(t *testing.T) {
	url, last := capture(t)
	p := predict.NewHTTP(url, time.Minute)
	t.Cleanup(func() { _ = p.Close() })
	req := request("t-1", "g", "", 2, 100)
	req.ObsTokens, req.ExitCode = 40, 0
	if _, err := p.Predict(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	got := last()
	if got.PredictRequest != req || got.Protocol != predict.HTTPProtocol || got.LastExitCode == nil || *got.LastExitCode != 0 ||
		got.Conversation != nil || got.Siblings != nil {
		t.Fatalf("server got %+v", got)
	}
}

// With the store and Redis the body carries the conversation as of the
// request (its tail within the budget, and what was left out) and the
// siblings' progress: finished ones from the results observed, running ones
// from their own requests; a result takes a sibling off the running list.
func TestHTTPBodyWithSources(t *testing.T) {
	forEachRedis(t, func(t *testing.T, rdb *redis.Client) {
		url, last := capture(t)
		tmpl := tokenize.NewByteChatML()
		p, err := predict.NewHTTPWith(url, time.Minute, predict.HTTPSources{Store: traj.New(rdb, nil), Template: tmpl,
			MessagesBytes: 10, Redis: rdb})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		ctx := context.Background()
		msgs := []schema.Message{msg("system", "sys"), msg("user", "the task"), msg("assistant", "look"),
			msg("user", "output 1"), msg("assistant", "edit"), msg("user", "output 2, not yet asked about")}
		if err := traj.New(rdb, nil).Put(ctx, &traj.Trajectory{ID: "g-0", Status: traj.StatusNeedsEnvStep, Seq: 3,
			Sample: schema.Sample{V: schema.Version, ID: "g-0", GroupID: "g", Task: "the task"}, Messages: msgs}); err != nil {
			t.Fatal(err)
		}
		// Siblings: g-1 finished, g-2 failed (a fallback), g-3 running.
		observe(t, p, result("g-1", "g", "", 900, 6))
		for _, r := range []schema.PredictRequest{request("g-2", "g", "", 1, 50), request("g-3", "g", "", 2, 70)} {
			if _, err := p.Predict(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		fallback := result("g-2", "g", "", 50, 1)
		fallback.Status = schema.StatusFallback
		observe(t, p, fallback)

		req := request("g-0", "g", "", 2, 120)
		req.ContextTokens, req.ObsTokens, req.ExitCode = 200, 30, 1
		if _, err := p.Predict(ctx, req); err != nil {
			t.Fatal(err)
		}
		got := last()
		if got.PredictRequest != req || got.Protocol != predict.HTTPProtocol || got.LastExitCode == nil || *got.LastExitCode != 1 {
			t.Fatalf("request fields %+v", got)
		}
		// As asked (after the second reply), 10 bytes: "output 1" and "edit" are 12.
		wantConv := predict.Conversation{Messages: []schema.Message{msg("assistant", "edit")}, OmittedMessages: 4,
			OmittedTokens: 200 - len(tmpl.Message("assistant", "edit"))}
		if !reflect.DeepEqual(*got.Conversation, wantConv) {
			t.Fatalf("conversation %+v, want %+v", *got.Conversation, wantConv)
		}
		wantSib := predict.Siblings{Finished: []predict.SiblingTotal{{GenTokens: 900, Turns: 6}},
			Running: []predict.SiblingProgress{{TrajID: "g-3", GenTokens: 70, Turns: 2}}}
		if !reflect.DeepEqual(*got.Siblings, wantSib) {
			t.Fatalf("siblings %+v, want %+v", *got.Siblings, wantSib)
		}

		// A waiting sample (not stored, no turns yet): no conversation,
		// and it is not counted as running.
		if _, err := p.Predict(ctx, schema.PredictRequest{V: schema.Version, TrajID: "g-4", GroupID: "g", Task: "the task"}); err != nil {
			t.Fatal(err)
		}
		if got := last(); got.Conversation != nil || got.LastExitCode != nil || len(got.Siblings.Running) != 2 {
			t.Fatalf("waiting sample: %+v", got)
		}
		// Not in a group: no siblings.
		if _, err := p.Predict(ctx, request("h-0", "", "", 1, 5)); err != nil {
			t.Fatal(err)
		}
		if got := last(); got.Siblings != nil {
			t.Fatalf("no group: siblings %+v", got.Siblings)
		}
	})
}

func TestNewHTTPWithRefuses(t *testing.T) {
	rdb, _ := testkit.StartRedis(t, testkit.PreferredRedis(t))
	for _, src := range []predict.HTTPSources{
		{Store: traj.New(rdb, nil)}, // no template
		{MessagesBytes: predict.MaxMessagesBytes + 1},
		{MessagesBytes: -1},
	} {
		if _, err := predict.NewHTTPWith("http://x", time.Second, src); err == nil {
			t.Errorf("NewHTTPWith(%+v) accepted", src)
		}
	}
}

// A Redis user that may not read the trajectories (predictor-gw's ACL
// before it reads conversations): the error says which access is missing
// and how to do without.
func TestHTTPConversationWithoutAccess(t *testing.T) {
	if !slices.Contains(testkit.RedisKinds(t), "redis-server") {
		t.Skip("redis-server not on PATH: ACL users need a real Redis")
	}
	admin, _ := testkit.StartRedis(t, "redis-server")
	ctx := context.Background()
	if err := admin.Do(ctx, "ACL", "SETUSER", "pred", "on", ">pw", "resetkeys", "~actloop:{predict}:*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: admin.Options().Addr, Username: "pred", Password: "pw"})
	t.Cleanup(func() { _ = rdb.Close() })
	p, err := predict.NewHTTPWith("http://127.0.0.1:1", time.Minute, predict.HTTPSources{Store: traj.New(rdb, nil),
		Template: tokenize.NewByteChatML(), Redis: rdb})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	_, err = p.Predict(ctx, request("t-1", "", "", 1, 10))
	if err == nil || !strings.Contains(err.Error(), "actloop:traj:*") || !strings.Contains(err.Error(), "ACTLOOP_PREDICTOR_MESSAGES_BYTES=0") {
		t.Fatalf("Predict without read access to the trajectories: %v", err)
	}
}

// predictor-gw's Redis user as actloop creates it (service.RedisRules) may
// read the trajectories, which its http backend sends, but not write them.
func TestHTTPConversationUnderPredictorACL(t *testing.T) {
	if !slices.Contains(testkit.RedisKinds(t), "redis-server") {
		t.Skip("redis-server not on PATH: ACL users need a real Redis")
	}
	admin, _ := testkit.StartRedis(t, "redis-server")
	ctx := context.Background()
	args := []any{"ACL", "SETUSER", service.NATSPredictor, "on", ">pw"}
	for _, r := range service.RedisRules(service.NATSPredictor) {
		args = append(args, r)
	}
	if err := admin.Do(ctx, args...).Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: admin.Options().Addr, Username: service.NATSPredictor, Password: "pw"})
	t.Cleanup(func() { _ = rdb.Close() })
	if err := rdb.Set(ctx, "actloop:traj:t-1", "x", 0).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("predictor-gw wrote a trajectory key: %v", err)
	}
	p, err := predict.NewHTTPWith("http://127.0.0.1:1", time.Minute, predict.HTTPSources{Store: traj.New(rdb, nil),
		Template: tokenize.NewByteChatML(), Redis: rdb})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	// The model server is not there: the call fails, but not for want of
	// access to the trajectory.
	if _, err = p.Predict(ctx, request("t-1", "", "", 1, 10)); err != nil && (strings.Contains(err.Error(), "NOPERM") || strings.Contains(err.Error(), "actloop:traj:*")) {
		t.Fatalf("Predict under predictor-gw's ACL: %v", err)
	}
}
