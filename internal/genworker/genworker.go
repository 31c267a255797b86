// Package genworker serves one inference replica: it pulls gen steps (in
// priority.DispatchOrder: resumed before new, high before low) only while it
// has room (its SLOTS, or more while they fit in the server's KV pool:
// priority.DispatchLimit), runs one LLM call per
// step, its max_new_tokens capped to fit the server's context length,
// appends the generated tokens, parses the action and publishes the step
// that follows. It takes no step before it has checked its tokenization
// against its server's, and refuses to run on a mismatch (tokcheck.go).
//
// Acks: a step that ran (or was already committed) → ack; undecodable →
// dead letter; inference unavailable or Redis/NATS errors → nak with
// back-off; after MAX_DELIVER deliveries, or a request the server rejects,
// the worker reports the step failed and the coordinator ends the trajectory
// with a fallback. A request the server rejects for the context length is
// a limit instead: the trajectory ends limit_exceeded (context_length).
package genworker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/actloop/actloop/internal/agent"
	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/metrics"
	"github.com/actloop/actloop/internal/predict"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/telemetry"
	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/llm"
	"github.com/actloop/actloop/pkg/priority"
	"github.com/actloop/actloop/pkg/schema"
)

// Config is a gen-worker's settings (ACTLOOP_ prefix).
type Config struct {
	service.Common
	Replica    string        `envconfig:"REPLICA" default:"r0"`
	Slots      int           `envconfig:"SLOTS" default:"4"`
	LLMURL     string        `envconfig:"LLM_URL" default:"http://127.0.0.1:30000"`
	LLMTimeout time.Duration `envconfig:"LLM_TIMEOUT" default:"10m"`
	// LLMAPI is the API the replica's server speaks: sglang (native
	// /generate) or openai (vLLM's /v1/completions).
	LLMAPI llm.API `envconfig:"LLM_API" default:"sglang"`
	// LLMModel is sent as the model of OpenAI-compatible requests; empty
	// means the server's own.
	LLMModel string `envconfig:"LLM_MODEL"`
	// LLMDownAfter consecutive failures of the server (generations that
	// failed after their retries, failed /health probes) take the replica
	// down until a probe succeeds; 0 = never.
	LLMDownAfter int `envconfig:"LLM_DOWN_AFTER" default:"3"`
	// LLMHealthInterval is how often the server's /health is probed.
	LLMHealthInterval time.Duration `envconfig:"LLM_HEALTH_INTERVAL" default:"5s"`
	// PredictTimeout bounds the wait for predictor-gw after a generation;
	// 0 = no predictions.
	PredictTimeout time.Duration `envconfig:"PREDICT_TIMEOUT" default:"200ms"`
	// Preempt lets a high-priority step preempt the newest low-priority
	// generation when every slot is busy (never under
	// ACTLOOP_SCHEDULING=trajectory). Off by default: it measured no gain
	// on any scenario of the bench (docs/benchmarks.md).
	Preempt bool `envconfig:"PREEMPT" default:"false"`
	// KVBudget is the share of the server's KV pool (as it reports it) the
	// running generations' inputs and output reserves may fill: beyond its
	// SLOTS the worker runs more generations while they fit, up to 1,024.
	// 0: SLOTS only. Never under ACTLOOP_SCHEDULING=trajectory.
	KVBudget float64 `envconfig:"KV_BUDGET" default:"1"`
	// Scheduling is action or trajectory, as the coordinator's
	// ACTLOOP_SCHEDULING: under trajectory a trajectory holds its slot for
	// its whole life and nothing is preempted. While it differs from the
	// coordinator's (published in the control state) the worker takes no
	// work, logs the mismatch at error level and answers 503 on /readyz.
	Scheduling string `envconfig:"SCHEDULING" default:"action"`
	// PreemptCooldown: a trajectory preempted less than this long ago is not
	// preempted again (guards against thrashing).
	PreemptCooldown time.Duration `envconfig:"PREEMPT_COOLDOWN" default:"30s"`
	// HeartbeatInterval is how often the worker tells the coordinator it
	// is alive; a replica without heartbeats for ACTLOOP_REPLICA_TIMEOUT is
	// taken down and its trajectories move to other replicas.
	HeartbeatInterval time.Duration `envconfig:"HEARTBEAT_INTERVAL" default:"5s"`
	// Steal lets a worker with idle slots take a low-priority trajectory's
	// first generation from another replica's queue (.lo) whose oldest step
	// has waited longer than StealAfter; the trajectory then stays on this
	// replica (its prompt's prefix cache here is cold).
	Steal         bool          `envconfig:"STEAL" default:"false"`
	StealAfter    time.Duration `envconfig:"STEAL_AFTER" default:"5s"`
	WorkerID      string        `envconfig:"WORKER_ID"`
	tokenize.Chat               // ACTLOOP_TOKENIZER, ACTLOOP_CHAT_TEMPLATE: the same in every service
	// AgentConfig is the path of a mini-swe-agent YAML configuration whose
	// templates, action pattern and step limit drive the agent; "" = the
	// built-in one. The env-worker reads the same setting.
	AgentConfig string `envconfig:"AGENT_CONFIG"`
	Addr        string `envconfig:"GEN_WORKER_ADDR" default:":8081"`
}

// Validate joins every problem with c.
func (c *Config) Validate() error {
	errs := []error{c.Common.Validate()}
	if !bus.ValidName(c.Replica) {
		errs = append(errs, fmt.Errorf("ACTLOOP_REPLICA: %q is not a valid name ([A-Za-z0-9_-])", c.Replica))
	}
	if c.Slots < 1 {
		errs = append(errs, errors.New("ACTLOOP_SLOTS: must be >= 1"))
	}
	if c.KVBudget < 0 || c.KVBudget > 2 {
		errs = append(errs, fmt.Errorf("ACTLOOP_KV_BUDGET: must be in [0, 2] (0: SLOTS only), got %v", c.KVBudget))
	}
	if c.Scheduling != priority.SchedulingAction && c.Scheduling != priority.SchedulingTrajectory {
		errs = append(errs, fmt.Errorf("ACTLOOP_SCHEDULING: %q: want action or trajectory", c.Scheduling))
	}
	if c.LLMURL == "" {
		errs = append(errs, errors.New("ACTLOOP_LLM_URL: missing"))
	}
	if c.PredictTimeout < 0 {
		errs = append(errs, errors.New("ACTLOOP_PREDICT_TIMEOUT: must be >= 0 (0 = no predictions)"))
	}
	if c.HeartbeatInterval < 10*time.Millisecond {
		errs = append(errs, errors.New("ACTLOOP_HEARTBEAT_INTERVAL: must be >= 10ms"))
	}
	if c.PreemptCooldown < 0 {
		errs = append(errs, errors.New("ACTLOOP_PREEMPT_COOLDOWN: must be >= 0"))
	}
	if c.StealAfter <= 0 {
		errs = append(errs, errors.New("ACTLOOP_STEAL_AFTER: must be > 0"))
	}
	if c.LLMTimeout <= 0 {
		errs = append(errs, errors.New("ACTLOOP_LLM_TIMEOUT: must be > 0"))
	}
	errs = append(errs, c.Chat.Validate())
	if !c.LLMAPI.Valid() {
		errs = append(errs, fmt.Errorf("ACTLOOP_LLM_API: must be sglang or openai, got %q", c.LLMAPI))
	}
	if c.LLMDownAfter < 0 {
		errs = append(errs, errors.New("ACTLOOP_LLM_DOWN_AFTER: must be >= 0 (0 = never)"))
	}
	if c.LLMHealthInterval < 10*time.Millisecond {
		errs = append(errs, errors.New("ACTLOOP_LLM_HEALTH_INTERVAL: must be >= 10ms"))
	}
	return errors.Join(errs...)
}

// Worker is one replica's gen-worker.
type Worker struct {
	cfg     Config
	d       *service.Deps
	gen     llm.Generator
	tmpl    tokenize.ChatTemplate
	tok     tokenize.Tokenizer
	agents  agent.Agents
	board   *priority.Board
	predict *predict.Client
	id      string
	// ridPrefix starts the request ids this worker creates (a trajectory's,
	// at its first generation), so a pause aborts the generations running
	// under them with one call.
	ridPrefix string
	// predictions queued for predictor-gw; a full queue drops (a missing
	// prediction only leaves the length unknown).
	toPredict chan progress
	tracker   *tracker
	stealer   *stealer
	control   bus.ControlView
	restarts  atomic.Int64 // trajectories started again because they went stale
	held      atomic.Int64 // gen steps handed back because their trajectory was held
	health    *replicaHealth
	sched     *schedulingCheck
	load      atomic.Pointer[llm.Load] // the server's, at the last read (loadLoop)
	ctxLen    serverContext            // the server's context length (contextLoop)
	tokCheck  tokenCheck               // the tokenizer checked against the server's (tokenCheckLoop)
	spans     *llmSpans

	sources []jetstream.Consumer // one per class, in priority.DispatchOrder
	driver  *traj.Driver
	m       *genMetrics // registered by Run
}

// NewGenerator returns the client of the replica's inference server that
// cfg describes: SGLang's native API or the OpenAI-compatible one.
func NewGenerator(cfg Config) llm.Generator {
	if cfg.LLMAPI == llm.APIOpenAI {
		return llm.NewOpenAI(cfg.LLMURL, llm.OpenAIOptions{Timeout: cfg.LLMTimeout, Model: cfg.LLMModel})
	}
	return llm.NewSGLang(cfg.LLMURL, llm.SGLangOptions{Timeout: cfg.LLMTimeout})
}

// New declares the replica's consumers. gen is the replica's inference
// server (nil: NewGenerator(cfg)).
func New(ctx context.Context, cfg Config, d *service.Deps, gen llm.Generator) (*Worker, error) {
	if gen == nil {
		gen = NewGenerator(cfg)
	}
	id := cfg.WorkerID
	if id == "" {
		host, _ := os.Hostname()
		id = host + "-" + cfg.Replica
	}
	agents, err := agent.LoadAgents(cfg.AgentConfig)
	if err != nil {
		return nil, fmt.Errorf("ACTLOOP_AGENT_CONFIG: %w", err)
	}
	for _, n := range agents.Notices() {
		d.Log.Info("agent config: " + n)
	}
	tmpl, err := cfg.Chat.Template()
	if err != nil {
		return nil, err
	}
	w := &Worker{cfg: cfg, d: d, gen: gen, m: newGenMetrics(cfg.Replica), tmpl: tmpl, tok: tmpl.Tokenizer(), agents: agents,
		board: &priority.Board{}, id: id, ridPrefix: llm.NewRIDPrefix(), toPredict: make(chan progress, 256),
		predict: &predict.Client{NC: d.NC, Timeout: cfg.PredictTimeout, Log: d.Log}, spans: newLLMSpans(cfg, gen, d.Now)}
	w.health = newReplicaHealth(cfg.LLMDownAfter, cfg.LLMHealthInterval, gen, d.Log.With("replica", cfg.Replica))
	w.sched = &schedulingCheck{own: cfg.Scheduling, log: d.Log.With("replica", cfg.Replica), wake: w.health.signal}
	w.driver = &traj.Driver{Store: d.Store, PublishNext: w.publishNext, Log: d.Log.With("replica", cfg.Replica),
		Lease: d.Common.StepLease}
	w.tracker = newTracker(cfg.Preempt && cfg.Scheduling != priority.SchedulingTrajectory, gen.Abort, d.Now)
	w.stealer = &stealer{self: cfg.Replica, after: cfg.StealAfter, js: d.JS, topo: d.Topo, board: w.board, now: d.Now,
		interval: min(max(cfg.StealAfter/4, 50*time.Millisecond), time.Second)}
	name := "gen-" + cfg.Replica
	for _, class := range priority.DispatchOrder {
		c, err := d.Topo.Consumer(ctx, d.JS, bus.StreamGen, name+"-"+class, bus.SubjectGen(cfg.Replica, class))
		if err != nil {
			return nil, err
		}
		w.sources = append(w.sources, c)
	}
	return w, nil
}

// Run pulls and runs gen steps until ctx ends, then drains.
func (w *Worker) Run(ctx context.Context) error {
	defer w.registerMetrics().Close()
	c := w.d.Common
	r := &bus.Runner{Name: "gen-" + w.cfg.Replica, Sources: w.sources, Slots: w.cfg.Slots,
		Handler: w.handle, GiveUp: w.giveUp, Publisher: w.d.Pub, Log: w.d.Log.With("replica", w.cfg.Replica),
		AckWait: c.AckWait, MaxDeliver: c.MaxDeliver, PullWait: c.PullWait, StopTimeout: c.ShutdownTimeout,
		Preempt: w.tracker, PreemptFrom: highSources(),
		Ready: func() bool {
			return w.sched.agrees() && !w.tracker.isPaused() && !w.health.isDown() && w.ctxLen.ready() && w.tokCheck.ready()
		}}
	if w.cfg.Steal {
		r.Steal = w.stealer.Steal
	}
	if w.cfg.Scheduling == priority.SchedulingAction && w.cfg.KVBudget > 0 {
		r.Slots, r.Limit = max(w.cfg.Slots, priority.DispatchCap), w.dispatchLimit
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return r.Run(ctx) })
	g.Go(func() error { return bus.WatchBoard(ctx, w.d.JS, w.board, w.d.Log) })
	g.Go(func() error { return w.heartbeat(ctx) })
	g.Go(func() error { return w.loadLoop(ctx) })
	g.Go(func() error { return w.contextLoop(ctx) })
	g.Go(func() error { return w.tokenCheckLoop(ctx) })
	g.Go(func() error { return w.health.run(ctx) })
	g.Go(func() error { return w.watchControl(ctx) })
	g.Go(func() error { return w.watchScheduling(ctx) })
	g.Go(func() error { return w.watchCancels(ctx) })
	for range 4 {
		g.Go(func() error { return w.predictLoop(ctx) })
	}
	g.Go(func() error { return service.Serve(ctx, w.cfg.Addr, w.Handler(), w.d.Log) })
	return g.Wait()
}

// highSources indexes the high classes in priority.DispatchOrder: their steps
// may preempt.
func highSources() []int {
	var out []int
	for i, class := range priority.DispatchOrder {
		if priority.IsHigh(class) {
			out = append(out, i)
		}
	}
	return out
}

func (w *Worker) giveUp(ctx context.Context, m jetstream.Msg, cause error) error {
	step, err := schema.Decode[schema.GenStep](m.Data())
	if err != nil {
		return nil // undecodable messages are dead-lettered, never given up on
	}
	return traj.ReportFailed(ctx, w.d.Pub, w.d.Now(), w.id, step.TrajID, step.Seq, cause)
}

func (w *Worker) handle(ctx context.Context, m jetstream.Msg) error {
	step, err := schema.Decode[schema.GenStep](m.Data())
	if err != nil {
		return bus.Malformed(fmt.Errorf("gen step: %w", err))
	}
	if err := w.sched.err(); err != nil {
		// Pulled as the modes came apart: handed back, never given up on
		// for it (the coordinator moves the replica's trajectories).
		return bus.Redundant(fmt.Errorf("gen step of %s: %w", step.TrajID, err))
	}
	trace.SpanFromContext(ctx).SetAttributes(attribute.String("traj_id", step.TrajID), attribute.Int64("seq", step.Seq))
	telemetry.AddLogAttrs(ctx, "traj_id", step.TrajID, "seq", step.Seq)
	if w.board.Held(step.Replica, step.TrajID) {
		// Its replica's contexts would overfill the pool: it waits, without
		// taking a slot, until a snapshot lets it go (priority.KVPools.Hold).
		w.held.Add(1)
		return bus.Wait(priority.HeldRetry, fmt.Errorf("gen step of %s: held by its replica's snapshot", step.TrajID))
	}
	// The class is read again now, from the newest snapshot: the step's
	// subject says what it was when published.
	low := !priority.IsHigh(w.board.Class(w.cfg.Replica, step.TrajID))
	g := newGeneration()
	if meta, err := m.Metadata(); err == nil {
		g.queuedAt = meta.Timestamp
	}
	// The context's ids are all a generation reads, unless stale
	// trajectories restart: then the versions of its generated tokens too.
	parts := traj.WithTokenIDs
	if w.control.Get().StalePolicy == schema.StaleRestart {
		parts = traj.WithTokens
	}
	defer w.tracker.committed(g)
	return w.driver.Do(ctx, step.TrajID, step.Seq, traj.Step{
		Parts: parts, Want: traj.StatusNeedsGeneration,
		Run: func(ctx context.Context, t *traj.Trajectory) (traj.Transition, error) {
			if t.Replica != step.Replica {
				return nil, traj.ErrSkip // moved to another replica, which has its own copy
			}
			g.low = low
			tr, err := w.step(ctx, t, g)
			if err == nil && step.Replica != w.cfg.Replica {
				// Stolen from another replica's queue: the trajectory moves
				// here, atomically with the commit.
				tr = traj.Stolen{Replica: w.cfg.Replica, Then: tr}
				w.stealer.stolen.Add(1)
			}
			return tr, err
		}})
}

// heartbeat keeps the worker's entry in the heartbeats bucket fresh until
// ctx ends; while the replica's server is down, or the worker's
// ACTLOOP_SCHEDULING differs from the coordinator's, there is no entry, so
// the coordinator moves the replica's work at once.
func (w *Worker) heartbeat(ctx context.Context) error {
	return service.Heartbeat(ctx, w.d.JS, "gen."+w.cfg.Replica+"."+w.id, w.cfg.HeartbeatInterval, w.health.changed,
		func() (schema.Heartbeat, bool) {
			st := w.tracker.stats()
			l := w.serverLoad()
			h := schema.Heartbeat{V: schema.Version, Worker: w.id, Replica: w.cfg.Replica, Slots: w.cfg.Slots,
				Running: int(st.Running), GeneratedTokens: st.GeneratedTokens, ReprefilledTokens: st.ReprefilledTokens,
				ServerKVTokens: l.CapacityTokens, ServerKVUsage: l.Usage, ServerRunning: l.Running, ServerWaiting: l.Waiting,
				ServerCacheHitRate: l.CacheHitRate, TokenSeconds: w.tracker.tokenSeconds(), At: w.d.Now().UTC()}
			return h, !w.health.isDown() && w.sched.agrees()
		}, w.d.Log)
}

// Stats reports the worker's preemption counters.
func (w *Worker) Stats() Stats {
	s := w.tracker.stats()
	s.DispatchP50MS = metrics.HistogramQuantile(w.m.queueWait, 0.5) * 1000
	s.DispatchP99MS = metrics.HistogramQuantile(w.m.queueWait, 0.99) * 1000
	s.Stolen = w.stealer.stolen.Load()
	s.Restarts = w.restarts.Load()
	s.HeldSteps = w.held.Load()
	return s
}

// Paused reports whether the worker holds its generations back (a pause,
// or no control state seen yet).
func (w *Worker) Paused() bool { return w.tracker.isPaused() }

// Handler serves /healthz, /readyz (503 naming both modes while its
// ACTLOOP_SCHEDULING differs from the coordinator's), /metrics and
// /v1/stats.
func (w *Worker) Handler() http.Handler {
	mux := service.HealthMux(w.d)
	mux.HandleFunc("GET /v1/stats", func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(rw).Encode(w.Stats())
	})
	return w.withReadiness(mux)
}

// step runs the generation of t (or ends it at a limit) and returns the
// transition. Every generation of t runs under its request id, made at its
// first: its turns are sequential, so the engine sees one multi-turn
// request. A generation preempted for a high-priority step commits its
// partial output instead; its resume continues with the turn's token budget
// reduced by what it already produced.
func (w *Worker) step(ctx context.Context, t *traj.Trajectory, g *generation) (traj.Transition, error) {
	s := t.Sample
	f, err := w.flowOf(t)
	if err != nil {
		return nil, bus.Fatal(err)
	}
	lim := f.limits
	lim.ContextLength = w.ctxLen.length()
	// The context is the call's input: the conversation (a proxy-flow
	// trajectory's current segment), and a resumed turn's output so far.
	input := t.Tokens[min(t.Segment, len(t.Tokens)):]
	use := agent.Usage{Calls: t.Calls, Tokens: t.GenTokens, Elapsed: w.d.Now().Sub(t.AdmittedAt), FormatErrors: t.FormatErrors,
		Context: len(input)}
	// Loaded without its versions (the policy changed meanwhile), t has
	// no oldest version: the next step checks. A validation rollout is
	// not training data: staleness does not restart it.
	if !s.Validation() && priority.MustRestart(w.control.Get(), priority.OldestVersion(t.Mask, t.Versions)) {
		return w.restart(t), nil // a partial turn too: its tokens would mix versions
	}
	if t.TurnGen == 0 { // limits are checked before each model call, not before a resume
		var le *agent.LimitError
		if err := agent.CheckLimits(lim, use); errors.As(err, &le) {
			return traj.LimitReached{Limit: le.Limit, Reason: err.Error(), Closing: f.closing()}, nil
		}
	}
	partial := t.Tokens[len(t.Tokens)-t.TurnGen:]
	rid := t.RID
	var res llm.Result
	maxNew := agent.MaxNewTokens(f.maxNew-t.TurnGen, lim, use)
	if maxNew > 0 {
		if rid == "" { // its first generation: recorded before it is sent, kept for the rest
			var err error
			// This worker's prefix: a pause aborts all of its requests at once.
			rid, err = w.d.Store.ClaimRID(ctx, t.ID, t.Seq, llm.NewRIDWithPrefix(w.ridPrefix))
			if errors.Is(err, traj.ErrStale) || errors.Is(err, traj.ErrNotFound) {
				return nil, traj.ErrSkip // another delivery ran the step, or the trajectory is gone
			}
			if err != nil {
				return nil, err
			}
		}
		req := llm.Request{RID: rid, InputIDs: input, Sampling: f.sampling(maxNew)}
		if t.Calls < len(s.Script) {
			req.Reply = s.Script[t.Calls]
		}
		g.rid, g.trajID, g.notBefore = rid, t.ID, t.PreemptedAt.Add(w.cfg.PreemptCooldown)
		g.need = int64(len(input) + priority.OutputReserve(maxNew))
		if err := w.tracker.start(ctx, g); err != nil {
			return nil, err // shutting down while paused
		}
		started := time.Now()
		if !g.queuedAt.IsZero() {
			w.m.queueWait.Observe(max(started.Sub(g.queuedAt), 0).Seconds())
		}
		var err error
		lctx, lspan := w.spans.start(ctx, req)
		res, err = w.generate(g.traceAnswer(lctx), req, g)
		g.answered.CompareAndSwap(0, time.Now().UnixNano()) // a generator that is not over HTTP
		w.spans.end(lspan, req, res, err)
		w.m.step.Observe(time.Since(started).Seconds())
		if err == nil && res.Finish.Type != llm.FinishAbort {
			w.tracker.paced(time.Since(started).Seconds(), len(res.OutputIDs))
		}
		span := trace.SpanFromContext(ctx)
		span.SetAttributes(attribute.String("replica", w.cfg.Replica), attribute.String("rid", rid),
			attribute.Int("tokens_in", len(req.InputIDs)), attribute.Int("tokens_out", len(res.OutputIDs)),
			attribute.Int64("generate_ms", time.Since(started).Milliseconds()), attribute.Int64("weight_version", g.version),
			attribute.Bool("preempted", g.preempted.Load()), attribute.Bool("paused", g.paused.Load()),
			attribute.String("finish", res.Finish.Type.String()))
		if !g.queuedAt.IsZero() {
			span.SetAttributes(attribute.Int64("queue_wait_ms", started.Sub(g.queuedAt).Milliseconds()))
		}
		w.health.record(err)
		if err == nil && res.Finish.Type == llm.FinishAbort && finishedAnyway(res.OutputIDs, w.tmpl.StopTokenIDs(), maxNew) {
			// The abort raced with the end of the turn and lost: the output
			// is whole. Resuming it would generate the turn again.
			res.Finish = llm.Finish{Type: llm.FinishLength, Matched: -1, Length: maxNew}
			if last := res.OutputIDs[len(res.OutputIDs)-1]; slices.Contains(w.tmpl.StopTokenIDs(), last) {
				res.Finish = llm.Finish{Type: llm.FinishStop, Matched: last}
			}
		}
		if err == nil && res.Finish.Type == llm.FinishAbort && g.paused.Load() {
			g.kept.Store(int64(len(res.OutputIDs))) // before done: a pause reads it then
		}
		if hold := w.tracker.done(g); hold != nil {
			w.tracker.afterPause(ctx, g, hold)
		}
		switch {
		case errors.Is(err, llm.ErrContextLength) && t.TurnGen == 0:
			// The server holds a context shorter than it said (or said
			// none): the trajectory ends at the turn before, as it would
			// had it said.
			return traj.LimitReached{Limit: schema.LimitContextLength,
				Reason: fmt.Sprintf("%v: %s reached: the server refused the call: %v", agent.ErrLimitsExceeded,
					schema.LimitContextLength, err),
				Closing: f.closing()}, nil
		case errors.Is(err, llm.ErrContextLength):
			// A resumed turn the server has no room for ends with what it
			// has, as one capped to the room left would; the next call
			// meets the limit.
			res = llm.Result{Finish: llm.Finish{Type: llm.FinishLength, Matched: -1}}
		case err != nil && (llm.Temporary(err) || duplicateRID(err)):
			return nil, fmt.Errorf("generate on %s: %w", w.cfg.Replica, err)
		case err != nil:
			return nil, bus.Fatal(fmt.Errorf("generate on %s: %w", w.cfg.Replica, err))
		case res.Finish.Type == llm.FinishAbort && g.cancelled.Load():
			w.m.aborts.WithLabelValues(abortCancel).Inc()
			w.tracker.cancelled.Add(1)
			return nil, traj.ErrSkip // it ended meanwhile: nothing to commit
		case res.Finish.Type == llm.FinishAbort && (g.preempted.Load() || g.paused.Load()):
			cause := abortPause
			if g.preempted.Load() {
				cause = abortPreempt
			}
			w.m.aborts.WithLabelValues(cause).Inc()
			return w.partial(g, res), nil
		case res.Finish.Type == llm.FinishAbort:
			w.m.aborts.WithLabelValues(abortServer).Inc()
			w.tracker.wastedTokens.Add(int64(len(res.OutputIDs)))
			return nil, fmt.Errorf("generation aborted by the server: %s", res.Finish.Message)
		}
		if err == nil {
			w.account(t, res)
		}
	} else { // the turn spent its whole budget (or the context's room) before it was interrupted: it ends here
		res.Finish = llm.Finish{Type: llm.FinishLength, Matched: -1}
	}
	out := append(slices.Clone(partial), res.OutputIDs...)
	turn := traj.Turn{Output: res.OutputIDs, Logprobs: res.Logprobs, Version: int32(g.version),
		Text: w.tok.Decode(trimStop(out, w.tmpl.StopTokenIDs())), RID: rid}
	return f.turn(turn, out, res.Finish)
}

// flow is what one gen step of a trajectory does as its flow has it: the
// limits it checks, the most tokens it asks for, its sampling, the message
// a limit ends the conversation with, and what its turn commits.
type flow struct {
	limits   agent.Limits // but the context length, the server's
	maxNew   int          // the most new tokens the turn may have
	sampling func(maxNew int) llm.SamplingParams
	closing  func() *traj.UserTurn
	// turn is the transition a whole turn commits: turn without its
	// closing tokens; out its output ids whole, a resumed turn's included.
	turn func(turn traj.Turn, out []int32, finish llm.Finish) (traj.Transition, error)
}

// flowOf returns the flow of t's sample: a built-in agent's, or the proxy
// flow's (proxyFlow).
func (w *Worker) flowOf(t *traj.Trajectory) (flow, error) {
	s := t.Sample
	if s.Flow == schema.FlowProxy {
		return w.proxyFlow(t)
	}
	ag, err := w.agents.For(s.Flow)
	if err != nil {
		return flow{}, err
	}
	return flow{
		limits: agent.Limits{StepLimit: agent.MinLimit(s.Limits.StepLimit, ag.Config.StepLimit), TokenBudget: s.Limits.TokenBudget,
			WallClock: s.Limits.WallClock(), FormatErrorLimit: s.Limits.FormatErrorLimit},
		maxNew: s.Sampling.MaxNewTokens,
		sampling: func(maxNew int) llm.SamplingParams {
			p := w.sampling(s)
			p.MaxNewTokens = maxNew
			return p
		},
		closing: func() *traj.UserTurn { return traj.Closing(ag, w.tmpl, agent.EndingLimitsExceeded, "") },
		turn: func(turn traj.Turn, out []int32, _ llm.Finish) (traj.Transition, error) {
			turn.CloseTurn = w.tmpl.CloseTurn(out)
			return w.action(t, ag, turn)
		},
	}, nil
}

// sampling is s's sampling parameters, the chat template's stop tokens
// with them, but for the max new tokens.
func (w *Worker) sampling(s schema.Sample) llm.SamplingParams {
	return llm.SamplingParams{Temperature: s.Sampling.Temperature, TopP: s.Sampling.TopP, TopK: s.Sampling.TopK,
		MinP: s.Sampling.MinP, Stop: s.Sampling.Stop, StopTokenIDs: w.tmpl.StopTokenIDs()}
}

// action reads a built-in agent's turn: the action it holds, or a format
// error fed back to the model.
func (w *Worker) action(t *traj.Trajectory, ag agent.Agent, turn traj.Turn) (traj.Transition, error) {
	s := t.Sample
	action, perr := ag.Action(ag.Config, turn.Text)
	var fe *agent.FormatError
	switch {
	case perr == nil:
		return traj.Generated{Turn: turn, Action: action}, nil
	case errors.As(perr, &fe):
		msg, err := ag.Config.For(s.Task, t.Calls+1).FormatErrorFor(fe)
		if err != nil {
			return nil, bus.Fatal(fmt.Errorf("render format error: %w", err))
		}
		return traj.FormatErrored{Turn: turn, Feedback: traj.UserTurn{Content: msg,
			Tokens: slices.Concat(w.tmpl.Message(schema.RoleUser, msg), w.tmpl.GenerationPrompt())}}, nil
	}
	return nil, bus.Fatal(perr)
}

// account counts a generation's tokens, and the prompt tokens the server had
// to prefill again: of the prompt it did not serve from its cache, all but
// what was appended since the trajectory's previous generation (which it
// had seen, and would have cached had it kept it).
func (w *Worker) account(t *traj.Trajectory, res llm.Result) {
	w.tracker.generated.Add(int64(len(res.OutputIDs)))
	if t.GenCtx == 0 || res.PromptTokens == 0 {
		return // a first generation, or a server that reports no counts
	}
	fresh := len(t.Tokens) - t.Segment - t.GenCtx
	if re := res.PromptTokens - res.CachedTokens - fresh; re > 0 {
		w.tracker.reprefilled.Add(int64(re))
	}
}

// partial commits what a generation aborted for a preemption or a pause
// produced (possibly nothing, when the abort came before prefill), under
// the trajectory's request id, for the resume.
func (w *Worker) partial(g *generation, res llm.Result) traj.Transition {
	w.tracker.resumedTokens.Add(int64(len(res.OutputIDs)))
	return traj.Interrupted{Output: res.OutputIDs, Logprobs: res.Logprobs, Version: int32(g.version), RID: g.rid,
		Preempted: g.preempted.Load()}
}

// finishedAnyway reports whether an aborted generation's output is whole
// regardless: it ends with a stop token or used up its max_new_tokens.
func finishedAnyway(out, stops []int32, maxNew int) bool {
	if len(out) == 0 {
		return false
	}
	return len(out) >= maxNew || slices.Contains(stops, out[len(out)-1])
}

// restart discards what t has generated: its messages and tokens go, and it
// starts again in a fresh sandbox (the env start closes the old one).
func (w *Worker) restart(t *traj.Trajectory) traj.Transition {
	w.restarts.Add(1)
	w.d.Log.Info("stale trajectory starts again", "traj_id", t.ID, "seq", t.Seq, "replica", w.cfg.Replica, "restarts", t.Restarts+1)
	return traj.Restarted{}
}

func trimStop(out, stops []int32) []int32 {
	if n := len(out); n > 0 {
		for _, s := range stops {
			if out[n-1] == s {
				return out[:n-1]
			}
		}
	}
	return out
}

func (w *Worker) publishNext(ctx context.Context, t *traj.Trajectory) error {
	n, err := traj.NextOf(t, w.board)
	if errors.Is(err, traj.ErrNoNext) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := traj.Publish(ctx, w.d.Pub, t.Trace, n); err != nil {
		return err
	}
	if t.Status == traj.StatusNeedsEnvStep || t.Status == traj.StatusFinishing {
		// Report its progress (and, while the sandbox works, predict the
		// rest).
		select {
		case w.toPredict <- progress{p: traj.ProgressReport(t), ask: traj.PredictRequest(t)}: // not t: it holds every token
		default:
		}
	}
	return nil
}

// progress is a trajectory's progress report and what predictor-gw is
// asked of it.
type progress struct {
	p   schema.Prediction
	ask schema.PredictRequest
}

// predictLoop reports the progress of trajectories whose generation just
// ended to the coordinator, with predictor-gw's prediction of their
// remaining work when they go on (PREDICT_TIMEOUT > 0).
func (w *Worker) predictLoop(ctx context.Context) error {
	for {
		var pr progress
		select {
		case <-ctx.Done():
			return nil
		case pr = <-w.toPredict:
		}
		p := pr.p
		if !p.Finishing && w.cfg.PredictTimeout > 0 {
			rep, err := w.predict.Predict(ctx, pr.ask)
			if err == nil { // else logged once by the Predictor; the length stays unknown
				p.RemainingTokens, p.RemainingTurns, p.Source = rep.RemainingTokens, rep.RemainingTurns, rep.Source
			}
		}
		if err := traj.ReportProgress(ctx, w.d.Pub, w.d.Now(), p); err != nil && ctx.Err() == nil {
			w.d.Log.Warn("report prediction", "traj_id", p.TrajID, "error", err)
		}
	}
}
