// Package devstack runs all of actloop in one process: an embedded NATS
// server with JetStream, a local Redis (redis-server from PATH or the
// in-process one), one inference simulator per replica speaking SGLang's
// HTTP API, and the four services, each on its own NATS connection and Redis
// client as if it ran alone. `actloop dev` and the pipeline tests use it.
package devstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/actloop/actloop/internal/coordinator"
	"github.com/actloop/actloop/internal/envworker"
	"github.com/actloop/actloop/internal/genworker"
	"github.com/actloop/actloop/internal/localnats"
	"github.com/actloop/actloop/internal/localredis"
	"github.com/actloop/actloop/internal/predictor"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/sim"
	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/pkg/llm"
)

// Options configure a Stack.
type Options struct {
	Dir       string // state: JetStream store, Redis files, sandboxes
	RedisKind string // "", localredis.KindReal or localredis.KindInProcess
	Replicas  int    // inference replicas (one simulator and gen-worker each)
	Slots     int    // generation slots per replica
	EnvSlots  int    // concurrent env steps of the env-worker
	Sim       sim.Config
	// Tokenizer and ChatTemplate name the tokenizer and template of the
	// workers and the simulators (as ACTLOOP_TOKENIZER and
	// ACTLOOP_CHAT_TEMPLATE); default qwen and chatml. Sim.Tokenizer, when
	// set, wins for the simulators.
	Tokenizer, ChatTemplate string
	Common                  service.Common
	// CoordinatorAddr is where the coordinator serves /v1/status ("" = none).
	CoordinatorAddr string
	// AgentConfig is the workers' mini-swe-agent configuration file ("" =
	// the built-in default), as ACTLOOP_AGENT_CONFIG.
	AgentConfig string
	// NATSSync is how the embedded NATS server's JetStream store syncs to
	// disk (the zero value: the server's default, every two minutes).
	NATSSync localnats.Sync
	// NATSURL, when set, is a NATS server (or a comma-separated list of a
	// cluster's) to use instead of the embedded one, which is then not
	// started.
	NATSURL string
	// RedisCluster, when set, is a Redis Cluster (its URL as
	// ACTLOOP_REDIS_URL names one) to use instead of starting a Redis.
	RedisCluster string
	Log          *slog.Logger
}

// Stack is a running actloop in one process.
type Stack struct {
	Opts     Options
	NATS     *server.Server
	Redis    *localredis.Server
	Sims     map[string]*sim.Server // by replica
	SimURLs  map[string]string
	Replicas []string
	// Template is the chat template the workers use.
	Template  tokenize.ChatTemplate
	simServer []*http.Server

	mu      sync.Mutex
	wg      sync.WaitGroup
	errs    []error
	clients []redis.UniversalClient
	gens    map[string]*genworker.Worker
	closing []func()
}

// StartInfra starts NATS, Redis and the simulators; no services yet.
func StartInfra(ctx context.Context, o Options) (s *Stack, err error) {
	if o.Replicas < 1 || o.Slots < 1 || o.EnvSlots < 1 {
		return nil, errors.New("devstack: replicas, slots and env slots must be >= 1")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Tokenizer == "" {
		o.Tokenizer = tokenize.TokenizerQwen
	}
	if o.ChatTemplate == "" {
		o.ChatTemplate = tokenize.TemplateChatML
	}
	tmpl, err := tokenize.Chat{Tokenizer: o.Tokenizer, ChatTemplate: o.ChatTemplate}.Template()
	if err != nil {
		return nil, fmt.Errorf("devstack: %w", err)
	}
	if o.Sim.Tokenizer == nil {
		o.Sim.Tokenizer = tmpl.Tokenizer()
	}
	if err := sim.CheckTokenizer(o.Sim.Tokenizer); err != nil {
		return nil, fmt.Errorf("devstack: the simulator speaks ChatML: %w", err)
	}
	s = &Stack{Template: tmpl, Opts: o, Sims: map[string]*sim.Server{}, SimURLs: map[string]string{}}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	s.Opts.Common.NATSURL = o.NATSURL
	if o.NATSURL == "" {
		if s.NATS, err = localnats.Start(filepath.Join(o.Dir, "jetstream"), -1, o.NATSSync); err != nil {
			return nil, err
		}
		s.Opts.Common.NATSURL = s.NATS.ClientURL()
	}
	if o.RedisCluster != "" {
		s.Opts.Common.RedisURL, s.Opts.Common.RedisCluster = o.RedisCluster, true
	} else {
		if s.Redis, err = localredis.Start(ctx, o.RedisKind, o.Dir); err != nil {
			return nil, err
		}
		s.Opts.Common.RedisURL, s.Opts.Common.RedisCluster = "redis://"+s.Redis.Addr+"/0", false
	}
	for i := range o.Replicas {
		name := fmt.Sprintf("r%d", i)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("simulator listen: %w", err)
		}
		sv := sim.New(o.Sim)
		hs := &http.Server{Handler: sv, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = hs.Serve(l) }()
		s.simServer = append(s.simServer, hs)
		s.Replicas = append(s.Replicas, name)
		s.Sims[name], s.SimURLs[name] = sv, "http://"+l.Addr().String()
	}
	return s, nil
}

// Deps connects a new NATS connection and Redis client for one service.
func (s *Stack) Deps(ctx context.Context, name string) (*service.Deps, error) {
	nc, err := nats.Connect(s.Opts.Common.NATSURL, nats.Name("actloop-"+name), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("connect nats: %w", err)
	}
	d, err := service.NewDeps(ctx, s.Opts.Common, nc, s.newRedis(), s.Opts.Log.With("service", name))
	if err != nil {
		nc.Close()
		return nil, err
	}
	return d, nil
}

// RedisClient returns a new client of the stack's Redis, closed with the
// stack.
func (s *Stack) RedisClient() redis.UniversalClient {
	c := s.newRedis()
	s.mu.Lock()
	s.clients = append(s.clients, c)
	s.mu.Unlock()
	return c
}

// newRedis returns a new client of the stack's Redis, the caller's to close.
func (s *Stack) newRedis() redis.UniversalClient {
	c, err := s.Opts.Common.NewRedis()
	if err != nil {
		panic(fmt.Sprintf("devstack: the stack's own Redis settings: %v", err)) // set by StartInfra: cannot fail
	}
	return c
}

// Go runs one service under ctx with its own connections; Wait collects its
// error. It returns once the service is built (consumers declared).
func (s *Stack) Go(ctx context.Context, name string, build func(ctx context.Context, d *service.Deps) (func(context.Context) error, error)) (*service.Deps, error) {
	d, err := s.Deps(ctx, name)
	if err != nil {
		return nil, err
	}
	run, err := build(ctx, d)
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	s.wg.Go(func() {
		defer d.Close()
		// A service whose connection a test closed ends with that error.
		if err := run(ctx); err != nil && ctx.Err() == nil && !d.NC.IsClosed() {
			s.mu.Lock()
			s.errs = append(s.errs, fmt.Errorf("%s: %w", name, err))
			s.mu.Unlock()
		}
	})
	return d, nil
}

// CoordinatorConfig is the coordinator's configuration in this stack.
func (s *Stack) CoordinatorConfig() coordinator.Config {
	var c coordinator.Config
	service.Defaults(&c)
	c.Common, c.Replicas, c.Slots, c.Addr = s.Opts.Common, s.Replicas, s.Opts.Slots, s.Opts.CoordinatorAddr
	return c
}

// StartCoordinator runs the coordinator.
func (s *Stack) StartCoordinator(ctx context.Context, cfg coordinator.Config) (*coordinator.Coordinator, error) {
	var c *coordinator.Coordinator
	_, err := s.Go(ctx, "coordinator", func(ctx context.Context, d *service.Deps) (func(context.Context) error, error) {
		var err error
		c, err = coordinator.New(ctx, cfg, d)
		if err != nil {
			return nil, err
		}
		return c.Run, nil
	})
	return c, err
}

// StartElectedCoordinator runs a coordinator that leads only while it holds
// the leader lease, as `actloop serve coordinator` does; several may run.
// It returns the coordinator and its connections.
func (s *Stack) StartElectedCoordinator(ctx context.Context, cfg coordinator.Config) (*coordinator.Elected, *service.Deps, error) {
	var e *coordinator.Elected
	d, err := s.Go(ctx, "coordinator-"+cfg.CoordinatorID, func(ctx context.Context, d *service.Deps) (func(context.Context) error, error) {
		e = coordinator.NewElected(cfg, d)
		return e.Run, nil
	})
	return e, d, err
}

// StartGenWorker runs the gen-worker of replica; gen nil means the SGLang
// client on the replica's simulator. It returns the worker's connections.
func (s *Stack) StartGenWorker(ctx context.Context, replica string, gen llm.Generator) (*service.Deps, error) {
	return s.StartGenWorkerWith(ctx, s.GenWorkerConfig(replica), gen)
}

// GenWorkerConfig is the configuration of replica's gen-worker in this
// stack.
func (s *Stack) GenWorkerConfig(replica string) genworker.Config {
	var cfg genworker.Config
	service.Defaults(&cfg)
	cfg.Common, cfg.Replica, cfg.Slots, cfg.LLMURL, cfg.WorkerID = s.Opts.Common, replica, s.Opts.Slots, s.SimURLs[replica], "gen-"+replica
	cfg.Addr = "" // no health server per worker in one process
	cfg.AgentConfig = s.Opts.AgentConfig
	cfg.Tokenizer, cfg.ChatTemplate = s.Opts.Tokenizer, s.Opts.ChatTemplate
	return cfg
}

// StartGenWorkerWith starts a gen-worker with cfg; gen is as for
// StartGenWorker.
func (s *Stack) StartGenWorkerWith(ctx context.Context, cfg genworker.Config, gen llm.Generator) (*service.Deps, error) {
	return s.Go(ctx, "gen-worker-"+cfg.Replica, func(ctx context.Context, d *service.Deps) (func(context.Context) error, error) {
		w, err := genworker.New(ctx, cfg, d, gen)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		if s.gens == nil {
			s.gens = map[string]*genworker.Worker{}
		}
		s.gens[cfg.Replica] = w
		s.mu.Unlock()
		return w.Run, nil
	})
}

// GenWorker returns the gen-worker last started for replica.
func (s *Stack) GenWorker(replica string) *genworker.Worker {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gens[replica]
}

// EnvWorkerConfig is the configuration of env-worker id in this stack.
func (s *Stack) EnvWorkerConfig(id string) envworker.Config {
	var c envworker.Config
	service.Defaults(&c)
	c.Common, c.ID, c.Slots, c.SandboxRoot = s.Opts.Common, id, s.Opts.EnvSlots, filepath.Join(s.Opts.Dir, "sandboxes", id)
	c.SimEnvTimeScale = s.Opts.Sim.TimeScale
	c.Addr, c.AgentConfig = "", s.Opts.AgentConfig
	// A development stack must run on a machine with only Go: bubblewrap
	// where it works, else unisolated, which the env-worker logs loudly.
	c.AllowUnisolated = true
	c.WorkspaceRoots = []string{s.Opts.Dir} // the demo's workspaces are under it
	c.Tokenizer, c.ChatTemplate = s.Opts.Tokenizer, s.Opts.ChatTemplate
	return c
}

// StartEnvWorker runs an env-worker.
func (s *Stack) StartEnvWorker(ctx context.Context, cfg envworker.Config) (*service.Deps, error) {
	return s.Go(ctx, "env-worker-"+cfg.ID, func(ctx context.Context, d *service.Deps) (func(context.Context) error, error) {
		w, err := envworker.New(ctx, cfg, d)
		if err != nil {
			return nil, err
		}
		return w.Run, nil
	})
}

// StartPredictor runs predictor-gw.
func (s *Stack) StartPredictor(ctx context.Context) error {
	return s.StartPredictorWith(ctx, s.PredictorConfig())
}

// PredictorConfig is predictor-gw's configuration in this stack (history
// backend).
func (s *Stack) PredictorConfig() predictor.Config {
	var cfg predictor.Config
	service.Defaults(&cfg)
	cfg.Common, cfg.Addr = s.Opts.Common, ""
	cfg.Tokenizer, cfg.ChatTemplate = s.Opts.Tokenizer, s.Opts.ChatTemplate
	return cfg
}

// StartPredictorWith runs predictor-gw with cfg.
func (s *Stack) StartPredictorWith(ctx context.Context, cfg predictor.Config) error {
	_, err := s.Go(ctx, "predictor-gw", func(ctx context.Context, d *service.Deps) (func(context.Context) error, error) {
		return predictor.New(cfg, d).Run, nil
	})
	return err
}

// StartAll runs every service: coordinator, one gen-worker per replica, one
// env-worker, predictor-gw.
func (s *Stack) StartAll(ctx context.Context) (*coordinator.Coordinator, error) {
	c, err := s.StartCoordinator(ctx, s.CoordinatorConfig())
	if err != nil {
		return nil, err
	}
	for _, r := range s.Replicas {
		if _, err := s.StartGenWorker(ctx, r, nil); err != nil {
			return nil, err
		}
	}
	if _, err := s.StartEnvWorker(ctx, s.EnvWorkerConfig("env-0")); err != nil {
		return nil, err
	}
	return c, s.StartPredictor(ctx)
}

// Wait waits for every service to stop (their ctx ended) and returns their
// errors.
func (s *Stack) Wait() error {
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(s.errs...)
}

// Close stops the simulators, Redis and NATS. Stop the services first
// (cancel their ctx, then Wait).
func (s *Stack) Close() {
	for _, c := range s.clients {
		_ = c.Close()
	}
	for _, hs := range s.simServer {
		_ = hs.Close()
	}
	if s.Redis != nil {
		s.Redis.Close()
	}
	if s.NATS != nil {
		s.NATS.Shutdown()
		s.NATS.WaitForShutdown()
	}
}
