package predictor

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/pkg/schema"
)

func TestMain(m *testing.M) { testkit.VerifyNoLeaks(m) }

// wait bounds every poll: generous, for loaded machines.
const wait = time.Minute

// env is one NATS and one Redis that gateways and the test share.
type env struct {
	ns  *server.Server
	rdb *redis.Client
	c   service.Common
	nc  *nats.Conn // the test's own connection
	pub *bus.Publisher
}

func newEnv(t *testing.T, redisKind string) *env {
	t.Helper()
	e := &env{ns: testkit.StartNATS(t)}
	e.rdb, _ = testkit.StartRedis(t, redisKind)
	e.c = service.CommonDefaults()
	e.c.NATSURL = e.ns.ClientURL()
	e.c.AckWait = 5 * time.Second
	e.c.PullWait = 100 * time.Millisecond
	e.c.ShutdownTimeout = 10 * time.Second
	d := e.deps(t)
	e.nc, e.pub = d.NC, d.Pub
	return e
}

// deps connects a new NATS connection (and Redis client) for one instance.
func (e *env) deps(t *testing.T) *service.Deps {
	t.Helper()
	nc, err := nats.Connect(e.c.NATSURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: e.rdb.Options().Addr})
	d, err := service.NewDeps(context.Background(), e.c, nc, rdb, slog.New(slog.DiscardHandler))
	if err != nil {
		nc.Close()
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// start runs a gateway until the end of the test, which fails if Run
// returns an error.
func (e *env) start(t *testing.T, cfg Config, opts ...func(*Gateway)) *service.Deps {
	t.Helper()
	d := e.deps(t)
	cfg.Common = e.c
	g := New(cfg, d)
	for _, o := range opts {
		o(g)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- g.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return d
}

// ask sends req (a value to marshal, or raw bytes) and returns the reply,
// waiting for a gateway to subscribe first.
func (e *env) ask(t *testing.T, req any) schema.PredictReply {
	t.Helper()
	data, ok := req.([]byte)
	if !ok {
		var err error
		if data, err = json.Marshal(req); err != nil {
			t.Fatal(err)
		}
	}
	var m *nats.Msg
	testkit.Eventually(t, wait, "a predictor-gw to subscribe", func() bool {
		var err error
		m, err = e.nc.Request(bus.SubjectPredict, data, wait)
		if err != nil && !errors.Is(err, nats.ErrNoResponders) {
			t.Fatalf("request: %v", err)
		}
		return err == nil
	})
	var rep schema.PredictReply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		t.Fatalf("reply %s: %v", m.Data, err)
	}
	if rep.V != schema.Version {
		t.Fatalf("reply %s: v %d, want %d", m.Data, rep.V, schema.Version)
	}
	return rep
}

func request(id, group string, turns, tokens int) schema.PredictRequest {
	return schema.PredictRequest{V: schema.Version, TrajID: id, GroupID: group, Turns: turns, GenTokens: tokens,
		TurnSeq: int64(2 * turns)}
}

func result(id, group, status string, tokens, turns int) schema.Result {
	return schema.Result{ResultHead: schema.ResultHead{V: schema.Version, TrajID: id, GroupID: group, Status: status,
		GenTokens: tokens, Turns: turns}, Tokens: []int32{}, Logprobs: []float32{}, LossMask: []int8{}, Versions: []int32{}}
}
