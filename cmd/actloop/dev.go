package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/actloop/actloop/internal/bench"
	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/demo"
	"github.com/actloop/actloop/internal/devstack"
	"github.com/actloop/actloop/internal/envworker"
	"github.com/actloop/actloop/internal/gateway"
	"github.com/actloop/actloop/internal/localnats"
	"github.com/actloop/actloop/internal/localredis"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/sim"
	"github.com/actloop/actloop/internal/telemetry"
	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/pkg/client"
	"github.com/actloop/actloop/pkg/llm"
	"github.com/actloop/actloop/pkg/sandbox"
	"github.com/actloop/actloop/pkg/schema"
)

// devSummary is the last line of `actloop dev --json`.
type devSummary struct {
	Trajectories int     `json:"trajectories"`
	Completed    int     `json:"completed"`
	Fallback     int     `json:"fallback"`
	Solved       int     `json:"solved"`
	GenSteps     int     `json:"gen_steps"`
	EnvSteps     int     `json:"env_steps"`
	GenTokens    int     `json:"gen_tokens"`
	WallS        float64 `json:"wall_s"`
	Replicas     int     `json:"replicas"`
	Redis        string  `json:"redis"`
	// With --weight-sync-every: pauses done, the slowest pause, the
	// generations aborted and their output kept.
	WeightSyncs int     `json:"weight_syncs,omitempty"`
	PauseMaxMS  float64 `json:"pause_max_ms,omitempty"`
	Aborted     int     `json:"aborted,omitempty"`
	KeptTokens  int64   `json:"kept_tokens,omitempty"`
	MaxVersion  int32   `json:"max_version,omitempty"`
}

// syncLoop plays a trainer that updates the weights every period: pause
// (abort), flush every simulator's prefix cache (new weights invalidate
// it), resume with the next version; until ctx ends.
func syncLoop(ctx context.Context, c *client.Client, sims map[string]string, period time.Duration, sum *devSummary, log *slog.Logger) error {
	t := time.NewTicker(period)
	defer t.Stop()
	version := int64(0)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		reply, err := c.Pause(ctx, schema.PauseRequest{Mode: schema.PauseAbort})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("weight sync: %w", err)
		}
		for name, url := range sims {
			if err := bench.FlushCache(ctx, url); err != nil {
				log.Warn("flush simulator cache", "replica", name, "error", err)
			}
		}
		version++
		if _, err := c.Resume(ctx, &version); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("weight sync: %w", err)
		}
		sum.WeightSyncs++
		sum.PauseMaxMS = max(sum.PauseMaxMS, reply.WaitedMS)
		sum.Aborted += reply.Aborted
		sum.KeptTokens += reply.KeptTokens
		log.Info("weight sync", "version", version, "pause_ms", reply.WaitedMS, "aborted", reply.Aborted, "kept_tokens", reply.KeptTokens)
	}
}

// devOptions are `actloop dev`'s flags.
type devOptions struct {
	tasks, replicas, slots, envSlots int
	asJSON, serve                    bool
	redisKind, dir, addr, natsSync   string
	gatewayAddr                      string
	timeScale                        float64
	syncEvery                        time.Duration
	// llmURLs, when set, are the user's inference servers (one per
	// replica), spoken to in llmAPI, in place of the simulators.
	llmURLs          []string
	llmAPI, llmModel string
	modelDir         string
	replicasSet      bool // --replicas was given
	// agent, when set, is the demo batch's own agent (the proxy flow),
	// its files made absolute; agentFiles are those files, mounted
	// read-only in the sandboxes.
	agent      string
	agentFiles []string
}

func newDevCmd() *cobra.Command {
	var o devOptions
	cmd := &cobra.Command{
		Use:   "dev [flags]",
		Short: "Run everything in one process and drive a demo batch through it",
		Long: `Run NATS, Redis, the inference simulator and all four services (coordinator,
gen-workers, env-worker, predictor-gw) in one process, and drive a demo batch
of coding tasks through them: a progress bar, then a summary (--json: one JSON
object on the last line). Fails if a demo task is not solved; the state
directory, with its log, is then kept.

With --weight-sync-every it also plays a trainer that pauses, updates the
weights and resumes that often. With --serve it runs no demo batch: it keeps
the stack up, with the HTTP trainer API (the gateway), until interrupted, and
writes the addresses and credentials a trainer needs to actloop.env in its
state directory.

With --llm-url it runs the demo batch against your inference servers instead
of the simulators (one URL per replica, comma-separated), in the API
--llm-api names: sglang (SGLang's /generate) or openai (vLLM's
/v1/completions). The demo's scripted replies are not sent: the model writes
its own, so unsolved tasks are reported, not an error. Give the workers the
served model's tokenizer and chat template with --model (a model directory
with its tokenizer.json and tokenizer_config.json, as ACTLOOP_MODEL_DIR) or
ACTLOOP_TOKENIZER and ACTLOOP_CHAT_TEMPLATE: each gen-worker checks its
tokenization against the server's at start and refuses to run on a
mismatch.

With --agent it runs the demo batch with your own agent instead of the
built-in one (the proxy flow, docs/agent.md): the command runs in each
trajectory's sandbox with OPENAI_BASE_URL, OPENAI_API_KEY and ACTLOOP_TASK
set, and each of its calls is one generation step. A word of the command
that names a file here (a script) is made absolute and the file mounted
read-only in the sandboxes. examples/proxy_agent.py is such an agent.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.replicasSet = cmd.Flags().Changed("replicas")
			return runDev(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.tasks, "tasks", 6, "demo trajectories to run")
	f.BoolVar(&o.asJSON, "json", false, "end with one JSON object on the last line instead of the summary")
	f.IntVar(&o.replicas, "replicas", 2, "inference replicas (one simulator and gen-worker each)")
	f.IntVar(&o.slots, "slots", 4, "generation slots per replica")
	f.IntVar(&o.envSlots, "env-slots", 8, "concurrent env steps")
	f.StringVar(&o.redisKind, "redis", "auto", "auto (redis-server from PATH, else in-process), redis-server or in-process")
	f.StringVar(&o.dir, "dir", "", "state directory (default: a temporary one, removed at exit)")
	f.StringVar(&o.addr, "addr", "127.0.0.1:8080", "coordinator status address (a free port if taken)")
	f.Float64Var(&o.timeScale, "time-scale", 0.02, "simulator wall seconds per simulated second")
	f.DurationVar(&o.syncEvery, "weight-sync-every", 0, "pause, update the weights and resume this often (0: never)")
	f.BoolVar(&o.serve, "serve", false, "run no demo batch: keep the stack up, with the HTTP trainer API (the gateway), until interrupted, for a trainer to use")
	f.StringVar(&o.gatewayAddr, "gateway-addr", "127.0.0.1:8084", "with --serve, the gateway's address (a free port if taken)")
	f.StringSliceVar(&o.llmURLs, "llm-url", nil, "your inference servers, one per replica (comma-separated), instead of the simulators")
	f.StringVar(&o.llmAPI, "llm-api", string(llm.APISGLang), "with --llm-url, the API they speak: sglang or openai (vLLM)")
	f.StringVar(&o.llmModel, "llm-model", "", "with --llm-url and --llm-api openai, the model of each request (default: the server's)")
	f.StringVar(&o.modelDir, "model", "", "the served model's directory (tokenizer.json, tokenizer_config.json), as ACTLOOP_MODEL_DIR")
	f.StringVar(&o.agent, "agent", "", "run the demo batch with this agent command in each sandbox (the proxy flow), e.g. 'python3 examples/proxy_agent.py'")
	f.StringVar(&o.natsSync, "nats-sync", "", "how the embedded NATS server's JetStream store syncs to disk: always (every write), or an interval (default: the server's, 2m; an OS crash or power loss can lose messages acknowledged since the last sync)")
	return cmd
}

func runDev(ctx context.Context, o devOptions, stdout, stderr io.Writer) (err error) {
	if o.syncEvery < 0 {
		return usageError(errors.New("dev: --weight-sync-every: must be >= 0"))
	}
	nsync, err := localnats.ParseSync(o.natsSync)
	if err != nil {
		return usageError(fmt.Errorf("dev: --nats-sync: %w", err))
	}
	if o.tasks < 1 {
		return usageError(errors.New("dev: --tasks: must be >= 1"))
	}
	if err := o.checkLLM(); err != nil {
		return usageError(err)
	}
	if err := o.checkAgent(); err != nil {
		return usageError(err)
	}
	kind := o.redisKind
	switch kind {
	case "auto":
		kind = ""
	case localredis.KindReal, localredis.KindInProcess:
	default:
		return usageError(fmt.Errorf("dev: --redis: %q: want auto, %s or %s", kind, localredis.KindReal, localredis.KindInProcess))
	}
	common := service.CommonDefaults()
	if err := envconfig.Process("ACTLOOP", &common); err != nil {
		return fmt.Errorf("settings: %w", err)
	}
	if err := common.Validate(); err != nil {
		return fmt.Errorf("settings: %w", err)
	}
	var chat tokenize.Chat // ACTLOOP_MODEL_DIR, ACTLOOP_TOKENIZER, ACTLOOP_CHAT_TEMPLATE, as the services read them
	if err := envconfig.Process("ACTLOOP", &chat); err != nil {
		return fmt.Errorf("settings: %w", err)
	}
	if o.modelDir != "" {
		chat.ModelDir = o.modelDir
	}
	var reward envworker.Reward // ACTLOOP_REWARD_*, as the env-workers read them
	if err := envconfig.Process("ACTLOOP", &reward); err != nil {
		return fmt.Errorf("settings: %w", err)
	}
	if o.dir == "" {
		d, err := os.MkdirTemp("", "actloop-dev-")
		if err != nil {
			return err
		}
		// Kept when the run fails, so its logs can be read.
		defer func() {
			if err == nil {
				_ = os.RemoveAll(d)
			}
		}()
		o.dir = d
	}
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return err
	}
	// Under bwrap, run as root, sandbox commands run as an unprivileged
	// user, who must reach the sandboxes under the state directory.
	if err := os.Chmod(o.dir, 0o755); err != nil {
		return err
	}
	if err := sandbox.ProbeBwrap(); err != nil {
		fmt.Fprintf(stderr, "actloop dev: WARNING: bubblewrap isolation unavailable (%v);\n"+
			"actloop dev: WARNING: the demo's sandbox commands run UNISOLATED on this host. Install bubblewrap to isolate them.\n", err)
	}
	logPath := filepath.Join(o.dir, "actloop-dev.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	log := service.NewLogger(logFile, common.LogLevel)
	// Tracing as the standard OTEL_* variables say; OTEL_TRACES_EXPORTER=console
	// writes the spans to the log file, not the terminal.
	shutdownTel, err := telemetry.Setup(ctx, "actloop-dev", logFile)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = shutdownTel(sctx)
	}()
	// Bound here, not probed and bound again later, so that actloop.env
	// names the address the coordinator serves on: --addr, or a free port
	// when that is taken (by anything, which must not get the API token).
	coordLn, err := net.Listen("tcp", o.addr)
	if err != nil {
		if coordLn, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return fmt.Errorf("dev: coordinator: %w", err)
		}
	}
	defer coordLn.Close() // closed already once served on

	start := time.Now()
	svcCtx, stop := context.WithCancel(ctx)
	defer stop()
	st, err := devstack.StartInfra(svcCtx, devstack.Options{Dir: o.dir, RedisKind: kind, Replicas: o.replicas,
		Slots: o.slots, EnvSlots: o.envSlots, Sim: sim.Config{TimeScale: o.timeScale}, Common: common,
		ModelDir: chat.ModelDir, Tokenizer: chat.Tokenizer, ChatTemplate: chat.ChatTemplate,
		LLMURLs: o.llmURLs, LLMAPI: llm.API(o.llmAPI), LLMModel: o.llmModel,
		CoordinatorAddr: coordLn.Addr().String(), CoordinatorListener: coordLn,
		AgentConfig: os.Getenv("ACTLOOP_AGENT_CONFIG"), ReadOnlyBinds: o.agentFiles, NATSSync: nsync, Log: log, LeastPrivilege: true, Reward: &reward})
	if err != nil {
		return err
	}
	defer st.Close()
	defer func() {
		stop()
		if werr := st.Wait(); werr != nil {
			log.Error("services", "error", werr)
		}
	}()
	if _, err := st.StartAll(svcCtx); err != nil {
		return err
	}
	ws, err := demo.Workspace(o.dir)
	if err != nil {
		return err
	}
	envPath, err := writeDevEnv(o.dir, st.TrainerEnv(), devEnvRequired...)
	if err != nil {
		return err
	}
	// The demo's trainer logs in as the CLI does, with its permissions.
	nc, js, err := devTrainer(ctx, st.TrainerCommon())
	if err != nil {
		return err
	}
	defer nc.Close()
	if o.serve {
		return serveDev(ctx, o, st, log, stderr)
	}
	if !o.asJSON {
		fmt.Fprintf(stderr, "actloop dev: NATS %s, Redis %s (%s), %d replicas x %d slots, logs in %s\n",
			st.NATS.ClientURL(), st.Redis.Addr, st.Redis.Kind, o.replicas, o.slots, logPath)
		if len(o.llmURLs) > 0 {
			fmt.Fprintf(stderr, "actloop dev: inference on your servers (%s): %s\n", o.llmAPI, strings.Join(o.llmURLs, ", "))
		}
		fmt.Fprintf(stderr, "actloop dev: every server wants credentials, generated for this run; the CLI's (NATS user %s, the API token) are in\n"+
			"actloop dev:   . %s\n", devstack.TrainerUser, envPath)
	}
	pub := bus.NewPublisher(js)
	samples := demo.Samples(o.tasks, ws, "demo")
	for i := range samples {
		if len(o.llmURLs) > 0 {
			samples[i].Script = nil // the model's own replies, not the simulator's script
		}
		if o.agent != "" {
			samples[i].Flow, samples[i].Agent = schema.FlowProxy, &schema.Agent{Command: o.agent}
		}
	}
	for _, s := range samples {
		if err := pub.Publish(ctx, schema.SubjectSamples, s.ID, s); err != nil {
			return err
		}
	}
	sum := devSummary{Trajectories: len(samples), Replicas: o.replicas, Redis: st.Redis.Kind}
	syncCtx, stopSync := context.WithCancel(ctx)
	// A service that stops with an error (a gen-worker refusing its
	// server's tokenizer) ends the run with that error.
	go func() {
		select {
		case <-st.Failed():
			stopSync()
		case <-syncCtx.Done():
		}
	}()
	syncErr := make(chan error, 1)
	if o.syncEvery > 0 {
		c, err := client.New(nc)
		if err != nil {
			stopSync()
			return err
		}
		go func() { syncErr <- syncLoop(syncCtx, c, st.SimURLs, o.syncEvery, &sum, log) }()
	} else {
		syncErr <- nil
	}
	results, err := devResults(syncCtx, nc, len(samples), func(done int) {
		if !o.asJSON {
			progress(stderr, done, len(samples), time.Since(start))
		}
	})
	stopSync()
	select {
	case <-st.Failed():
		stop()
		return st.Wait()
	default:
	}
	if serr := <-syncErr; serr != nil {
		return serr
	}
	if err != nil {
		return err
	}
	sum.WallS = time.Since(start).Seconds()
	for _, r := range results {
		if schema.Trainable(r.Status) {
			sum.Completed++
		} else {
			sum.Fallback++
			log.Warn("result without a run to its end", "traj_id", r.TrajID, "status", r.Status, "reason", r.Reason)
		}
		if r.Solved() {
			sum.Solved++
		}
		sum.GenSteps += r.Turns
		sum.EnvSteps += r.Commands
		sum.GenTokens += r.GenTokens
		sum.MaxVersion = max(sum.MaxVersion, r.MaxVersion)
	}
	if o.asJSON {
		b, _ := json.Marshal(sum)
		fmt.Fprintln(stdout, string(b))
	} else {
		fmt.Fprintf(stderr, "\n")
		fmt.Fprintf(stdout, "%d trajectories: %d completed, %d fallback, %d solved; %d gen steps, %d env steps, %d generated tokens in %.1fs\n",
			sum.Trajectories, sum.Completed, sum.Fallback, sum.Solved, sum.GenSteps, sum.EnvSteps, sum.GenTokens, sum.WallS)
		if sum.WeightSyncs > 0 {
			fmt.Fprintf(stdout, "%d weight syncs (slowest pause %.1f ms): %d generations aborted, %d tokens kept and resumed; newest weight version %d\n",
				sum.WeightSyncs, sum.PauseMaxMS, sum.Aborted, sum.KeptTokens, sum.MaxVersion)
		}
	}
	// Every client ran with docs/security.md's permissions and no more.
	if v := st.Violations(); len(v) > 0 {
		return fmt.Errorf("permission violations, NATS's or Redis's (docs/security.md's tables are short of what a client does):\n%s", strings.Join(v, "\n"))
	}
	if sum.Solved < sum.Trajectories && len(o.llmURLs) == 0 {
		return fmt.Errorf("%d of %d demo tasks not solved (see %s)", sum.Trajectories-sum.Solved, sum.Trajectories, logPath)
	}
	return nil
}

// checkLLM checks the inference-server flags and sets the replicas to
// the servers' number.
func (o *devOptions) checkLLM() error {
	if len(o.llmURLs) == 0 {
		if o.llmModel != "" {
			return errors.New("dev: --llm-model: only with --llm-url")
		}
		return nil
	}
	if !llm.API(o.llmAPI).Valid() {
		return fmt.Errorf("dev: --llm-api: %q: want %s or %s", o.llmAPI, llm.APISGLang, llm.APIOpenAI)
	}
	for _, u := range o.llmURLs {
		if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return fmt.Errorf("dev: --llm-url: %q: want http://host:port", u)
		}
	}
	if o.replicasSet && o.replicas != len(o.llmURLs) {
		return fmt.Errorf("dev: --replicas %d with %d --llm-url servers: one replica per server", o.replicas, len(o.llmURLs))
	}
	o.replicas = len(o.llmURLs)
	return nil
}

// checkAgent checks --agent and makes the files it names absolute: a
// word of the command that names a regular file here becomes its absolute
// path, to be mounted read-only in the sandboxes.
func (o *devOptions) checkAgent() error {
	if o.agent == "" {
		return nil
	}
	if o.serve {
		return errors.New("dev: --agent: not with --serve (a served stack runs the samples a trainer sends, each naming its agent)")
	}
	if strings.TrimSpace(o.agent) == "" {
		return errors.New("dev: --agent: an empty command")
	}
	var err error
	o.agent = word.ReplaceAllStringFunc(o.agent, func(w string) string {
		fi, serr := os.Stat(w)
		if serr != nil || !fi.Mode().IsRegular() || err != nil {
			return w
		}
		abs, aerr := filepath.Abs(w)
		switch {
		case aerr != nil:
			err = fmt.Errorf("dev: --agent: %s: %w", w, aerr)
		case strings.ContainsAny(abs, " \t\n'\"\\$`"):
			err = fmt.Errorf("dev: --agent: %s: its absolute path %q holds characters a command line would need to quote", w, abs)
		default:
			o.agentFiles = append(o.agentFiles, abs)
			return abs
		}
		return w
	})
	return err
}

// word is a word of a command line, as checkAgent reads it: what lies
// between white space (the rest of the line is left as written).
var word = regexp.MustCompile(`\S+`)

// serveDev keeps the stack up until ctx ends, with a gateway (the HTTP
// trainer API) logged in to NATS as its own user, and writes its address
// and the API token beside the CLI's settings.
func serveDev(ctx context.Context, o devOptions, st *devstack.Stack, log *slog.Logger, stderr io.Writer) error {
	l, err := net.Listen("tcp", o.gatewayAddr)
	if err != nil {
		if l, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return fmt.Errorf("dev: gateway: %w", err)
		}
	}
	coordURL := st.CoordinatorURL()
	if coordURL == "" {
		_ = l.Close()
		return errors.New("dev: the coordinator serves no HTTP API: the gateway and actloop.env would lack ACTLOOP_COORDINATOR_URL")
	}
	gcfg := gateway.Config{Common: st.GatewayCommon(), APIToken: st.Creds.APIToken, CoordinatorURL: coordURL,
		MaxWait: time.Minute, MaxBatch: 256}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- gateway.Serve(sctx, gcfg, l, log.With("service", gateway.Name)) }()
	url := devstack.URLOf(l.Addr())
	envPath, err := writeDevEnv(o.dir, append(st.TrainerEnv(), "ACTLOOP_GATEWAY_URL="+url),
		append(devEnvRequired, "ACTLOOP_GATEWAY_URL")...)
	if err != nil {
		stop()
		return errors.Join(err, <-served)
	}
	fmt.Fprintf(stderr, "actloop dev: serving until interrupted (Ctrl-C); the HTTP trainer API (gateway) at %s\n"+
		"actloop dev: its token and the CLI's settings (ACTLOOP_GATEWAY_URL, ACTLOOP_API_TOKEN, ...):\n"+
		"actloop dev:   . %s\n", url, envPath)
	select {
	case <-ctx.Done():
		return <-served
	case err := <-served:
		return err
	case <-st.Failed(): // a service stopped: a gen-worker refusing its server, say
		stop()
		return errors.Join(<-served, st.Wait())
	}
}

// devEnvFile is the file under the state directory of `actloop dev` with
// the CLI's settings for the running stack.
const devEnvFile = "actloop.env"

// devEnvRequired are the settings actloop.env always holds: without
// ACTLOOP_COORDINATOR_URL the CLI would ask its default address, where any
// program may listen, so `actloop dev` fails rather than write a file
// without it.
var devEnvRequired = []string{"ACTLOOP_NATS_URL", "ACTLOOP_COORDINATOR_URL", "ACTLOOP_API_TOKEN"}

// writeDevEnv writes env (KEY=value lines) under dir as a shell script of
// export lines that only the user can read, and returns its path. It
// writes nothing if a required key is missing or empty.
func writeDevEnv(dir string, env []string, required ...string) (string, error) {
	var b strings.Builder
	b.WriteString("# The actloop CLI's settings for the running `actloop dev` (secrets: generated for this run).\n")
	set := map[string]bool{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		set[k] = v != ""
		fmt.Fprintf(&b, "export %s='%s'\n", k, strings.ReplaceAll(v, "'", `'\''`))
	}
	var missing []string
	for _, k := range required {
		if !set[k] {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("dev: %s not known: not writing %s without it", strings.Join(missing, ", "), devEnvFile)
	}
	path := filepath.Join(dir, devEnvFile)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return "", err
	}
	_, err = f.WriteString(b.String())
	return path, errors.Join(err, f.Chmod(0o600), f.Close())
}

// devTrainer connects to the stack as the CLI does (connect): the trainer's
// NATS user, the missing streams created.
func devTrainer(ctx context.Context, common service.Common) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := common.ConnectNATS("dev-trainer")
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err == nil {
		err = common.Topology().CreateStreams(ctx, js)
	}
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// devResults reads n distinct results' heads as a trainer does, with the
// CLI's permissions: a durable consumer of its own ("dev"), acknowledging
// each. tick is called with the count so far.
func devResults(ctx context.Context, nc *nats.Conn, n int, tick func(done int)) (map[string]schema.ResultHead, error) {
	c, err := client.New(nc)
	if err != nil {
		return nil, err
	}
	cons, err := c.Results(ctx, "dev")
	if err != nil {
		return nil, err
	}
	out := map[string]schema.ResultHead{}
	tick(0)
	for len(out) < n {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for d, err := range cons.Fetch(ctx, n-len(out), time.Second) {
			if err != nil {
				break // nothing within the wait, or a hiccup: ask again
			}
			h, err := d.Head()
			if err != nil {
				return nil, fmt.Errorf("result: %w", err)
			}
			if err := d.Ack(ctx); err != nil {
				return nil, err
			}
			out[h.TrajID] = h
			tick(len(out))
		}
	}
	return out, nil
}

// progress draws a one-line progress bar.
func progress(w io.Writer, done, total int, elapsed time.Duration) {
	const width = 30
	fill := done * width / total
	fmt.Fprintf(w, "\r[%s%s] %d/%d trajectories  %.1fs", strings.Repeat("#", fill), strings.Repeat(".", width-fill),
		done, total, elapsed.Seconds())
}
