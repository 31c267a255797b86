// Package service holds what every actloop service shares: the common
// settings, connecting to NATS and Redis, logging, the health server and the
// run-until-signalled lifecycle.
package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/actloop/actloop/internal/metrics"
	"github.com/actloop/actloop/pkg/client"
	"github.com/actloop/actloop/pkg/schema"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/telemetry"
	"github.com/actloop/actloop/internal/traj"
)

// Common holds the settings every service reads (ACTLOOP_ prefix). The
// CLI's trainer commands read them too, for their NATS connection and the
// streams they declare.
type Common struct {
	// NATSURL is the NATS server (nats:// or tls://); user info in it is one
	// way to authenticate.
	NATSURL string `envconfig:"NATS_URL" default:"nats://127.0.0.1:4222"`
	// RedisURL is the Redis server (redis://, or rediss:// for TLS). For a
	// Redis Cluster (RedisCluster) it names seed nodes, the first as the
	// host and the others as addr parameters, without a database:
	// redis://host1:6379?addr=host2:6379&addr=host3:6379.
	RedisURL string `envconfig:"REDIS_URL" default:"redis://127.0.0.1:6379/0"`
	// RedisCluster: RedisURL is a Redis Cluster. Every key of a trajectory
	// shares one hash slot ({traj_id}), as do the coordinator's indexes
	// ({coordinator}) and each group's keys ({group:<id>}).
	RedisCluster bool `envconfig:"REDIS_CLUSTER" default:"false"`
	// AckWait: a work message not acknowledged this long after its delivery
	// is delivered again; a long step resets the timer (InProgress) every
	// third of it. At least 1s.
	AckWait time.Duration `envconfig:"ACK_WAIT" default:"30s"`
	// MaxDeliver is how many deliveries of a step a worker takes before it
	// reports the step failed; the coordinator then ends the trajectory
	// with a fallback result.
	MaxDeliver int `envconfig:"MAX_DELIVER" default:"10"`
	// StreamReplicas is the replicas of every stream and KV bucket: 1 on
	// one server, 3 on a cluster (1 to 5).
	StreamReplicas int `envconfig:"STREAM_REPLICAS" default:"1"`
	// ResultsMaxAge is how long results stay in their stream.
	ResultsMaxAge time.Duration `envconfig:"RESULTS_MAX_AGE" default:"168h"`
	// DLQMaxAge is how long dead letters stay in theirs.
	DLQMaxAge time.Duration `envconfig:"DLQ_MAX_AGE" default:"168h"`
	// ResultTTL: a finished trajectory's Redis keys expire this long after
	// its result is stored in the results stream.
	ResultTTL time.Duration `envconfig:"RESULT_TTL" default:"1h"`
	// PullWait is how long an idle pull waits at the server. Workers with
	// several sources in priority order (the gen-worker's .hi and .lo, the
	// env-worker's own steps and sandbox starts) do not wait in a pull:
	// they hear publishes on their subjects and pull at once, and look
	// again at least this often for redeliveries (and, with stealing on,
	// for other replicas' work). At least 10ms.
	PullWait time.Duration `envconfig:"PULL_WAIT" default:"1s"`
	// StepLease: a running step holds a lease on its trajectory, renewed
	// every third of this, and the coordinator neither publishes the step
	// again nor ends the trajectory as stalled while the lease holds, so a
	// step is never ended for being long. A worker that dies lets its lease
	// lapse within this. Every service must use the same. At least 1s.
	StepLease time.Duration `envconfig:"STEP_LEASE" default:"30s"`
	// ShutdownTimeout: on SIGTERM, how long in-flight steps may finish
	// before the rest are handed back (nak).
	ShutdownTimeout time.Duration `envconfig:"SHUTDOWN_TIMEOUT" default:"30s"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `envconfig:"LOG_LEVEL" default:"info"`
	// Insecure lets a service start without authentication: NATS without
	// credentials, Redis without a password, the coordinator without
	// ACTLOOP_API_TOKEN. Without it a service refuses to start and names
	// the settings missing; with it, it logs at every start, as an error,
	// what runs unauthenticated. For tests on a closed machine only.
	Insecure bool `envconfig:"INSECURE" default:"false"`
	Security
}

// CommonDefaults returns Common with every default applied, for code that
// wires services without the environment (actloop dev, tests).
func CommonDefaults() Common {
	var c Common
	Defaults(&c)
	return c
}

// Defaults fills spec (a pointer to a settings struct) with its envconfig
// defaults, ignoring the environment.
func Defaults(spec any) {
	// No variable has this prefix, so only the defaults apply.
	if err := envconfig.Process("ACTLOOP_DEFAULTS_ONLY_", spec); err != nil {
		panic(err) // the defaults are constants in struct tags; a failure is a bug
	}
}

// Topology is the stream and consumer settings of c.
func (c *Common) Topology() bus.Topology {
	return bus.Topology{Replicas: c.StreamReplicas, AckWait: c.AckWait, MaxDeliver: c.MaxDeliver,
		ResultsAge: c.ResultsMaxAge, DLQAge: c.DLQMaxAge}
}

// Validate joins every problem with c.
func (c *Common) Validate() error {
	errs := []error{c.Topology().Validate()}
	if c.NATSURL == "" {
		errs = append(errs, errors.New("ACTLOOP_NATS_URL: missing"))
	}
	errs = append(errs, c.validateSecurity()) // the Redis URL too
	if c.ResultTTL <= 0 {
		errs = append(errs, errors.New("ACTLOOP_RESULT_TTL: must be > 0"))
	}
	if c.PullWait < 10*time.Millisecond {
		errs = append(errs, errors.New("ACTLOOP_PULL_WAIT: must be >= 10ms"))
	}
	if c.StepLease < time.Second {
		errs = append(errs, fmt.Errorf("ACTLOOP_STEP_LEASE: must be >= 1s, got %v", c.StepLease))
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("ACTLOOP_LOG_LEVEL: %w", err)
	}
	return l, nil
}

// NewLogger returns a JSON logger at level; records logged with a context
// carry its trace and the trajectory it is about (telemetry.LogHandler).
func NewLogger(w io.Writer, level string) *slog.Logger {
	l, _ := parseLevel(level)
	return slog.New(telemetry.LogHandler{Handler: slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})})
}

// Deps are the connections a service runs on.
type Deps struct {
	NC    *nats.Conn
	JS    jetstream.JetStream
	Redis redis.UniversalClient
	Store *traj.Store
	Pub   *bus.Publisher
	// Results publishes results (body in the object store, head on
	// actloop.results.<traj_id>).
	Results *traj.Results
	Topo    bus.Topology
	Common  Common
	Log     *slog.Logger
	Now     func() time.Time
	// Metrics is the service's Prometheus registry, served on /metrics.
	Metrics *prometheus.Registry
}

// Connect connects to NATS and Redis with c's credentials and TLS settings,
// declares the streams, and returns the service's dependencies.
func Connect(ctx context.Context, c Common, name string, log *slog.Logger) (*Deps, error) {
	nc, err := c.ConnectNATS(name, nats.MaxReconnects(-1))
	if err != nil {
		return nil, err
	}
	d, err := NewDeps(ctx, c, nc, nil, log)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return d, nil
}

// NewDeps builds Deps over an existing NATS connection and, when rdb is nil,
// a new Redis client from c.RedisURL and c's Redis credentials and TLS
// settings (RedisOptions).
func NewDeps(ctx context.Context, c Common, nc *nats.Conn, rdb redis.UniversalClient, log *slog.Logger) (_ *Deps, err error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	if err := checkMaxPayload(nc.MaxPayload()); err != nil {
		return nil, err
	}
	where := ""
	if rdb == nil {
		var client redis.UniversalClient
		if client, err = c.NewRedis(); err != nil { // err, not a new one: the deferred close reads it
			return nil, err
		}
		defer func() {
			if err != nil {
				_ = client.Close()
			}
		}()
		rdb, where = client, " "+RedactURL(c.RedisURL)
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err = rdb.Ping(pctx).Err(); err != nil {
		return nil, fmt.Errorf("connect redis%s: %w", where, err)
	}
	topo := c.Topology()
	var bodies jetstream.ObjectStore
	declare := func(ctx context.Context) error {
		if err := topo.EnsureStreams(ctx, js); err != nil {
			return err
		}
		if err := topo.EnsureKV(ctx, js); err != nil {
			return err
		}
		var err error
		bodies, err = topo.ResultBodies(ctx, js)
		return err
	}
	if err = declareRetrying(ctx, log, "declare the streams and buckets", declare); err != nil {
		return nil, err
	}
	pub := bus.NewPublisher(js)
	d := &Deps{NC: nc, JS: js, Redis: rdb, Store: traj.New(rdb, nil), Pub: pub, Results: traj.NewResults(pub, bodies),
		Topo: topo, Common: c, Log: log, Now: time.Now, Metrics: metrics.NewRegistry()}
	metrics.CounterFunc(d.Metrics, "actloop_dlq_total", nil, func() float64 { return float64(d.Pub.DeadLettered()) })
	return d, nil
}

// declareRetrying runs declare, waiting for a JetStream that does not
// answer yet (a cluster electing leaders, a node catching up after a
// restart) as long as ctx allows; any other refusal (a bad setting) ends
// it.
func declareRetrying(ctx context.Context, log *slog.Logger, what string, declare func(context.Context) error) error {
	for wait := time.Second; ; wait = min(2*wait, 10*time.Second) {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := declare(actx)
		cancel()
		if err == nil || ctx.Err() != nil || !client.Unanswered(err) {
			return err
		}
		log.Warn(what+": JetStream does not answer; will try again", "error", err, "retry_in", wait)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// ConnectNATSOnly connects a client of NATS alone (the gateway: no Redis)
// with c's credentials and TLS settings, creates the streams a trainer uses
// that do not exist yet (never changing one), and returns its dependencies (no Redis, Store or Results).
func ConnectNATSOnly(ctx context.Context, c Common, name string, log *slog.Logger) (*Deps, error) {
	nc, err := c.ConnectNATS(name, nats.MaxReconnects(-1))
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	topo := c.Topology()
	if err := declareRetrying(ctx, log, "create the streams", func(ctx context.Context) error { return topo.CreateStreams(ctx, js) }); err != nil {
		nc.Close()
		return nil, err
	}
	return &Deps{NC: nc, JS: js, Topo: topo, Common: c, Log: log, Now: time.Now, Metrics: metrics.NewRegistry()}, nil
}

// MinMaxPayload is the least max_payload of a NATS server actloop works
// with: a sample of schema.MaxSampleBytes, base64 in a dead letter, with
// room to spare. Nothing else needs more: results are published as small
// heads with their bodies in the object store (in chunks of 128 KiB), and
// nats-server's default (1 MiB) is enough.
const MinMaxPayload = schema.MaxSampleBytes*4/3 + 64<<10

// checkMaxPayload refuses a NATS server whose max_payload cannot carry a
// sample.
func checkMaxPayload(max int64) error {
	if max < MinMaxPayload {
		return fmt.Errorf("the NATS server's max_payload is %d bytes, under the %d a sample needs: raise max_payload "+
			"in the server's configuration (its default, 1MB, is enough)", max, MinMaxPayload)
	}
	return nil
}

// Close drains NATS, so the last acks and naks reach the server, and closes
// Redis.
func (d *Deps) Close() {
	_ = d.NC.FlushTimeout(5 * time.Second)
	if err := d.NC.Drain(); err != nil {
		d.NC.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for !d.NC.IsClosed() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	d.NC.Close()
	if d.Redis != nil {
		_ = d.Redis.Close()
	}
}

// Ready reports whether NATS and Redis answer.
func (d *Deps) Ready(ctx context.Context) error {
	if !d.NC.IsConnected() {
		return errors.New("nats: not connected")
	}
	if d.Redis == nil { // a client without Redis (the gateway)
		return nil
	}
	if err := d.Redis.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	return nil
}

// Main is a service's whole life: settings from the environment, logging,
// tracing, connections, then start until SIGINT or SIGTERM. cfg must be a
// pointer to a struct embedding Common with a Validate method.
//
// Unless ACTLOOP_INSECURE=true, a service whose settings leave anything
// unauthenticated (Unauthenticated) does not start. A cfg whose NATSOnly
// method says so connects to NATS alone (ConnectNATSOnly).
func Main(name string, cfg interface {
	Validate() error
	Unauthenticated() []string
	common() *Common
}, start func(ctx context.Context, d *Deps) error) (err error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := envconfig.Process("ACTLOOP", cfg); err != nil {
		return fmt.Errorf("settings: %w", err)
	}
	c := cfg.common()
	missing := cfg.Unauthenticated()
	if err := errors.Join(cfg.Validate(), RequireAuth(c.Insecure, missing)); err != nil {
		return fmt.Errorf("settings: %w", err)
	}
	log := NewLogger(os.Stderr, c.LogLevel).With("service", name)
	if len(missing) > 0 {
		log.Error(InsecureWarning, "unauthenticated", missing)
	}
	shutdownTel, err := telemetry.Setup(ctx, name, os.Stdout) // the standard OTEL_* variables
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = errors.Join(err, shutdownTel(sctx))
	}()
	connect := Connect
	if n, ok := cfg.(interface{ NATSOnly() bool }); ok && n.NATSOnly() {
		connect = ConnectNATSOnly
	}
	d, err := connect(ctx, *c, name, log)
	if err != nil {
		return err
	}
	defer d.Close()
	log.Info("started")
	err = start(ctx, d)
	log.Info("stopped", "error", err)
	return err
}

// Serve runs an HTTP server on addr until ctx ends, then shuts it down.
// An empty addr serves nothing.
func Serve(ctx context.Context, addr string, h http.Handler, log *slog.Logger) error {
	if addr == "" {
		<-ctx.Done()
		return nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	return ServeListener(ctx, l, h, log)
}

// ServeListener is Serve on an open listener.
func ServeListener(ctx context.Context, l net.Listener, h http.Handler, log *slog.Logger) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	log.Info("http listening", "addr", l.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		return fmt.Errorf("http %s: %w", l.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	<-errc
	return nil
}

// HealthMux returns a mux with /healthz (alive), /readyz (dependencies
// answer) and /metrics (the service's Prometheus metrics).
func HealthMux(d *Deps) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics.Handler(d.Metrics))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := d.Ready(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	return mux
}

// SplitList splits a comma-separated setting, dropping blanks.
func SplitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func (c *Common) common() *Common { return c }
