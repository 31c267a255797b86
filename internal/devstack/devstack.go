// Package devstack runs all of actloop in one process: an embedded NATS
// server with JetStream, a local Redis (redis-server from PATH or the
// in-process one), one inference simulator per replica speaking SGLang's
// HTTP API, and the four services, each on its own NATS connection and Redis
// client as if it ran alone. `actloop dev` and the pipeline tests use it.
package devstack

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

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
	"github.com/actloop/actloop/pkg/sandbox"
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
	// ModelDir is the model directory of the workers (and simulators), as
	// ACTLOOP_MODEL_DIR: its tokenizer.json and chat template.
	ModelDir string
	// LLMURLs, when set, are the replicas' inference servers instead of
	// simulators (none is started), one per replica in order: as many as
	// Replicas. LLMAPI is the API they speak (ACTLOOP_LLM_API; default
	// sglang) and LLMModel the model of OpenAI-compatible requests
	// (ACTLOOP_LLM_MODEL).
	LLMURLs  []string
	LLMAPI   llm.API
	LLMModel string
	Common   service.Common
	// CoordinatorAddr is where the coordinator serves /v1/status ("" = none).
	CoordinatorAddr string
	// CoordinatorListener, when set, is the open listener the first
	// coordinator that serves HTTP (StartCoordinator with an Addr) serves
	// on instead of listening on its Addr: `actloop dev` binds it itself,
	// falling back to a free port, so that the address it reports is the
	// one bound. The stack closes it.
	CoordinatorListener net.Listener
	// AgentConfig is the workers' mini-swe-agent configuration file ("" =
	// the built-in default), as ACTLOOP_AGENT_CONFIG.
	AgentConfig string
	// ReadOnlyBinds are host paths mounted read-only in the env-workers'
	// sandboxes, as ACTLOOP_SANDBOX_RO_BINDS (a proxy-flow agent's files).
	ReadOnlyBinds []string
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
	// LeastPrivilege: each service logs in to the embedded NATS server as
	// a user of its own with exactly its permissions of docs/security.md
	// (service.NATSPermissionsOf), and to the stack's Redis as its ACL
	// user (service.RedisTable), as a deployment does; otherwise they all
	// log in as DevUser and Redis's default user. Users exist for the replicas and for
	// EnvWorkerIDs; a service of another name is refused.
	LeastPrivilege bool
	// EnvWorkerIDs are the env-workers that get a NATS user of their own
	// with LeastPrivilege; default env-0 (StartAll's).
	EnvWorkerIDs []string
	// Reward is the env-workers' reward settings; nil: their defaults.
	Reward *envworker.Reward
	Log    *slog.Logger
}

// chat is the workers' tokenize.Chat.
func (o Options) chat() tokenize.Chat {
	return tokenize.Chat{ModelDir: o.ModelDir, Tokenizer: o.Tokenizer, ChatTemplate: o.ChatTemplate}
}

// Credentials are what the stack's servers want from their clients,
// generated at its start: its embedded NATS server wants a user and
// password, its Redis a password, the coordinator's write calls the API
// token.
type Credentials struct {
	// NATS is each NATS user's password, by user.
	NATS map[string]string
	// RedisPassword is the default Redis user's (tests and tools).
	RedisPassword string
	// Redis is each service's Redis ACL user's password, by user
	// (service.RedisTable), with LeastPrivilege.
	Redis    map[string]string
	APIToken string
}

// NATS users of a stack besides the services' own (LeastPrivilege).
const (
	// DevUser may do anything: the connections of tests and tools (Deps),
	// and without LeastPrivilege the services'.
	DevUser = "devstack"
	// TrainerUser has the CLI's permissions (service.NATSTrainer).
	TrainerUser = "trainer"
)

// natsUser is the NATS user of the service client with id (a replica, an
// env-worker's id) in a stack with LeastPrivilege.
func natsUser(client, id string) string {
	switch client {
	case service.NATSGenWorker:
		return "gen-worker-" + id
	case service.NATSEnvWorker:
		return "env-worker-" + id
	case service.NATSTrainer:
		return TrainerUser
	}
	return client
}

// Stack is a running actloop in one process.
type Stack struct {
	Opts     Options
	NATS     *server.Server
	Redis    *localredis.Server
	Sims     map[string]*sim.Server // by replica
	SimURLs  map[string]string
	Replicas []string
	// Creds are the credentials the stack generated; empty when it uses
	// servers of its own (Options.NATSURL, Options.RedisCluster) for those.
	Creds Credentials
	// Template is the chat template the workers use.
	Template  tokenize.ChatTemplate
	simServer []*http.Server

	violations violationLog
	mu         sync.Mutex
	wg         sync.WaitGroup
	errs       []error
	failed     chan struct{} // closed at the first service error (Failed)
	clients    []redis.UniversalClient
	gens       map[string]*genworker.Worker
	closing    []func()
	coordURL   string // the bound address of the coordinator's HTTP API
}

// StartInfra starts NATS, Redis and the simulators; no services yet.
func StartInfra(ctx context.Context, o Options) (s *Stack, err error) {
	if o.Replicas < 1 || o.Slots < 1 || o.EnvSlots < 1 {
		return nil, errors.New("devstack: replicas, slots and env slots must be >= 1")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Tokenizer == "" && o.ModelDir == "" {
		o.Tokenizer = tokenize.TokenizerQwen
	}
	if o.ChatTemplate == "" && o.ModelDir == "" {
		o.ChatTemplate = tokenize.TemplateChatML
	}
	tmpl, err := o.chat().Template()
	if err != nil {
		return nil, fmt.Errorf("devstack: %w", err)
	}
	if len(o.LLMURLs) > 0 && len(o.LLMURLs) != o.Replicas {
		return nil, fmt.Errorf("devstack: %d inference servers for %d replicas", len(o.LLMURLs), o.Replicas)
	}
	if o.LLMAPI == "" {
		o.LLMAPI = llm.APISGLang
	}
	if o.Sim.Tokenizer == nil {
		o.Sim.Tokenizer = tmpl.Tokenizer()
	}
	if len(o.LLMURLs) == 0 {
		if err := sim.CheckTokenizer(o.Sim.Tokenizer); err != nil {
			return nil, fmt.Errorf("devstack: the simulator speaks ChatML: %w", err)
		}
	}
	s = &Stack{Template: tmpl, Opts: o, Sims: map[string]*sim.Server{}, SimURLs: map[string]string{},
		failed: make(chan struct{})}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	for i := range o.Replicas {
		s.Replicas = append(s.Replicas, fmt.Sprintf("r%d", i))
	}
	if len(s.Opts.EnvWorkerIDs) == 0 {
		s.Opts.EnvWorkerIDs = []string{"env-0"}
	}
	s.Creds = Credentials{NATS: map[string]string{}, APIToken: secret()}
	s.Opts.Common.NATSURL = o.NATSURL
	if o.NATSURL == "" {
		if s.NATS, err = localnats.Start(filepath.Join(o.Dir, "jetstream"), -1, o.NATSSync, s.natsUsers()...); err != nil {
			return nil, err
		}
		s.Opts.Common.NATSURL = s.NATS.ClientURL()
		s.Opts.Common.NATSUser, s.Opts.Common.NATSPassword = DevUser, s.Creds.NATS[DevUser]
		s.NATS.SetLogger(&s.violations, false, false)
	}
	if o.RedisCluster != "" {
		s.Opts.Common.RedisURL, s.Opts.Common.RedisCluster = o.RedisCluster, true
	} else {
		s.Creds.RedisPassword = secret()
		if s.Redis, err = localredis.StartWithPassword(ctx, o.RedisKind, o.Dir, s.Creds.RedisPassword); err != nil {
			return nil, err
		}
		s.Opts.Common.RedisURL, s.Opts.Common.RedisCluster = "redis://"+s.Redis.Addr+"/0", false
		s.Opts.Common.RedisPassword = s.Creds.RedisPassword
		if o.LeastPrivilege {
			if err := s.addRedisUsers(ctx); err != nil {
				s.Redis.Close()
				return nil, err
			}
		}
	}
	simulated := s.Replicas
	if len(o.LLMURLs) > 0 {
		simulated = nil // the replicas are the user's servers
	}
	for _, name := range simulated {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("simulator listen: %w", err)
		}
		sv := sim.New(o.Sim)
		hs := &http.Server{Handler: sv, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = hs.Serve(l) }()
		s.simServer = append(s.simServer, hs)
		s.Sims[name], s.SimURLs[name] = sv, "http://"+l.Addr().String()
	}
	return s, nil
}

// Violations are the permission violations the embedded NATS server has
// reported and, with LeastPrivilege on a real redis-server, the commands
// and keys Redis refused (its ACL LOG): a client that needs more than
// docs/security.md grants it.
func (s *Stack) Violations() []string {
	v := s.violations.get()
	if s.Redis != nil && s.Opts.LeastPrivilege {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		denied, err := s.Redis.ACLDenials(ctx)
		if err != nil {
			denied = []string{err.Error()}
		}
		for _, d := range denied {
			v = append(v, "redis: "+d)
		}
	}
	return v
}

// addRedisUsers gives each service that uses Redis an ACL user of its own
// with docs/security.md's rules (service.RedisTable) and a new password.
func (s *Stack) addRedisUsers(ctx context.Context) error {
	s.Creds.Redis = map[string]string{}
	for user := range service.RedisTable {
		s.Creds.Redis[user] = secret()
		if err := s.Redis.AddUser(ctx, user, s.Creds.Redis[user], service.RedisRules(user)); err != nil {
			return err
		}
	}
	return nil
}

// violationLog is a nats-server logger that keeps the permission
// violations and drops the rest.
type violationLog struct {
	mu    sync.Mutex
	lines []string
}

func (v *violationLog) add(format string, a []any) {
	if msg := fmt.Sprintf(format, a...); strings.Contains(msg, "Violation") {
		v.mu.Lock()
		v.lines = append(v.lines, msg)
		v.mu.Unlock()
	}
}

func (v *violationLog) get() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.lines)
}

func (v *violationLog) Noticef(string, ...any)         {}
func (v *violationLog) Debugf(string, ...any)          {}
func (v *violationLog) Tracef(string, ...any)          {}
func (v *violationLog) Warnf(format string, a ...any)  { v.add(format, a) }
func (v *violationLog) Errorf(format string, a ...any) { v.add(format, a) }
func (v *violationLog) Fatalf(format string, a ...any) { v.add(format, a) }

// secret returns a new random password or token.
func secret() string {
	return rand.Text() // 26 base32 characters, 128 bits
}

// natsUsers are the embedded NATS server's users: DevUser, the trainer,
// and with LeastPrivilege each service's own.
func (s *Stack) natsUsers() []*server.User {
	users := []*server.User{s.natsUser(DevUser, nil), s.natsUser(TrainerUser, ptr(service.NATSPermissionsOf(service.NATSTrainer, "")))}
	if s.Opts.LeastPrivilege {
		for _, c := range []string{service.NATSCoordinator, service.NATSPredictor, service.NATSGateway} {
			users = append(users, s.natsUser(natsUser(c, ""), ptr(service.NATSPermissionsOf(c, ""))))
		}
		for _, r := range s.Replicas {
			users = append(users, s.natsUser(natsUser(service.NATSGenWorker, r), ptr(service.NATSPermissionsOf(service.NATSGenWorker, r))))
		}
		for _, id := range s.Opts.EnvWorkerIDs {
			users = append(users, s.natsUser(natsUser(service.NATSEnvWorker, id), ptr(service.NATSPermissionsOf(service.NATSEnvWorker, id))))
		}
	}
	return users
}

func ptr[T any](v T) *T { return &v }

// natsUser makes user with a new password and perms (nil: any).
func (s *Stack) natsUser(user string, perms *service.NATSPermissions) *server.User {
	pw := secret()
	s.Creds.NATS[user] = pw
	u := &server.User{Username: user, Password: pw}
	if perms != nil {
		u.Permissions = ServerPermissions(*perms)
	}
	return u
}

// ServerPermissions is p as nats-server's permissions of a user.
func ServerPermissions(p service.NATSPermissions) *server.Permissions {
	sp := &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: slices.Clone(p.Publish), Deny: slices.Clone(p.PublishDeny)},
		Subscribe: &server.SubjectPermission{Allow: slices.Clone(p.Subscribe)},
	}
	if p.Responses {
		sp.Response = &server.ResponsePermission{MaxMsgs: 1, Expires: time.Minute}
	}
	return sp
}

// as is common logged in to the stack's NATS as client (with id, see
// service.NATSPermissionsOf): as its own user with LeastPrivilege, else as
// DevUser. A stack on a NATS server of the caller's leaves common as is.
func (s *Stack) as(common service.Common, client, id string) service.Common {
	if s.NATS == nil || !s.Opts.LeastPrivilege && client != service.NATSTrainer {
		return common
	}
	common.NATSUser = natsUser(client, id)
	common.NATSPassword = s.Creds.NATS[common.NATSUser] // "" for a service without a user: refused
	if pw, ok := s.Creds.Redis[client]; ok {
		common.RedisUsername, common.RedisPassword = client, pw
	}
	return common
}

// TrainerCommon is the stack's settings as the trainer (the CLI) logs in
// to its NATS: as TrainerUser, with the CLI's permissions.
func (s *Stack) TrainerCommon() service.Common {
	return s.as(s.Opts.Common, service.NATSTrainer, "")
}

// GatewayCommon is the stack's settings as the gateway logs in to its
// NATS: as its own user with LeastPrivilege (the trainer's permissions).
func (s *Stack) GatewayCommon() service.Common {
	return s.as(s.Opts.Common, service.NATSGateway, "")
}

// TrainerEnv is the environment with which the actloop CLI drives the
// stack as its trainer: its NATS URL, user and password and the
// coordinator's API token (and URL, once a coordinator serves HTTP).
func (s *Stack) TrainerEnv() []string {
	c := s.TrainerCommon()
	env := []string{"ACTLOOP_NATS_URL=" + c.NATSURL}
	if c.NATSUser != "" {
		env = append(env, "ACTLOOP_NATS_USER="+c.NATSUser, "ACTLOOP_NATS_PASSWORD="+c.NATSPassword)
	}
	if u := s.CoordinatorURL(); u != "" {
		env = append(env, "ACTLOOP_COORDINATOR_URL="+u)
	}
	return append(env, "ACTLOOP_API_TOKEN="+s.Creds.APIToken)
}

// CoordinatorURL is the base URL of the coordinator's HTTP API at the
// address its listener is bound to, not the one asked for (which may have
// been port 0, or taken); "" until StartCoordinator has started one that
// serves HTTP.
func (s *Stack) CoordinatorURL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.coordURL
}

// URLOf is the http:// base URL a client on this host dials to reach the
// listener at addr: an unspecified host (0.0.0.0, ::) becomes the loopback
// address of its family.
func URLOf(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
		if ip.To4() == nil {
			host = "::1"
		}
	}
	return "http://" + net.JoinHostPort(host, port)
}

// coordinatorListener is the listener the coordinator of cfg serves its
// HTTP API on: Options.CoordinatorListener the first time, else a new one
// on addr.
func (s *Stack) coordinatorListener(addr string) (net.Listener, error) {
	s.mu.Lock()
	l := s.Opts.CoordinatorListener
	s.Opts.CoordinatorListener = nil
	s.mu.Unlock()
	if l != nil {
		return l, nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("coordinator: listen %s: %w", addr, err)
	}
	return l, nil
}

// Deps connects a new NATS connection and Redis client for one service or
// tool, logged in as DevUser.
func (s *Stack) Deps(ctx context.Context, name string) (*service.Deps, error) {
	return s.depsAs(ctx, name, s.Opts.Common)
}

// depsAs is Deps logged in to NATS and Redis with login's credentials.
func (s *Stack) depsAs(ctx context.Context, name string, login service.Common) (*service.Deps, error) {
	c := s.Opts.Common
	c.NATSUser, c.NATSPassword = login.NATSUser, login.NATSPassword
	c.RedisUsername, c.RedisPassword = login.RedisUsername, login.RedisPassword
	nc, err := c.ConnectNATS(name, nats.MaxReconnects(-1))
	if err != nil {
		return nil, err
	}
	rdb, err := c.NewRedis()
	if err != nil {
		nc.Close()
		return nil, err
	}
	d, err := service.NewDeps(ctx, s.Opts.Common, nc, rdb, s.Opts.Log.With("service", name))
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
	return s.goAs(ctx, name, s.Opts.Common, build)
}

// goAs is Go logged in to NATS with login's credentials.
func (s *Stack) goAs(ctx context.Context, name string, login service.Common, build func(ctx context.Context, d *service.Deps) (func(context.Context) error, error)) (*service.Deps, error) {
	d, err := s.depsAs(ctx, name, login)
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
			if len(s.errs) == 1 {
				close(s.failed)
			}
			s.mu.Unlock()
		}
	})
	return d, nil
}

// CoordinatorConfig is the coordinator's configuration in this stack.
func (s *Stack) CoordinatorConfig() coordinator.Config {
	var c coordinator.Config
	service.Defaults(&c)
	c.Common, c.Replicas, c.Slots, c.Addr = s.as(s.Opts.Common, service.NATSCoordinator, ""), s.Replicas, s.Opts.Slots, s.Opts.CoordinatorAddr
	c.APIToken = s.Creds.APIToken
	return c
}

// StartCoordinator runs the coordinator. With an Addr it serves its HTTP
// API on a listener the stack binds before it returns, whose address
// CoordinatorURL (and TrainerEnv) then report.
func (s *Stack) StartCoordinator(ctx context.Context, cfg coordinator.Config) (*coordinator.Coordinator, error) {
	var l net.Listener
	if cfg.Addr != "" {
		var err error
		if l, err = s.coordinatorListener(cfg.Addr); err != nil {
			return nil, err
		}
		cfg.Addr = "" // served below, on l
	}
	var c *coordinator.Coordinator
	_, err := s.goAs(ctx, "coordinator", cfg.Common, func(ctx context.Context, d *service.Deps) (func(context.Context) error, error) {
		var err error
		c, err = coordinator.New(ctx, cfg, d)
		if err != nil {
			return nil, err
		}
		if l == nil {
			return c.Run, nil
		}
		h := c.Handler()
		return func(ctx context.Context) error {
			g, ctx := errgroup.WithContext(ctx)
			g.Go(func() error { return c.Run(ctx) })
			g.Go(func() error { return service.ServeListener(ctx, l, h, d.Log) })
			return g.Wait()
		}, nil
	})
	if err != nil {
		if l != nil {
			_ = l.Close()
		}
		return nil, err
	}
	if l != nil {
		s.mu.Lock()
		s.coordURL = URLOf(l.Addr())
		s.mu.Unlock()
	}
	return c, nil
}

// StartElectedCoordinator runs a coordinator that leads only while it holds
// the leader lease, as `actloop serve coordinator` does; several may run.
// It returns the coordinator and its connections.
func (s *Stack) StartElectedCoordinator(ctx context.Context, cfg coordinator.Config) (*coordinator.Elected, *service.Deps, error) {
	var e *coordinator.Elected
	d, err := s.goAs(ctx, "coordinator-"+cfg.CoordinatorID, cfg.Common, func(ctx context.Context, d *service.Deps) (func(context.Context) error, error) {
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
	cfg.Common, cfg.Replica, cfg.Slots, cfg.LLMURL, cfg.WorkerID = s.as(s.Opts.Common, service.NATSGenWorker, replica), replica, s.Opts.Slots, s.SimURLs[replica], "gen-"+replica
	if i := slices.Index(s.Replicas, replica); i >= 0 && i < len(s.Opts.LLMURLs) {
		cfg.LLMURL = s.Opts.LLMURLs[i]
	}
	cfg.LLMAPI, cfg.LLMModel = s.Opts.LLMAPI, s.Opts.LLMModel
	cfg.Addr = "" // no health server per worker in one process
	cfg.AgentConfig = s.Opts.AgentConfig
	cfg.Chat = s.Opts.chat()
	return cfg
}

// StartGenWorkerWith starts a gen-worker with cfg; gen is as for
// StartGenWorker.
func (s *Stack) StartGenWorkerWith(ctx context.Context, cfg genworker.Config, gen llm.Generator) (*service.Deps, error) {
	return s.goAs(ctx, "gen-worker-"+cfg.Replica, cfg.Common, func(ctx context.Context, d *service.Deps) (func(context.Context) error, error) {
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
	c.Common, c.ID, c.Slots, c.SandboxRoot = s.as(s.Opts.Common, service.NATSEnvWorker, id), id, s.Opts.EnvSlots, filepath.Join(s.Opts.Dir, "sandboxes", id)
	c.SimEnvTimeScale = s.Opts.Sim.TimeScale
	c.Addr, c.AgentConfig = "", s.Opts.AgentConfig
	c.WorkspaceRoots = []string{s.Opts.Dir} // the demo's workspaces are under it
	// The sandboxes live under the state dir, which goes at exit (and a
	// test removes a sandbox to lose it): the watcher enforces the disk
	// caps here, not a tmpfs mount per sandbox, which would outlive them.
	c.Disk = sandbox.DiskWatch
	// A development stack must run on a machine with only Go: bubblewrap
	// where it works, else unisolated, which the env-worker logs loudly.
	c.AllowUnisolated = true
	c.Chat = s.Opts.chat()
	c.ReadOnlyBinds = s.Opts.ReadOnlyBinds
	if s.Opts.Reward != nil {
		c.Reward = *s.Opts.Reward
	}
	return c
}

// StartEnvWorker runs an env-worker.
func (s *Stack) StartEnvWorker(ctx context.Context, cfg envworker.Config) (*service.Deps, error) {
	return s.goAs(ctx, "env-worker-"+cfg.ID, cfg.Common, func(ctx context.Context, d *service.Deps) (func(context.Context) error, error) {
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
	cfg.Common, cfg.Addr = s.as(s.Opts.Common, service.NATSPredictor, ""), ""
	cfg.Chat = s.Opts.chat()
	return cfg
}

// StartPredictorWith runs predictor-gw with cfg.
func (s *Stack) StartPredictorWith(ctx context.Context, cfg predictor.Config) error {
	_, err := s.goAs(ctx, "predictor-gw", cfg.Common, func(ctx context.Context, d *service.Deps) (func(context.Context) error, error) {
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

// Failed is closed when a service has stopped with an error (a gen-worker
// that refuses its inference server, say); Wait returns it.
func (s *Stack) Failed() <-chan struct{} { return s.failed }

// Close stops the simulators, Redis and NATS. Stop the services first
// (cancel their ctx, then Wait).
func (s *Stack) Close() {
	s.mu.Lock()
	if l := s.Opts.CoordinatorListener; l != nil { // never served on
		_ = l.Close()
	}
	s.mu.Unlock()
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
