// Package chaos kills things under load and checks, afterwards, the promise
// actloop makes to a trainer: every sample gets exactly one result (real, or
// a fallback with a reason), no step is applied twice, and nothing is lost
// when any process dies at any moment.
//
// TestChaos starts real processes on loopback: nats-server (built from the
// nats-server module), redis-server with AOF, each service as its own
// `actloop serve` process (a coordinator with a standby, 2 gen-workers on 2
// simulated replicas, 2 env-workers, predictor-gw) and the simulators. It
// submits a seeded batch and, while it runs, injects faults on a seeded
// schedule; then it checks the invariants and writes a report.
//
// `make test` runs the short version; `make chaos` (ACTLOOP_CHAOS=full)
// the long one. ACTLOOP_CHAOS_SEED picks the schedule, ACTLOOP_CHAOS_APPENDFSYNC
// Redis's fsync policy (everysec or always).
package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/pkg/client"
	"github.com/actloop/actloop/pkg/schema"
)

// plan is a chaos run's size.
type plan struct {
	trajectories int
	faults       int           // faults injected, one every faultEvery
	faultEvery   time.Duration // between faults
	deadline     time.Duration // for every result, from the first submit
	timeScale    string        // wall seconds per simulated second, simulators and sandboxes
}

var plans = map[string]plan{
	"short": {trajectories: 40, faults: 9, faultEvery: time.Second, deadline: 5 * time.Minute, timeScale: "0.5"},
	"full":  {trajectories: 500, faults: 60, faultEvery: 2 * time.Second, deadline: 30 * time.Minute, timeScale: "0.4"},
}

const (
	ackWait     = 4 * time.Second
	leaderLease = 3 * time.Second
)

// rig is the processes of one run.
type rig struct {
	t                  *testing.T
	dir                string
	bin                string
	procs              map[string]*proc
	natsURL, redisAddr string
	coordURLs          map[string]string // coordinator name -> base URL
	nc                 *nats.Conn
	js                 jetstream.JetStream
	bodies             *client.Bodies
}

func (r *rig) add(p *proc) *proc {
	p.log = filepath.Join(r.dir, "logs", p.name+".log")
	r.procs[p.name] = p
	return p
}

func (r *rig) startAll(ctx context.Context, names ...string) {
	r.t.Helper()
	for _, n := range names {
		if err := r.procs[n].start(); err != nil {
			r.t.Fatal(err)
		}
	}
	for _, n := range names {
		if err := r.procs[n].waitReady(ctx, time.Minute); err != nil {
			r.t.Fatalf("%v (log: %s)", err, tail(r.procs[n].log))
		}
	}
}

// restart starts p again and waits until it is ready.
func (r *rig) restart(ctx context.Context, p *proc) error {
	if err := p.start(); err != nil {
		return err
	}
	return p.waitReady(ctx, time.Minute)
}

func newRig(t *testing.T, seed int64, appendfsync, timeScale string) *rig {
	redisBin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed (Debian package redis-server; CI installs it)")
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, dir: dir, procs: map[string]*proc{}, coordURLs: map[string]string{}}
	r.bin = build(t, dir, "actloop", "./cmd/actloop")
	natsBin := build(t, dir, "nats-server", "github.com/nats-io/nats-server/v2")

	natsPort := freePort(t)
	r.natsURL = fmt.Sprintf("nats://127.0.0.1:%d", natsPort)
	conf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("listen: 127.0.0.1:%d\njetstream {\n  store_dir: %q\n  sync_interval: always\n}\n",
		natsPort, filepath.Join(dir, "jetstream"))), 0o644); err != nil {
		t.Fatal(err)
	}
	r.add(&proc{name: "nats-server", bin: natsBin, args: []string{"-c", conf}, ready: tcpReady(fmt.Sprintf("127.0.0.1:%d", natsPort))})
	redisPort := freePort(t)
	r.redisAddr = fmt.Sprintf("127.0.0.1:%d", redisPort)
	r.add(&proc{name: "redis-server", bin: redisBin, args: []string{"--port", strconv.Itoa(redisPort), "--bind", "127.0.0.1",
		"--dir", dir, "--appendonly", "yes", "--appendfsync", appendfsync, "--save", "", "--protected-mode", "no"},
		ready: func(ctx context.Context) error {
			c := redis.NewClient(&redis.Options{Addr: r.redisAddr})
			defer c.Close()
			return c.Ping(ctx).Err()
		}})

	common := []string{"ACTLOOP_NATS_URL=" + r.natsURL, "ACTLOOP_REDIS_URL=redis://" + r.redisAddr + "/0",
		"ACTLOOP_ACK_WAIT=" + ackWait.String(), "ACTLOOP_PULL_WAIT=200ms", "ACTLOOP_SHUTDOWN_TIMEOUT=5s",
		"ACTLOOP_LOG_LEVEL=info", "ACTLOOP_HEARTBEAT_INTERVAL=500ms"}
	var replicas []string
	for i := range 2 {
		replica := fmt.Sprintf("r%d", i)
		replicas = append(replicas, replica)
		simAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		r.add(&proc{name: "sim-" + replica, bin: r.bin, args: []string{"sim", "--addr", simAddr, "--time-scale", timeScale,
			"--seed", strconv.FormatInt(seed+int64(i), 10), "--log-level", "warn"}, ready: httpReady("http://" + simAddr + "/health")})
		addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		r.add(&proc{name: "gen-" + replica, bin: r.bin, args: []string{"serve", "gen-worker"}, ready: httpReady("http://" + addr + "/healthz"),
			env: append(common, "ACTLOOP_REPLICA="+replica, "ACTLOOP_LLM_URL=http://"+simAddr, "ACTLOOP_SLOTS=4",
				"ACTLOOP_WORKER_ID=gen-"+replica, "ACTLOOP_GEN_WORKER_ADDR="+addr, "ACTLOOP_STEAL=true")})
	}
	for i := range 2 {
		name := fmt.Sprintf("env-%d", i)
		addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		r.add(&proc{name: name, bin: r.bin, args: []string{"serve", "env-worker"}, ready: httpReady("http://" + addr + "/healthz"),
			env: append(common, "ACTLOOP_ENV_WORKER_ID="+name, "ACTLOOP_ENV_SLOTS=8", "ACTLOOP_ENV_WORKER_ADDR="+addr,
				"ACTLOOP_SANDBOX_ROOT="+filepath.Join(dir, "sandboxes", name), "ACTLOOP_SANDBOX_ALLOW_UNISOLATED=true",
				"ACTLOOP_SIM_ENV_TIME_SCALE="+timeScale, "ACTLOOP_SIM_ENV_START_FAILURES=0.05", "ACTLOOP_SANDBOX_START_BACKOFF=100ms")})
	}
	for i := range 2 {
		name := fmt.Sprintf("coordinator-%d", i)
		addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		r.coordURLs[name] = "http://" + addr
		r.add(&proc{name: name, bin: r.bin, args: []string{"serve", "coordinator"}, ready: httpReady("http://" + addr + "/healthz"),
			env: append(common, "ACTLOOP_REPLICAS="+strings.Join(replicas, ","), "ACTLOOP_SLOTS=4", "ACTLOOP_COORDINATOR_ADDR="+addr,
				"ACTLOOP_COORDINATOR_ID="+name, "ACTLOOP_LEADER_LEASE="+leaderLease.String(), "ACTLOOP_REPLICA_TIMEOUT=5s",
				"ACTLOOP_ENV_WORKER_TIMEOUT=6s", "ACTLOOP_REPUBLISH_AFTER=15s", "ACTLOOP_POLICY=lpt")})
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	r.add(&proc{name: "predictor-gw", bin: r.bin, args: []string{"serve", "predictor-gw"}, ready: httpReady("http://" + addr + "/healthz"),
		env: append(common, "ACTLOOP_PREDICTOR_ADDR="+addr)})
	t.Cleanup(func() {
		for _, p := range r.procs {
			p.stop(10 * time.Second)
		}
		if t.Failed() {
			for name, p := range r.procs {
				t.Logf("%s log (last lines):\n%s", name, tail(p.log))
			}
		}
	})
	return r
}

// tail returns the end of a log file.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func sample(id string, turns int) schema.Sample {
	var script []string
	for i := range turns - 1 {
		script = append(script, fmt.Sprintf("```bash\necho step %d of %s\n```", i, id))
	}
	script = append(script, "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```")
	s := schema.Sample{V: schema.Version, ID: id, Task: "task " + id, Script: script,
		Env: schema.Env{Backend: schema.BackendSim, Eval: "exit 0"}, Sampling: schema.Sampling{MaxNewTokens: 4096}}
	s.Normalize()
	return s
}

// readResults reads the results stream from seq after, returning the
// results and the last sequence read.
func (r *rig) readResults(ctx context.Context, after uint64, into map[string][]schema.Result) (uint64, error) {
	s, err := r.js.Stream(ctx, schema.StreamResults)
	if err != nil {
		return after, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return after, err
	}
	for seq := after + 1; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return seq - 1, err
		}
		if m.Subject != schema.SubjectResults {
			continue
		}
		res, err := r.bodies.Decode(ctx, m.Data)
		if err != nil {
			return seq, fmt.Errorf("result at %d: %w", seq, err)
		}
		into[res.TrajID] = append(into[res.TrajID], res)
	}
	return info.State.LastSeq, nil
}

// leader returns the coordinator whose /readyz answers 200, or "".
func (r *rig) leader(ctx context.Context) string {
	for name, url := range r.coordURLs {
		if httpReady(url+"/readyz")(ctx) == nil {
			return name
		}
	}
	return ""
}

type report struct {
	Seed          int64             `json:"seed"`
	Plan          string            `json:"plan"`
	AppendFsync   string            `json:"redis_appendfsync"`
	Trajectories  int               `json:"trajectories"`
	Completed     int               `json:"completed"`
	Fallbacks     map[string]int    `json:"fallbacks_by_reason"`
	Examples      map[string]string `json:"fallback_examples"` // a reason of each kind
	Faults        map[string]int    `json:"faults"`
	Lost          int               `json:"lost"`
	Duplicated    int               `json:"duplicated"`
	Inconsistent  int               `json:"inconsistent"`
	Takeovers     []float64         `json:"standby_takeover_s"`
	Retries       int               `json:"step_retries"`
	Swallowed     int               `json:"duplicates_swallowed"`
	Republished   int               `json:"republished"`
	Moved         int               `json:"moved"`
	SandboxReplay int               `json:"sandbox_replays"`
	Syncs         int               `json:"weight_syncs"`
	WallS         float64           `json:"wall_s"`
}

func TestChaos(t *testing.T) {
	name := os.Getenv("ACTLOOP_CHAOS")
	if name == "" {
		name = "short"
	}
	p, ok := plans[name]
	if !ok {
		t.Fatalf("ACTLOOP_CHAOS=%q: want short or full", name)
	}
	if n, err := strconv.Atoi(os.Getenv("ACTLOOP_CHAOS_TRAJECTORIES")); err == nil && n > 0 {
		p.trajectories = n
	}
	seed := int64(1)
	if s, err := strconv.ParseInt(os.Getenv("ACTLOOP_CHAOS_SEED"), 10, 64); err == nil {
		seed = s
	}
	appendfsync := cmpOr(os.Getenv("ACTLOOP_CHAOS_APPENDFSYNC"), "everysec")
	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	rep := report{Seed: seed, Plan: name, AppendFsync: appendfsync, Trajectories: p.trajectories,
		Fallbacks: map[string]int{}, Faults: map[string]int{}, Examples: map[string]string{}}

	r := newRig(t, seed, appendfsync, p.timeScale)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.startAll(ctx, "nats-server", "redis-server")
	r.startAll(ctx, "sim-r0", "sim-r1", "coordinator-0")
	r.startAll(ctx, "coordinator-1", "gen-r0", "gen-r1", "env-0", "env-1", "predictor-gw")
	nc, err := nats.Connect(r.natsURL, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	r.nc = nc
	if r.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	r.bodies = client.NewBodies(r.js)

	start := time.Now()
	ids := map[string]bool{}
	pub := bus.NewPublisher(r.js)
	for i := range p.trajectories {
		s := sample(fmt.Sprintf("chaos-%04d", i), 2+rng.IntN(5))
		ids[s.ID] = true
		for {
			if err := pub.Publish(ctx, schema.SubjectSamples, s.ID, s); err == nil {
				break
			} else if time.Since(start) > time.Minute {
				t.Fatalf("submit %s: %v", s.ID, err)
			}
		}
	}

	results := map[string][]schema.Result{}
	var seq uint64
	done := func() bool {
		if n, err := r.readResults(ctx, seq, results); err == nil {
			seq = n
		}
		n := 0
		for id := range ids {
			if len(results[id]) > 0 {
				n++
			}
		}
		return n == len(ids)
	}

	// Faults, one every faultEvery, while the batch runs.
	kinds := []string{"kill-gen", "kill-env", "kill-coordinator", "kill-predictor", "stop-worker", "restart-nats",
		"restart-redis", "weight-sync", "cut-inference"}
	version := int64(0)
	for i := 0; i < p.faults && !done(); i++ {
		time.Sleep(p.faultEvery) // the schedule's pace, not a wait for a condition
		kind := kinds[rng.IntN(len(kinds))]
		if i < len(kinds) {
			kind = kinds[i] // every kind at least once
		}
		rep.Faults[kind]++
		t.Logf("%5.1fs fault %d: %s", time.Since(start).Seconds(), i+1, kind)
		if err := r.inject(ctx, kind, rng, &version, &rep); err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
	}
	testkit.Eventually(t, p.deadline-time.Since(start), "every sample to have a result", done)
	rep.WallS = time.Since(start).Seconds()

	// The invariants.
	tmpl, err := tokenize.Chat{Tokenizer: tokenize.TokenizerQwen, ChatTemplate: tokenize.TemplateChatML}.Template()
	if err != nil {
		t.Fatal(err)
	}
	for id := range results {
		if !ids[id] {
			t.Errorf("a result for %s, which no sample named", id)
		}
	}
	for id := range ids {
		rs := results[id]
		switch {
		case len(rs) == 0:
			rep.Lost++
			t.Errorf("%s: no result", id)
			continue
		case len(rs) > 1:
			rep.Duplicated++
			t.Errorf("%s: %d results", id, len(rs))
		}
		res := rs[0]
		switch res.Status {
		case schema.StatusCompleted:
			rep.Completed++
			if err := testkit.Consistent(tmpl, res); err != nil {
				rep.Inconsistent++
				t.Errorf("inconsistent: %v", err)
			}
		case schema.StatusFallback:
			reason := res.Reason
			if reason == "" {
				t.Errorf("%s: a fallback without a reason", id)
			}
			rep.Fallbacks[fallbackKind(reason)]++
			rep.Examples[fallbackKind(reason)] = reason
		default:
			t.Errorf("%s: status %q", id, res.Status)
		}
	}
	r.countLogs(&rep)
	b, _ := json.MarshalIndent(rep, "", "  ")
	t.Logf("chaos report:\n%s", b)
	if err := os.WriteFile(filepath.Join(t.ArtifactDir(), "chaos-report.json"), append(b, '\n'), 0o644); err != nil {
		t.Error(err)
	}
}

// fallbackKind is the first words of a fallback's reason, for the report.
func fallbackKind(reason string) string {
	for _, k := range []string{"sandbox creation failed", "eval:", "stalled", "rejected", "limits"} {
		if strings.Contains(reason, k) {
			return strings.TrimSuffix(k, ":")
		}
	}
	if i := strings.Index(reason, ": "); i > 0 && i < 60 {
		return reason[:i]
	}
	return reason
}

// countLogs counts, across every service's log (all its lives), what the
// recovery machinery did.
func (r *rig) countLogs(rep *report) {
	for _, p := range r.procs {
		b, _ := os.ReadFile(p.log)
		s := string(b)
		rep.Retries += strings.Count(s, `"msg":"step failed; will retry"`)
		rep.Swallowed += strings.Count(s, `"msg":"duplicate delivery swallowed: step already applied"`)
		rep.Republished += strings.Count(s, `"msg":"no progress: publishing the pending step again"`)
		rep.Moved += strings.Count(s, `"msg":"env-worker gone: moving its trajectory"`)
		rep.SandboxReplay += strings.Count(s, `"msg":"sandbox lost: rebuilt by replaying its commands"`)
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// inject carries out one fault and returns once the system is whole again
// (the process restarted and ready), or the fault's window is over.
func (r *rig) inject(ctx context.Context, kind string, rng *rand.Rand, version *int64, rep *report) error {
	pick := func(names ...string) *proc { return r.procs[names[rng.IntN(len(names))]] }
	switch kind {
	case "kill-gen", "kill-env", "kill-predictor":
		p := map[string]func() *proc{
			"kill-gen":       func() *proc { return pick("gen-r0", "gen-r1") },
			"kill-env":       func() *proc { return pick("env-0", "env-1") },
			"kill-predictor": func() *proc { return r.procs["predictor-gw"] },
		}[kind]()
		p.kill()
		return r.restart(ctx, p)
	case "kill-coordinator":
		leader := r.leader(ctx)
		if leader == "" {
			return nil // between leaders: nothing to kill
		}
		killed := time.Now()
		r.procs[leader].kill()
		var next string
		deadline := time.Now().Add(10 * leaderLease)
		for next == "" || next == leader {
			if time.Now().After(deadline) {
				return fmt.Errorf("no coordinator took over within %v", 10*leaderLease)
			}
			time.Sleep(50 * time.Millisecond) // polling the standby's /readyz
			next = r.leader(ctx)
		}
		took := time.Since(killed)
		rep.Takeovers = append(rep.Takeovers, took.Seconds())
		if took > 3*leaderLease {
			r.t.Errorf("the standby took over after %v, more than 3 leases (%v)", took, leaderLease)
		}
		return r.restart(ctx, r.procs[leader])
	case "stop-worker":
		p := pick("gen-r0", "gen-r1", "env-0", "env-1")
		p.signal(syscall.SIGSTOP)
		time.Sleep(ackWait + time.Second) // longer than AckWait: its steps are redelivered elsewhere
		p.signal(syscall.SIGCONT)
		return nil
	case "restart-nats", "restart-redis":
		p := r.procs[strings.TrimPrefix(kind, "restart-")+"-server"]
		p.kill()
		return r.restart(ctx, p)
	case "weight-sync":
		rep.Syncs++
		if _, err := r.nc.Request(schema.SubjectControlPause, []byte(`{"timeout_ms":10000}`), 20*time.Second); err != nil {
			r.t.Logf("pause: %v (tolerated: the trainer would ask again)", err)
		}
		*version++
		b, _ := json.Marshal(schema.ResumeRequest{WeightVersion: version})
		for attempt := 0; ; attempt++ {
			msg, err := r.nc.Request(schema.SubjectControlResume, b, 20*time.Second)
			if err == nil && !strings.Contains(string(msg.Data), `"error"`) {
				return nil
			}
			if attempt == 20 {
				return fmt.Errorf("resume: %v %s", err, msgData(msg))
			}
			time.Sleep(500 * time.Millisecond) // a coordinator may be between terms
		}
	case "cut-inference":
		p := pick("sim-r0", "sim-r1")
		p.kill()
		time.Sleep(3 * time.Second) // the replica is down meanwhile
		return r.restart(ctx, p)
	}
	return fmt.Errorf("unknown fault %q", kind)
}

func msgData(m *nats.Msg) string {
	if m == nil {
		return ""
	}
	return string(m.Data)
}
