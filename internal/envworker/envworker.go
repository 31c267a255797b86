// Package envworker runs environment steps: it starts and bootstraps a
// trajectory's sandbox (any worker, from actloop.env.start), then runs each
// action in it (the owner, from actloop.env.<id>), and at the end takes the
// diff, scores it by running the sample's eval command in a fresh sandbox
// (and asks the reward endpoint the sample or the deployment names, if
// any: reward_call.go), cleans up and publishes the result.
//
// Acks: a step that ran (or was already committed) → ack; undecodable →
// dead letter; Redis/NATS trouble → nak with back-off; a sandbox that cannot
// start or was lost → the step is reported failed at once and the
// coordinator ends the trajectory with a fallback. A command's timeout is an
// observation for the model, not a failure.
//
// The trajectory's state in Redis changes exactly once per step, but a
// command can run twice in its sandbox: a worker that dies after running a
// command and before committing its observation leaves the redelivered step
// to run it again in the same sandbox.
package envworker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/actloop/actloop/internal/agent"
	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/telemetry"
	"github.com/actloop/actloop/internal/testlog"
	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/priority"
	"github.com/actloop/actloop/pkg/sandbox"
	"github.com/actloop/actloop/pkg/schema"
)

// Worker is one env-worker.
type Worker struct {
	cfg      Config
	d        *service.Deps
	backends map[string]sandbox.Backend
	tmpl     tokenize.ChatTemplate
	agents   agent.Agents
	board    *priority.Board
	control  bus.ControlView // the newest control state: staleness of results
	rewards  *rewardCaller

	own, start jetstream.Consumer
	driver     *traj.Driver

	local *sandbox.Local // the local backend, nil with Docker: for the status
	mu    sync.Mutex
	boxes map[string]sandbox.Sandbox // by trajectory id
	// agentRuns are the proxy flow's agents this worker runs, by
	// trajectory id (proxy.go); life is the context they run under, the
	// worker's own, set by Run.
	agentRuns map[string]*agentRun
	life      context.Context
	evals     atomic.Int64
	replays   atomic.Int64 // sandboxes rebuilt by replaying commands
	m         *envMetrics
}

// Replays is how many lost sandboxes this worker rebuilt by replaying their
// trajectories' commands.
func (w *Worker) Replays() int64 { return w.replays.Load() }

// New builds the sandbox backends and declares the worker's consumers.
func New(ctx context.Context, cfg Config, d *service.Deps) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	runner, err := realBackend(ctx, cfg, d)
	if err != nil {
		return nil, err
	}
	tmpl, err := cfg.Chat.Template()
	if err != nil {
		return nil, err
	}
	agents, err := agent.LoadAgents(cfg.AgentConfig)
	if err != nil {
		return nil, fmt.Errorf("ACTLOOP_AGENT_CONFIG: %w", err)
	}
	w := &Worker{cfg: cfg, d: d, tmpl: tmpl, agents: agents, board: &priority.Board{},
		backends: map[string]sandbox.Backend{schema.BackendLocal: runner, schema.BackendSim: sandbox.NewSim(cfg.sim())},
		boxes:    map[string]sandbox.Sandbox{}, m: newEnvMetrics(), rewards: newRewardCaller(),
		agentRuns: map[string]*agentRun{}, life: context.Background()}
	w.local, _ = runner.(*sandbox.Local)
	w.driver = &traj.Driver{Store: d.Store, PublishNext: w.publishNext, Log: d.Log, Lease: d.Common.StepLease}
	if w.own, err = d.Topo.Consumer(ctx, d.JS, bus.StreamEnv, "env-"+cfg.ID, bus.SubjectEnv(cfg.ID)); err != nil {
		return nil, err
	}
	if w.start, err = d.Topo.Consumer(ctx, d.JS, bus.StreamEnv, "env-start", bus.SubjectEnvStart); err != nil {
		return nil, err
	}
	return w, nil
}

// Run pulls and runs env steps until ctx ends, then drains. Steps of
// sandboxes it owns come before starting new ones.
func (w *Worker) Run(ctx context.Context) error {
	defer w.registerMetrics().Close()
	w.life = ctx
	c := w.d.Common
	r := &bus.Runner{Name: "env-" + w.cfg.ID, Sources: []jetstream.Consumer{w.own, w.start}, Slots: w.cfg.Slots,
		Handler: w.handle, GiveUp: w.giveUp, Publisher: w.d.Pub, Log: w.d.Log.With("worker", w.cfg.ID),
		AckWait: c.AckWait, MaxDeliver: c.MaxDeliver, PullWait: c.PullWait, StopTimeout: c.ShutdownTimeout}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return r.Run(ctx) })
	g.Go(func() error { return bus.WatchBoard(ctx, w.d.JS, w.board, w.d.Log) })
	g.Go(func() error { return bus.WatchControl(ctx, w.d.JS, w.d.Log, w.control.Set) })
	g.Go(func() error { return w.heartbeat(ctx) })
	g.Go(func() error { return w.watchAgents(ctx) })
	g.Go(func() error { return service.Serve(ctx, w.cfg.Addr, w.mux(), w.d.Log) })
	err := g.Wait()
	w.mu.Lock()
	runs := w.agentRuns
	w.agentRuns = map[string]*agentRun{}
	w.mu.Unlock()
	for _, r := range runs { // their trajectories end as agents lost (proxyExec)
		r.stop()
	}
	w.rewards.hc.CloseIdleConnections()
	for _, b := range w.backends {
		if c, ok := b.(io.Closer); ok { // the Docker backend's idle connections
			_ = c.Close()
		}
	}
	return err
}

// heartbeat tells the coordinator this worker is alive, every
// HeartbeatInterval, until ctx ends; then it removes its entry. A worker
// not heard from for the coordinator's ACTLOOP_ENV_WORKER_TIMEOUT loses its
// trajectories to live ones.
func (w *Worker) heartbeat(ctx context.Context) error {
	return service.Heartbeat(ctx, w.d.JS, bus.EnvHeartbeatKey(w.cfg.ID), w.cfg.HeartbeatInterval, nil,
		func() (schema.Heartbeat, bool) {
			return schema.Heartbeat{V: schema.Version, Worker: w.cfg.ID, Slots: w.cfg.Slots, At: w.d.Now().UTC()}, true
		}, w.d.Log)
}

// realBackend builds the backend that runs real commands (samples with
// env.backend "local"), as ACTLOOP_SANDBOX_BACKEND says.
func realBackend(ctx context.Context, cfg Config, d *service.Deps) (sandbox.Backend, error) {
	if cfg.SandboxBackend == BackendDocker {
		dk, err := sandbox.NewDocker(cfg.docker())
		if err != nil {
			return nil, fmt.Errorf("docker sandbox backend: %w", err)
		}
		if err := dk.Ping(ctx); err != nil {
			return nil, fmt.Errorf("docker sandbox backend (ACTLOOP_DOCKER_HOST): %w", err)
		}
		return dk, nil
	}
	local, err := sandbox.NewLocal(cfg.local())
	if errors.Is(err, sandbox.ErrUnisolated) {
		return nil, fmt.Errorf("local sandbox backend (ACTLOOP_SANDBOX_ISOLATION=%s): %w; install bubblewrap (bwrap), "+
			"or set ACTLOOP_SANDBOX_ALLOW_UNISOLATED=true to run agents' commands on this host as the worker's user", cfg.Isolation, err)
	}
	if err != nil {
		return nil, fmt.Errorf("local sandbox backend: %w", err)
	}
	if local.Isolation() == sandbox.IsolationBwrap && !local.Seccomp() {
		d.Log.Warn("no seccomp filter for this architecture: sandbox commands may make every system call bwrap leaves them")
	}
	if cg := local.Cgroups(); cg != "" {
		d.Log.Info("sandbox commands run in cgroups", "cgroups", cg)
	} else {
		d.Log.Warn("no cgroups for sandbox commands (neither a delegated cgroup v2 nor writable cgroup v1 controllers): "+
			"per-process rlimits alone bound memory (address space), processes "+
			"(under bwrap) and CPU time, and there is no CPU share; cgroup_error says what a cgroup needs",
			"cgroup_error", fmt.Sprint(local.CgroupError()))
	}
	if local.Disk() == sandbox.DiskTmpfs {
		d.Log.Info("sandbox disk and file limits enforced by the kernel: each sandbox on a tmpfs of its own",
			"disk", local.Disk(), "disk_mb", cfg.DiskMB, "files", cfg.Files)
	} else if cfg.DiskMB > 0 || cfg.Files > 0 {
		d.Log.Warn("sandbox disk and file limits measured while a command runs, not enforced by the kernel: "+
			"a command can overshoot them by what it writes between two measurements; disk_error says why not a tmpfs",
			"disk", local.Disk(), "disk_mb", cfg.DiskMB, "files", cfg.Files, "setting", "ACTLOOP_SANDBOX_DISK="+cfg.Disk,
			"disk_error", fmt.Sprint(local.DiskError()))
	}
	if roots := cfg.rootsHolding(); len(roots) > 0 {
		d.Log.Warn("ACTLOOP_WORKSPACE_ROOTS holds ACTLOOP_SANDBOX_ROOT (or the worker's state): every workspace that overlaps it is refused",
			"roots", roots, "sandbox_root", cfg.SandboxRoot)
	}
	if local.Isolation() == sandbox.IsolationNone {
		d.Log.Warn("SANDBOXES ARE NOT ISOLATED: agents' commands run on this host with the worker's privileges, "+
			"network and files (ACTLOOP_SANDBOX_ALLOW_UNISOLATED=true); bwrap_error says what bubblewrap needs to isolate them",
			"isolation", cfg.Isolation, "bwrap_error", fmt.Sprint(local.BwrapError()))
	}
	return local, nil
}

func (w *Worker) giveUp(ctx context.Context, m jetstream.Msg, cause error) error {
	step, err := schema.Decode[schema.EnvStep](m.Data())
	if err != nil || step.Kind == schema.EnvClose {
		return nil
	}
	return traj.ReportFailed(ctx, w.d.Pub, w.d.Now(), w.cfg.ID, step.TrajID, step.Seq, cause)
}

func (w *Worker) handle(ctx context.Context, m jetstream.Msg) error {
	step, err := schema.Decode[schema.EnvStep](m.Data())
	if err != nil {
		return bus.Malformed(fmt.Errorf("env step: %w", err))
	}
	defer w.m.observe(step.Kind)()
	trace.SpanFromContext(ctx).SetAttributes(attribute.String("traj_id", step.TrajID),
		attribute.Int64("seq", step.Seq), attribute.String("kind", string(step.Kind)))
	telemetry.AddLogAttrs(ctx, "traj_id", step.TrajID, "seq", step.Seq, "kind", string(step.Kind))
	var s traj.Step
	switch step.Kind {
	case schema.EnvClose:
		t, err := w.d.Store.Load(ctx, step.TrajID, 0)
		if errors.Is(err, traj.ErrNotFound) {
			w.closeSandbox(ctx, step.TrajID, "")
			return nil
		}
		if err != nil {
			return err
		}
		w.closeSandbox(ctx, t.ID, t.Handle)
		return nil
	case schema.EnvStart:
		s = traj.Step{Want: traj.StatusStarting, Run: w.startStep, Discard: func(ctx context.Context, tr traj.Transition) {
			// Another delivery started one, or a retry starts anew.
			switch st := tr.(type) {
			case traj.Started:
				w.closeSandbox(ctx, step.TrajID, st.Handle)
			case traj.Called:
				w.closeSandbox(ctx, step.TrajID, st.Handle)
			case traj.AgentExited:
				w.closeSandbox(ctx, step.TrajID, st.Handle)
			}
		}}
	case schema.EnvExec:
		s = traj.Step{Want: traj.StatusNeedsEnvStep, Run: w.execStep, More: func(t *traj.Trajectory) traj.Parts {
			if t.Sample.Flow == schema.FlowProxy {
				return traj.WithTokens // the reply to answer the agent's call with
			}
			return 0
		}}
	case schema.EnvFinish:
		s = traj.Step{Parts: traj.WithAll, Want: traj.StatusFinishing, Run: w.finishStep}
	}
	return w.driver.Do(ctx, step.TrajID, step.Seq, s)
}

// publishNext publishes the follow-up of t's state: the next step, or for a
// finished trajectory its result, after which its state expires.
func (w *Worker) publishNext(ctx context.Context, t *traj.Trajectory) error {
	n, err := traj.NextOf(t, w.board)
	if !errors.Is(err, traj.ErrNoNext) {
		if err != nil {
			return err
		}
		if err := traj.Publish(ctx, w.d.Pub, t.Trace, n); err != nil {
			return err
		}
		if t.Status == traj.StatusFinishing {
			// Submitted: it needs no more generation, nor KV (admission
			// counts its context no more).
			return traj.ReportProgress(ctx, w.d.Pub, w.d.Now(), traj.ProgressReport(t))
		}
		return nil
	}
	// Only now that the end is committed: a finish that must be retried
	// needs its sandbox for the diff.
	w.closeSandbox(ctx, t.ID, t.Handle)
	if t.Status != traj.StatusTerminated {
		return nil // aborted: the coordinator published the fallback
	}
	return traj.PublishResult(ctx, w.d.Store, w.d.Results, t, w.d.Common.ResultTTL, w.control.Get())
}

func (w *Worker) backend(t *traj.Trajectory) (sandbox.Backend, error) {
	b := w.backends[t.Sample.Env.Backend]
	if b == nil {
		return nil, bus.Fatal(fmt.Errorf("env backend %q is not available on this worker", t.Sample.Env.Backend))
	}
	return b, nil
}

// startStep starts the sandbox, runs setup, and renders the sample's
// prompt (its task through the agent's templates, its messages through the
// chat template, or its token ids as given) as the first tokens. A sample whose sandbox cannot be set up
// (a setup command fails, the workspace or patch is unusable) or whose
// prompt cannot be rendered ends failed: no retry would do better. One
// whose own wall clock stops its setup ends limit_exceeded
// (wallClockInSetup).
func (w *Worker) startStep(ctx context.Context, t *traj.Trajectory) (traj.Transition, error) {
	b, err := w.backend(t)
	if err != nil {
		return nil, err
	}
	proxied := t.Sample.Flow == schema.FlowProxy
	var (
		msgs   []schema.Message
		prompt []int32
	)
	if !proxied { // a proxy-flow agent writes its own prompt
		ag, err := w.agents.For(t.Sample.Flow)
		if err != nil {
			return traj.Failed{Reason: "flow: " + err.Error()}, nil
		}
		if msgs, prompt, err = ag.SampleOpening(w.tmpl, &t.Sample); err != nil {
			return traj.Failed{Reason: "prompt: " + err.Error()}, nil
		}
	}
	// Setup runs within the sample's wall clock, and stops when the
	// trajectory ends meanwhile (the trainer aborted it).
	sctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	watched := w.watchEnd(sctx, t, stop)
	sb, err := w.startFresh(sctx, b, t, true)
	stop(nil)
	<-watched
	if errors.Is(context.Cause(sctx), errEnded) && ctx.Err() == nil {
		if sb != nil {
			_ = sb.Close(context.WithoutCancel(ctx))
		}
		w.d.Log.InfoContext(ctx, "sandbox start stopped: the trajectory ended meanwhile", "traj_id", t.ID, "seq", t.Seq)
		return nil, traj.ErrSkip
	}
	if bus.IsFatal(err) && permanentStartError(err) && !errors.Is(err, sandbox.ErrUnisolated) { // the host's doing, not the sample's
		if l, ok := wallClockInSetup(err, t.Sample.Limits.WallClock()); ok {
			return l, nil
		}
		return traj.Failed{Reason: "sandbox set-up: " + setupReason(err)}, nil
	}
	if err != nil {
		return nil, err
	}
	w.remember(t.ID, sb)
	if proxied {
		return w.proxyStart(ctx, t, sb)
	}
	return traj.Started{Owner: w.cfg.ID, Handle: sb.Handle(), Messages: msgs, Prompt: prompt}, nil
}

// errEnded stops a sandbox start whose trajectory ended meanwhile.
var errEnded = errors.New("the trajectory ended")

// endPoll is how often a sandbox start looks whether its trajectory ended.
const endPoll = time.Second

// watchEnd calls stop(errEnded) once t has ended or moved past t.Seq (an
// abort, or another delivery's commit), looking every endPoll until ctx
// ends; the returned channel closes when it returns.
func (w *Worker) watchEnd(ctx context.Context, t *traj.Trajectory, stop context.CancelCauseFunc) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(endPoll)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			now, err := w.d.Store.Load(ctx, t.ID, 0)
			switch {
			case errors.Is(err, traj.ErrNotFound):
			case err != nil:
				continue // Redis trouble: look again
			case !now.Status.Terminal() && now.Seq == t.Seq:
				continue
			}
			stop(errEnded)
			return
		}
	}()
	return done
}

// setupReason is the reason of a trajectory whose sandbox could not be
// set up, naming the setting that stopped its setup, if one did.
func setupReason(err error) string {
	var se *sandbox.SetupError
	if errors.As(err, &se) && se.Stopped == sandbox.SetupStoppedTotal {
		return fmt.Sprintf("setup did not finish within ACTLOOP_SETUP_TOTAL_TIMEOUT: %v", err)
	}
	return err.Error()
}

// wallClockInSetup is how a trajectory whose setup its own wall clock
// (limits.wall_clock_ms, wc) stopped ends: limit_exceeded naming the wall
// clock, the limit and reason the gen-worker gives when it runs out
// between turns (agent.CheckLimits), since the limit is the sample's. ok
// is false for any other start failure (ACTLOOP_SETUP_TOTAL_TIMEOUT, the
// deployment's limit, ends it failed).
func wallClockInSetup(err error, wc time.Duration) (l traj.LimitReached, ok bool) {
	var se *sandbox.SetupError
	if !errors.As(err, &se) || se.Stopped != sandbox.SetupStoppedDeadline {
		return traj.LimitReached{}, false
	}
	le := &agent.LimitError{Limit: schema.LimitWallClock, Value: wc}
	return traj.LimitReached{Limit: le.Limit,
		Reason: fmt.Sprintf("%v during setup (limits.wall_clock_ms counts from admission and covers setup): %v", le, err)}, true
}

// execStep runs the pending action and appends its observation, or moves
// the trajectory to finishing when the action submitted.
func (w *Worker) execStep(ctx context.Context, t *traj.Trajectory) (traj.Transition, error) {
	if err := w.owns(t); err != nil {
		return nil, err
	}
	if t.Sample.Flow == schema.FlowProxy {
		return w.proxyExec(ctx, t)
	}
	sb, replay, err := w.sandbox(ctx, t)
	if err != nil {
		return nil, err
	}
	started := time.Now()
	res, err := w.runAction(ctx, sb, t, replay)
	trace.SpanFromContext(ctx).SetAttributes(attribute.Int64("exec_ms", time.Since(started).Milliseconds()),
		attribute.Int("exit_code", res.ReturnCode), attribute.Bool("timed_out", res.TimedOut), attribute.Bool("truncated", res.Truncated),
		attribute.String("limit", res.Limit))
	if err != nil {
		if errors.Is(err, sandbox.ErrNotFound) {
			return nil, bus.Fatal(fmt.Errorf("sandbox lost: %w", err))
		}
		return nil, err
	}
	ran := traj.Ran{Digest: traj.ExecDigest(res.Output, res.ReturnCode), Exit: res.ReturnCode, Replaced: res.Replaced, Replay: replay}
	ag, err := w.agents.For(t.Sample.Flow)
	if err != nil {
		return nil, bus.Fatal(err)
	}
	if submitted, text := agent.HasFinished(res.Output, res.ReturnCode); submitted && !res.TimedOut {
		return traj.Submitted{Ran: ran, Closing: traj.Closing(ag, w.tmpl, agent.EndingSubmitted, text)}, nil
	}
	msg, ids, err := ag.Outcome(ag.Config.For(t.Sample.Task, t.Calls), w.tmpl, t.Action, res.Output, res.ReturnCode, res.TimedOut)
	if err != nil {
		return nil, bus.Fatal(fmt.Errorf("render observation: %w", err))
	}
	return traj.Observed{Ran: ran, Observation: traj.UserTurn{Role: msg.Role, Content: msg.Content, Tokens: ids}}, nil
}

// runAction runs t's pending action in sb, and records its outcome in
// Redis before the step commits. An outcome already recorded for this step
// (an earlier delivery ran the command, and its worker died before the
// commit) is used instead: the command does not run twice in the same
// sandbox. A sandbox just rebuilt by replay lacks the command's effects, so
// there it runs again.
func (w *Worker) runAction(ctx context.Context, sb sandbox.Sandbox, t *traj.Trajectory, replay traj.Replay) (sandbox.ExecResult, error) {
	if replay.Handle == "" {
		rec, ok, err := w.d.Store.RecordedExec(ctx, t.ID, t.Run, t.Seq)
		if err != nil {
			return sandbox.ExecResult{}, err
		}
		if ok {
			w.d.Log.WarnContext(ctx, "the command already ran and its commit was lost: its recorded outcome is used, "+
				"the command is not run again", "traj_id", t.ID, "seq", t.Seq)
			return sandbox.ExecResult{Output: rec.Output, ReturnCode: rec.ReturnCode, TimedOut: rec.TimedOut,
				Truncated: rec.Truncated, Replaced: rec.Replaced}, nil
		}
	}
	res, err := w.exec(ctx, w.backends[t.Sample.Env.Backend], sb, t.Action, t.Sample.Env.StepTimeout())
	if err != nil {
		return res, err
	}
	err = w.d.Store.RecordExec(ctx, t.ID, traj.ExecRecord{Run: t.Run, Seq: t.Seq, Output: res.Output, ReturnCode: res.ReturnCode,
		TimedOut: res.TimedOut, Truncated: res.Truncated, Replaced: res.Replaced})
	return res, err
}

// finishStep takes the diff, scores it in a fresh sandbox and by the
// reward endpoint, if any (under ACTLOOP_REWARD_ON=submitted only a
// submitted trajectory's), and removes the trajectory's sandbox.
func (w *Worker) finishStep(ctx context.Context, t *traj.Trajectory) (traj.Transition, error) {
	if err := w.owns(t); err != nil {
		return nil, err
	}
	w.stopAgent(t.ID) // a proxy-flow agent still running (a limit ended it): the diff is of what it left
	reason := t.Reason
	var diff string
	sb, replay, err := w.sandbox(ctx, t)
	var over bool
	switch {
	case err == nil:
		// Read no further than the cap: a poison trajectory's huge diff
		// must not cost the worker its size.
		if diff, over, err = sandbox.DiffCapped(ctx, sb, w.cfg.MaxDiffBytes); err != nil {
			return nil, fmt.Errorf("diff: %w", err)
		}
	case bus.IsFatal(err):
		reason += "; sandbox lost before the diff"
	default:
		return nil, err
	}
	if over {
		reason += fmt.Sprintf("; diff is over ACTLOOP_MAX_DIFF_BYTES (%d bytes): not evaluated, kept cut", w.cfg.MaxDiffBytes)
		return traj.Finished{Reason: reason, Diff: diff, Tests: missingTests(t.Sample.Env.Tests), Replay: replay}, nil
	}
	if t.ResultStatus() != schema.StatusSubmitted && w.cfg.RewardOn == RewardOnSubmitted {
		reason += "; not evaluated: only a submission is (ACTLOOP_REWARD_ON=submitted)"
		return traj.Finished{Reason: reason, Diff: diff, Replay: replay}, nil
	}
	ev, err := w.evaluate(ctx, t, diff)
	if err != nil {
		return nil, err
	}
	if ev.note != "" {
		reason += "; " + ev.note
	}
	f := traj.Finished{Reason: reason, Diff: diff, Reward: ev.reward, RewardComponents: ev.components, Tests: ev.tests,
		Replay: replay}
	if err := w.endpointReward(ctx, t, ev, &f); err != nil {
		return nil, err
	}
	return f, nil
}

// evaluation is the verdict on a trajectory. note explains a 0 that is not
// the eval's verdict; components are its JSON reward line's; tests holds
// each listed test's outcome, for samples that list tests; run is the
// eval's run, for a reward endpoint, nil when no eval ran.
type evaluation struct {
	reward     float64
	components map[string]float64
	note       string
	tests      map[string]string
	run        *schema.RewardEval
}

// missingTests gives every test of ts the outcome MISSING: the eval did not
// report them.
func missingTests(ts *schema.Tests) map[string]string {
	if ts == nil {
		return nil
	}
	m := map[string]string{}
	for _, id := range append(append([]string{}, ts.FailToPass...), ts.PassToPass...) {
		m[id] = testlog.Missing
	}
	return m
}

// evaluate runs the eval command in a fresh sandbox with diff applied and
// scores it (score): by its JSON reward line, or for a sample that lists
// tests (env.tests) by its output: reward 1 when every listed test is
// reported passed (internal/testlog); any other by the exit code: reward 1
// when it exits 0.
func (w *Worker) evaluate(ctx context.Context, t *traj.Trajectory, diff string) (evaluation, error) {
	env := t.Sample.Env
	if env.Eval == "" {
		return evaluation{note: "no eval command", tests: missingTests(env.Tests)}, nil
	}
	b, err := w.backend(t)
	if err != nil {
		return evaluation{}, err
	}
	step := trace.SpanFromContext(ctx)
	ctx, span := tracer().Start(ctx, spanEval, trace.WithAttributes(attrBackend.String(w.backendName(b))))
	ev, err := w.runEval(ctx, step, b, t, diff)
	if err == nil {
		span.SetAttributes(attrReward.Float64(ev.reward))
		if ev.note != "" {
			span.SetAttributes(attrNote.String(ev.note))
		}
	}
	endSpan(span, err)
	return ev, err
}

// runEval is evaluate's work, in its span; step is the finish step's span.
func (w *Worker) runEval(ctx context.Context, step trace.Span, b sandbox.Backend, t *traj.Trajectory, diff string) (evaluation, error) {
	env := t.Sample.Env
	// A fresh name per delivery: two deliveries of one finish may overlap.
	sb, err := w.startSandbox(ctx, b, fmt.Sprintf("%s-eval-%d", t.ID, w.evals.Add(1)), sandbox.Spec{Workspace: env.Workspace,
		Patch: diff, Setup: env.Setup, SetupTimeout: env.SetupTimeout(), SetupTotalTimeout: w.cfg.SetupTotalTimeout,
		Image: env.Image}, func() {})
	switch {
	case err == nil:
	case ctx.Err() != nil || !bus.IsFatal(err):
		return evaluation{}, err
	case permanentStartError(err):
		// The agent's diff does not apply, or setup fails with it: scored 0.
		return evaluation{note: "eval sandbox: " + setupReason(err), tests: missingTests(env.Tests)}, nil
	default:
		// No verdict: a fallback, not a reward of 0 for the agent.
		return evaluation{}, fmt.Errorf("eval: %w", err)
	}
	defer func() { _ = sb.Close(context.WithoutCancel(ctx)) }()
	started := time.Now()
	res, err := w.exec(ctx, b, sb, env.Eval, env.EvalTimeout())
	if err != nil {
		return evaluation{}, fmt.Errorf("eval: %w", err)
	}
	step.SetAttributes(attribute.Int64("eval_ms", time.Since(started).Milliseconds()),
		attribute.Int("eval_exit_code", res.ReturnCode), attribute.String("eval_limit", res.Limit))
	ev := score(env, res)
	ev.run = &schema.RewardEval{ExitCode: res.ReturnCode, TimedOut: res.TimedOut, Reward: ev.reward,
		Components: ev.components, Output: tail(res.Output, schema.MaxRewardEvalOutputBytes)}
	if res.Limit != "" && !res.TimedOut {
		// The agent's change made the eval run into a sandbox limit: the
		// verdict stands, and the reason says why.
		ev.note = joinNote(ev.note, "eval stopped by the sandbox's "+res.Limit+" limit")
	}
	return ev, nil
}

// score is the verdict of an eval that ran and gave res. A timed-out eval
// scores 0. Otherwise its JSON reward line (evalRewardLine), if it prints
// one, gives the reward and its components, whatever the exit code and the
// listed tests (whose outcomes the result still reports); a line whose
// reward is not a finite number scores 0, with a note naming the field.
// Without one, a sample that lists tests scores 1 when every one passed,
// any other 1 when the eval exits 0.
func score(env schema.Env, res sandbox.ExecResult) evaluation {
	ev := evaluation{}
	if env.Tests != nil {
		// A timed-out eval's partial output still says which tests ran.
		ev.reward, ev.tests = testlog.Score(*env.Tests, res.Output)
	}
	if res.TimedOut {
		ev.reward, ev.note = 0, "eval timed out"
		return ev
	}
	if r, ok, err := evalRewardLine(res.Output); ok {
		if err != nil {
			ev.reward, ev.note = 0, "eval's JSON reward line: "+err.Error()
			return ev
		}
		ev.reward, ev.components = r.value, r.components
		return ev
	}
	switch {
	case env.Tests != nil:
		if res.Truncated && ev.reward == 0 {
			ev.note = "eval output was cut at ACTLOOP_OUTPUT_LIMIT; tests in the cut part read as MISSING"
		}
	case res.ReturnCode == 0:
		ev.reward = 1
	}
	return ev
}

// joinNote appends note to notes, "; " between.
func joinNote(notes, note string) string {
	if notes == "" {
		return note
	}
	return notes + "; " + note
}

// sandbox returns t's sandbox, from this process or re-attached by handle
// (after a restart). A sandbox that is gone is rebuilt by replay (see
// Config.SandboxReplay; the Replay says so), or else a Fatal error.
func (w *Worker) sandbox(ctx context.Context, t *traj.Trajectory) (sandbox.Sandbox, traj.Replay, error) {
	w.mu.Lock()
	sb := w.boxes[t.ID]
	w.mu.Unlock()
	if sb != nil && sb.Handle() == t.Handle {
		return sb, traj.Replay{}, nil
	}
	b, err := w.backend(t)
	if err != nil {
		return nil, traj.Replay{}, err
	}
	sb, err = b.Attach(ctx, t.Handle)
	// Not found here: lost with its machine, or another env-worker's (the
	// trajectory moved here when that one went away).
	lost := errors.Is(err, sandbox.ErrNotFound) || errors.Is(err, sandbox.ErrInvalidHandle)
	if lost && w.cfg.SandboxReplay {
		return w.replay(ctx, b, t)
	}
	if lost {
		return nil, traj.Replay{}, bus.Fatal(fmt.Errorf("sandbox %s lost: %w", t.Handle, err))
	}
	if err != nil {
		return nil, traj.Replay{}, err
	}
	w.remember(t.ID, sb)
	return sb, traj.Replay{}, nil
}

// startFresh starts a fresh sandbox for t from its sample's spec, after
// closing any that this process or t.Handle still holds (a leftover of an
// earlier attempt, or one rebuilt before whose commit did not land). A
// creation that fails for a reason a retry may fix (quota, image pull, the
// container API) is tried again after a back-off, up to
// SandboxStartAttempts times in all; then, or at once for a failure no
// retry can fix (a setup command that fails, a bad spec), the error is
// Fatal: the trajectory ends with a fallback naming it. Setup runs within
// ACTLOOP_SETUP_TOTAL_TIMEOUT and, at the trajectory's first start
// (first), within its wall clock (limits.wall_clock_ms, from admission): a
// replay rebuilds what the trajectory had, whatever the time.
func (w *Worker) startFresh(ctx context.Context, b sandbox.Backend, t *traj.Trajectory, first bool) (sandbox.Sandbox, error) {
	env := t.Sample.Env
	spec := sandbox.Spec{Workspace: env.Workspace, Setup: env.Setup, SetupTimeout: env.SetupTimeout(),
		SetupTotalTimeout: w.cfg.SetupTotalTimeout, Image: env.Image}
	if wc := t.Sample.Limits.WallClock(); first && wc > 0 && !t.AdmittedAt.IsZero() {
		spec.SetupDeadline = t.AdmittedAt.Add(wc)
	}
	if t.Sample.Flow == schema.FlowProxy { // its agent's task, and its endpoint
		spec.Env, spec.Serve = map[string]string{"ACTLOOP_TASK": t.Sample.Task}, true
	}
	return w.startSandbox(ctx, b, t.ID, spec, func() { w.closeSandbox(ctx, t.ID, t.Handle) })
}

// startSandbox starts sandbox id, trying again as newSandbox says, in a
// sandbox.start span; before runs before each attempt.
func (w *Worker) startSandbox(ctx context.Context, b sandbox.Backend, id string, spec sandbox.Spec, before func()) (sandbox.Sandbox, error) {
	ctx, span := tracer().Start(ctx, spanStart, trace.WithAttributes(attrBackend.String(w.backendName(b)), attrID.String(id)))
	if spec.Image != "" {
		span.SetAttributes(attrImage.String(spec.Image))
	}
	sb, attempts, err := w.tryStart(ctx, b, id, spec, before)
	span.SetAttributes(attrAttempts.Int(attempts))
	endSpan(span, err)
	return sb, err
}

// tryStart is startSandbox's work; it returns the creations it tried.
func (w *Worker) tryStart(ctx context.Context, b sandbox.Backend, id string, spec sandbox.Spec, before func()) (sandbox.Sandbox, int, error) {
	if n := len(spec.Setup); n > w.cfg.SetupMaxCommands {
		w.m.startFailures.Inc()
		return nil, 0, bus.Fatal(fmt.Errorf("%w: env.setup lists %d commands, ACTLOOP_SETUP_MAX_COMMANDS allows %d",
			errSetupCount, n, w.cfg.SetupMaxCommands))
	}
	if spec.Workspace != "" && b != w.backends[schema.BackendSim] {
		private, names := w.cfg.privateDirs()
		ws, err := sandbox.ResolveWorkspace(w.cfg.WorkspaceRoots, spec.Workspace, private...)
		if err != nil {
			w.m.startFailures.Inc()
			return nil, 0, bus.Fatal(fmt.Errorf("env.workspace (allowed by ACTLOOP_WORKSPACE_ROOTS, never overlapping %s): %w",
				strings.Join(names, " or "), err))
		}
		spec.Workspace = ws
	}
	delay := w.cfg.SandboxStartBackoff
	for attempt := 1; ; attempt++ {
		before()
		sb, err := b.Start(ctx, id, spec)
		switch {
		case err == nil:
			return sb, attempt, nil
		case ctx.Err() != nil, errors.Is(err, sandbox.ErrExists):
			return nil, attempt, err // the step is handed back and tried again
		case permanentStartError(err):
			w.m.startFailures.Inc()
			return nil, attempt, bus.Fatal(err)
		case attempt >= w.cfg.SandboxStartAttempts:
			w.m.startFailures.Inc()
			return nil, attempt, bus.Fatal(fmt.Errorf("sandbox creation failed %d times: %w", attempt, err))
		}
		w.m.startRetries.Inc()
		wait := time.Duration(float64(delay) * (0.8 + 0.4*rand.Float64()))
		w.d.Log.WarnContext(ctx, "sandbox creation failed; will try again", "sandbox", id, "attempt", attempt,
			"retry_in", wait, "error", err)
		select {
		case <-ctx.Done():
			return nil, attempt, ctx.Err()
		case <-time.After(wait):
		}
		delay *= 2
	}
}

// permanentStartError reports a sandbox creation failure that no retry can
// fix: a setup command that failed, a bad id or patch, isolation or the
// workspace refused.
func permanentStartError(err error) bool {
	var se *sandbox.SetupError
	return errors.As(err, &se) || errors.Is(err, errSetupCount) || errors.Is(err, sandbox.ErrInvalidID) || errors.Is(err, sandbox.ErrPatch) ||
		errors.Is(err, sandbox.ErrUnisolated) || errors.Is(err, sandbox.ErrWorkspaceRefused) ||
		errors.Is(err, sandbox.ErrImageNotAllowed)
}

// errSetupCount is a sample with more setup commands than
// ACTLOOP_SETUP_MAX_COMMANDS allows.
var errSetupCount = errors.New("too many setup commands")

// owns returns traj.ErrSkip for a step of a trajectory that another
// env-worker owns now (the coordinator moved it while this one was gone):
// the step is the new owner's to run.
func (w *Worker) owns(t *traj.Trajectory) error {
	if t.Owner != "" && t.Owner != w.cfg.ID {
		w.d.Log.Info("step of a trajectory moved to another env-worker dropped", "traj_id", t.ID, "seq", t.Seq, "owner", t.Owner)
		return traj.ErrSkip
	}
	return nil
}

// replay rebuilds t's lost sandbox: a new one from the sample's spec, in
// which the trajectory's first t.Commands actions (those that ran) run
// again in order, each under the step timeout. Each replayed command's
// outcome is checked against the digest recorded when it first ran; the
// Replay counts those that differ (the rebuilt sandbox may not be the one
// the model saw: the result says so in diverged). The caller commits the
// new handle with its step.
func (w *Worker) replay(ctx context.Context, b sandbox.Backend, t *traj.Trajectory) (sandbox.Sandbox, traj.Replay, error) {
	full, err := w.d.Store.Load(ctx, t.ID, traj.WithMessages)
	if err != nil {
		return nil, traj.Replay{}, err
	}
	ag, err := w.agents.For(t.Sample.Flow)
	if err != nil {
		return nil, traj.Replay{}, bus.Fatal(err)
	}
	var actions []string
	// A sample's own messages open the conversation; none of their
	// assistant turns ran a command.
	for _, m := range full.Messages[min(len(t.Sample.Messages), len(full.Messages)):] {
		if m.Role != schema.RoleAssistant || len(actions) == t.Commands {
			continue
		}
		if a, err := ag.Action(ag.Config, m.Content); err == nil {
			actions = append(actions, a)
		}
	}
	if len(actions) < t.Commands {
		return nil, traj.Replay{}, bus.Fatal(fmt.Errorf("sandbox %s lost, and only %d of its %d commands can be found to replay",
			t.Handle, len(actions), t.Commands))
	}
	sb, err := w.startFresh(ctx, b, t, false)
	if err != nil {
		return nil, traj.Replay{}, fmt.Errorf("sandbox %s lost, and a new one: %w", t.Handle, err)
	}
	digests := full.CommandDigests()
	rep := traj.Replay{Handle: sb.Handle()}
	for i, a := range actions {
		res, err := w.exec(ctx, b, sb, a, t.Sample.Env.StepTimeout(), attrReplay.Bool(true))
		if err != nil {
			_ = sb.Close(context.WithoutCancel(ctx))
			return nil, traj.Replay{}, fmt.Errorf("replay command %d of %s: %w", i+1, t.ID, err)
		}
		if i < len(digests) && digests[i] != "-" && digests[i] != traj.ExecDigest(res.Output, res.ReturnCode) {
			rep.Diverged++
		}
	}
	w.replays.Add(1)
	log := w.d.Log.Warn
	if rep.Diverged > 0 {
		log = w.d.Log.Error
	}
	log("sandbox lost: rebuilt by replaying its commands", "traj_id", t.ID, "seq", t.Seq,
		"commands", len(actions), "diverged", rep.Diverged, "old_handle", t.Handle, "handle", sb.Handle())
	w.remember(t.ID, sb)
	return sb, rep, nil
}

func (w *Worker) remember(id string, sb sandbox.Sandbox) {
	w.mu.Lock()
	w.boxes[id] = sb
	w.mu.Unlock()
}

// closeSandbox removes trajectory id's sandbox: the one this process holds,
// and the one handle names if that is another; best effort.
func (w *Worker) closeSandbox(ctx context.Context, id, handle string) {
	w.stopAgent(id)
	w.mu.Lock()
	sb := w.boxes[id]
	delete(w.boxes, id)
	w.mu.Unlock()
	ctx = context.WithoutCancel(ctx)
	if sb != nil {
		if err := sb.Close(ctx); err != nil {
			w.d.Log.Warn("close sandbox", "traj_id", id, "error", err)
		}
		if sb.Handle() == handle {
			return
		}
	}
	if handle == "" {
		return
	}
	for _, b := range w.backends {
		if s, err := b.Attach(ctx, handle); err == nil {
			if err := s.Close(ctx); err != nil {
				w.d.Log.Warn("close sandbox", "traj_id", id, "handle", handle, "error", err)
			}
			return
		}
	}
}
