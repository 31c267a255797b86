// Package chaos kills things under load and checks, afterwards, the promise
// actloop makes to a trainer: every sample gets exactly one result (real, or
// a fallback with a reason), no step is applied twice, and nothing is lost
// when any process dies at any moment.
//
// TestChaos starts real processes on loopback: a 3-node JetStream cluster
// of nats-server (built from the nats-server module, with its default
// max_payload of 1 MiB; every stream replicated three times), redis-server
// with AOF, each service as its own
// `actloop serve` process (a coordinator with a standby, 2 gen-workers on 2
// simulated replicas, 2 env-workers, predictor-gw) and the simulators. It
// submits a seeded batch — some trajectories of over 100k tokens with a
// diff of ~800 KB, some with a diff of ~4 MB (over ACTLOOP_MAX_DIFF_BYTES),
// some with a step longer than ACTLOOP_REPUBLISH_AFTER — and, while it runs, injects
// faults on a seeded schedule, each kind at least once: processes killed or stopped (the leader
// coordinator stopped past its lease included), a NATS node and Redis restarted (and a NATS node with the leader at once),
// weight syncs, an inference server cut off, a running trajectory's Redis
// state deleted, poison samples of every size. Then it checks the
// invariants, from evidence outside the system's own counters (the results
// stream, each trajectory's audit log in Redis), and writes a report.
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
	"slices"
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
	"short": {trajectories: 40, faults: 13, faultEvery: time.Second, deadline: 5 * time.Minute, timeScale: "0.5"},
	"full":  {trajectories: 500, faults: 60, faultEvery: 2 * time.Second, deadline: 30 * time.Minute, timeScale: "0.4"},
}

const (
	natsNodes   = 3
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
	rdb                *redis.Client
	// gaps are the results stream's sequences that a read did not find
	// (readResults goes past them), for a timeout's report.
	gaps []uint64
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

	// A 3-node JetStream cluster: every stream and bucket has 3 replicas
	// (ACTLOOP_STREAM_REPLICAS=3), and each service connects to all three.
	var clientPorts, routePorts []int
	for range natsNodes {
		clientPorts, routePorts = append(clientPorts, testkit.FreePort(t)), append(routePorts, testkit.FreePort(t))
	}
	var urls []string
	for i := range natsNodes {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", clientPorts[i]))
		var routes []string
		for j := range natsNodes {
			if j != i {
				routes = append(routes, fmt.Sprintf("%q", fmt.Sprintf("nats-route://127.0.0.1:%d", routePorts[j])))
			}
		}
		conf := filepath.Join(dir, fmt.Sprintf("nats-%d.conf", i))
		if err := os.WriteFile(conf, fmt.Appendf(nil, "server_name: n%d\nlisten: 127.0.0.1:%d\n"+
			"jetstream {\n  store_dir: %q\n  sync_interval: always\n}\n"+
			"cluster {\n  name: chaos\n  listen: 127.0.0.1:%d\n  routes: [%s]\n}\n",
			i, clientPorts[i], filepath.Join(dir, fmt.Sprintf("jetstream-%d", i)), routePorts[i], strings.Join(routes, ", ")), 0o644); err != nil {
			t.Fatal(err)
		}
		r.add(&proc{name: fmt.Sprintf("nats-%d", i), bin: natsBin, args: []string{"-c", conf},
			ready: tcpReady(fmt.Sprintf("127.0.0.1:%d", clientPorts[i]))})
	}
	r.natsURL = strings.Join(urls, ",")
	redisPort := testkit.FreePort(t)
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
		"ACTLOOP_LOG_LEVEL=info", "ACTLOOP_HEARTBEAT_INTERVAL=500ms", "ACTLOOP_STREAM_REPLICAS=3",
		"ACTLOOP_INSECURE=true"} // servers without authentication
	var replicas []string
	for i := range 2 {
		replica := fmt.Sprintf("r%d", i)
		replicas = append(replicas, replica)
		simAddr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
		r.add(&proc{name: "sim-" + replica, bin: r.bin, args: []string{"sim", "--addr", simAddr, "--time-scale", timeScale,
			"--seed", strconv.FormatInt(seed+int64(i), 10), "--log-level", "warn"}, ready: httpReady("http://" + simAddr + "/health")})
		addr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
		r.add(&proc{name: "gen-" + replica, bin: r.bin, args: []string{"serve", "gen-worker"}, ready: httpReady("http://" + addr + "/healthz"),
			env: append(common, "ACTLOOP_REPLICA="+replica, "ACTLOOP_LLM_URL=http://"+simAddr, "ACTLOOP_SLOTS=4",
				"ACTLOOP_WORKER_ID=gen-"+replica, "ACTLOOP_GEN_WORKER_ADDR="+addr, "ACTLOOP_STEAL=true")})
	}
	for i := range 2 {
		name := fmt.Sprintf("env-%d", i)
		addr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
		r.add(&proc{name: name, bin: r.bin, args: []string{"serve", "env-worker"}, ready: httpReady("http://" + addr + "/healthz"),
			env: append(common, "ACTLOOP_ENV_WORKER_ID="+name, "ACTLOOP_ENV_SLOTS=8", "ACTLOOP_ENV_WORKER_ADDR="+addr,
				"ACTLOOP_SANDBOX_ROOT="+filepath.Join(dir, "sandboxes", name), "ACTLOOP_SANDBOX_ALLOW_UNISOLATED=true",
				"ACTLOOP_SIM_ENV_TIME_SCALE="+timeScale, "ACTLOOP_SIM_ENV_START_FAILURES=0.05", "ACTLOOP_SANDBOX_START_BACKOFF=100ms")})
	}
	for i := range 2 {
		name := fmt.Sprintf("coordinator-%d", i)
		addr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
		r.coordURLs[name] = "http://" + addr
		r.add(&proc{name: name, bin: r.bin, args: []string{"serve", "coordinator"}, ready: httpReady("http://" + addr + "/healthz"),
			env: append(common, "ACTLOOP_REPLICAS="+strings.Join(replicas, ","), "ACTLOOP_SLOTS=4", "ACTLOOP_COORDINATOR_ADDR="+addr,
				"ACTLOOP_COORDINATOR_ID="+name, "ACTLOOP_LEADER_LEASE="+leaderLease.String(), "ACTLOOP_REPLICA_TIMEOUT=5s",
				"ACTLOOP_ENV_WORKER_TIMEOUT=6s", "ACTLOOP_REPUBLISH_AFTER=15s", "ACTLOOP_POLICY=lpt")})
	}
	addr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
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

// explainMissing logs, for each sample still without a result, its state
// in Redis and every log line that names it: what a timeout needs to be
// read from CI's output alone.
func (r *rig) explainMissing(ctx context.Context, missing []string) {
	r.t.Logf("no result for %d samples: %v", len(missing), missing)
	// A result the stream holds but the reader went past (a gap read
	// again) is the harness's miss, not the system's.
	results, serr := r.js.Stream(ctx, schema.StreamResults)
	if serr != nil {
		r.t.Logf("results stream: %v", serr)
	}
	for _, seq := range r.gaps[:min(len(r.gaps), 10)] {
		if serr != nil {
			break
		}
		m, err := results.GetMsg(ctx, seq)
		if err != nil {
			r.t.Logf("results stream: seq %d, not found when read: %v", seq, err)
			continue
		}
		r.t.Logf("results stream: seq %d, not found when read, holds %s now", seq, m.Subject)
	}
	for _, id := range missing[:min(len(missing), 3)] {
		h, err := r.rdb.HGetAll(ctx, "actloop:traj:{"+id+"}").Result()
		delete(h, "sample") // long, and known
		audit, _ := r.rdb.LRange(ctx, "actloop:traj:{"+id+"}:audit", -5, -1).Result()
		r.t.Logf("%s in Redis: %v (err %v); audit tail %v", id, h, err, audit)
		// Still active: the coordinator's repair owes it a result; gone:
		// the coordinator saw a result of it.
		active, aerr := r.rdb.HExists(ctx, "actloop:{coordinator}:active", id).Result()
		r.t.Logf("%s in the coordinator's active index: %v (err %v)", id, active, aerr)
		if serr == nil {
			if m, err := results.GetLastMsgForSubject(ctx, schema.SubjectResult(id)); err == nil {
				r.t.Logf("%s: a result on %s at seq %d, which the reader missed", id, m.Subject, m.Sequence)
			} else {
				r.t.Logf("%s: no result on %s: %v", id, schema.SubjectResult(id), err)
			}
		}
		for name, p := range r.procs {
			b, _ := os.ReadFile(p.log)
			var lines []string
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(l, `"`+id+`"`) {
					lines = append(lines, l)
				}
			}
			if len(lines) > 0 {
				r.t.Logf("%s log, lines naming %s (last 15 of %d):\n%s", name, id, len(lines),
					strings.Join(lines[max(0, len(lines)-15):], "\n"))
			}
		}
	}
}

// tail returns the end of a log file.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// longSample plays turns commands whose outputs (cut to 10,000 characters
// each by the agent's template) make a context of ~10k tokens a turn, the
// first of them writing a file of the numbers 1 to lines (the diff: about 7
// bytes a line).
func longSample(id string, turns, lines int) schema.Sample {
	s := sample(id, turns)
	s.Script[0] = fmt.Sprintf("THOUGHT: write the numbers.\n\n```bash\nseq 1 %d > numbers.txt\n```", lines)
	for i := 1; i < turns-1; i++ {
		s.Script[i] = fmt.Sprintf("THOUGHT: read the log.\n\n```bash\nseq %d %d\n```", i*100_000, i*100_000+50_000)
	}
	return s
}

// slowSample has one step of secs simulated seconds, within its timeout.
func slowSample(id string, secs int) schema.Sample {
	s := sample(id, 2)
	s.Script[0] = fmt.Sprintf("```bash\nsleep %d\n```", secs)
	s.Env.StepTimeoutMS = int64(3*secs) * 1000
	return s
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
			r.gaps = append(r.gaps, seq)
			continue
		}
		if err != nil {
			return seq - 1, err
		}
		if !schema.IsResult(m.Subject) {
			continue
		}
		res, err := r.bodies.Decode(ctx, m.Data)
		if err != nil { // the body's store may be between leaders: read it again next time
			return seq - 1, fmt.Errorf("result at %d: %w", seq, err)
		}
		into[res.TrajID] = append(into[res.TrajID], res)
	}
	return info.State.LastSeq, nil
}

// otherLeader waits up to 10 leases for a coordinator other than old to
// lead.
func (r *rig) otherLeader(ctx context.Context, old string) bool {
	return testkit.Poll(ctx, 10*leaderLease, func() bool { next := r.leader(ctx); return next != "" && next != old })
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
	Readmitted    int               `json:"readmitted"`
	Rewatched     int               `json:"rewatched"` // KV watches opened again after nats.go ended them
	Syncs         int               `json:"weight_syncs"`
	LongTokens    int               `json:"longest_trajectory_tokens"`
	LongDiff      int               `json:"largest_diff_bytes"`
	StateLost     int               `json:"state_deleted"`
	Poison        int               `json:"poison_samples"`
	AuditChecked  int               `json:"audit_logs_checked"`
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
	r.startAll(ctx, "nats-0", "nats-1", "nats-2", "redis-server")
	nc, err := nats.Connect(r.natsURL, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	r.nc = nc
	if r.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	// The cluster serves JetStream once it has elected a meta leader.
	testkit.Eventually(t, time.Minute, "the JetStream cluster to elect its meta leader", func() bool {
		_, err := r.js.AccountInfo(ctx)
		return err == nil
	})
	r.startAll(ctx, "sim-r0", "sim-r1", "coordinator-0")
	r.startAll(ctx, "coordinator-1", "gen-r0", "gen-r1", "env-0", "env-1", "predictor-gw")
	r.bodies = client.NewBodies(r.js)
	r.rdb = redis.NewClient(&redis.Options{Addr: r.redisAddr})
	defer r.rdb.Close()

	start := time.Now()
	ids := map[string]bool{}
	pub := bus.NewPublisher(r.js)
	for i := range p.trajectories {
		s := sample(fmt.Sprintf("chaos-%04d", i), 2+rng.IntN(5))
		switch i % 16 {
		case 3:
			s = longSample(s.ID, 13, 110_000) // ~10k tokens of output a turn, a diff of ~800 KB
		case 7:
			s = slowSample(s.ID, 40) // a step of 40 simulated seconds: longer than REPUBLISH_AFTER
		case 11:
			if i%32 == 11 {
				s = longSample(s.ID, 3, 500_000) // a diff of ~3.9 MB: over ACTLOOP_MAX_DIFF_BYTES, scored 0
			}
		}
		ids[s.ID] = true
		for {
			if err := pub.Publish(ctx, schema.SubjectSamples, s.ID, s); err == nil {
				break
			} else if time.Since(start) > time.Minute {
				t.Fatalf("submit %s: %v", s.ID, err)
			}
		}
	}

	// What the faults did to samples: a trajectory whose state was deleted
	// (its one result a fallback "lost:", or its real one if it had ended),
	// a poison sample with an id (its one result a fallback "rejected:").
	injected := &injections{lost: map[string]bool{}, poison: map[string]bool{}}
	results := map[string][]schema.Result{}
	var seq uint64
	var readErr error // the last failure to read the results, for a timeout's report
	// missing lists the samples (and poison samples with an id) without a
	// result yet, in order.
	missing := func() []string {
		var out []string
		for _, set := range []map[string]bool{ids, injected.poison} {
			for id := range set {
				if len(results[id]) == 0 {
					out = append(out, id)
				}
			}
		}
		slices.Sort(out)
		return out
	}
	done := func() bool {
		var err error
		if seq, err = r.readResults(ctx, seq, results); err != nil {
			readErr = err
		}
		return len(missing()) == 0
	}

	// Faults, one every faultEvery, while the batch runs, and every kind at
	// least once however soon it ends (on a fast machine, before the last
	// kinds come: the system must take them idle as well).
	kinds := []string{"kill-gen", "kill-env", "kill-coordinator", "kill-predictor", "stop-worker", "restart-nats",
		"restart-redis", "weight-sync", "cut-inference", "stop-coordinator", "lose-state", "poison", "kill-coordinator-and-nats"}
	version := int64(0)
	for i := 0; i < p.faults && (i < len(kinds) || !done()); i++ {
		testkit.Pause(ctx, p.faultEvery) // the schedule's pace
		kind := kinds[rng.IntN(len(kinds))]
		if i < len(kinds) {
			kind = kinds[i] // every kind at least once
		}
		rep.Faults[kind]++
		t.Logf("%5.1fs fault %d: %s", time.Since(start).Seconds(), i+1, kind)
		if err := r.inject(ctx, kind, rng, &version, &rep, injected); err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
	}
	if !testkit.Poll(ctx, p.deadline-time.Since(start), done) {
		r.explainMissing(ctx, missing())
		t.Logf("the last failure to read the results stream: %v", readErr)
		t.Fatalf("timed out after %v waiting for every sample to have a result", p.deadline)
	}
	rep.WallS = time.Since(start).Seconds()

	// The invariants.
	tmpl, err := tokenize.Chat{Tokenizer: tokenize.TokenizerQwen, ChatTemplate: tokenize.TemplateChatML}.Template()
	if err != nil {
		t.Fatal(err)
	}
	// A quiet period after the last result: a late duplicate (a result
	// published again after a crash) shows up in it.
	testkit.Poll(ctx, 3*ackWait, func() bool { done(); return false }) // reads the stream for the whole period
	for id, rs := range results {
		switch {
		case injected.poison[id]:
			if len(rs) != 1 || rs[0].Status != schema.StatusFailed || !strings.HasPrefix(rs[0].Reason, "rejected: ") {
				t.Errorf("poison sample %s: %d results, first %+v", id, len(rs), rs[0].ResultHead)
			}
		case !ids[id]:
			t.Errorf("a result for %s, which no sample named", id)
		}
	}
	rdb := r.rdb
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
		rep.LongTokens, rep.LongDiff = max(rep.LongTokens, res.NumTokens), max(rep.LongDiff, len(res.Diff))
		if !injected.lost[id] {
			if err := checkAudit(ctx, rdb, id); err != nil {
				t.Errorf("%s: %v", id, err)
			} else {
				rep.AuditChecked++
			}
		}
		switch res.Status {
		case schema.StatusSubmitted:
			rep.Completed++
			if err := testkit.Consistent(tmpl, res); err != nil {
				rep.Inconsistent++
				t.Errorf("inconsistent: %v", err)
			}
		case schema.StatusFallback, schema.StatusFailed:
			reason := res.Reason
			if reason == "" {
				t.Errorf("%s: a fallback without a reason", id)
			}
			if strings.HasPrefix(reason, "lost:") && !injected.lost[id] {
				t.Errorf("%s: a fallback for lost state, but its state was not deleted: %s", id, reason)
			}
			rep.Fallbacks[fallbackKind(reason)]++
			rep.Examples[fallbackKind(reason)] = reason
		default:
			t.Errorf("%s: status %q", id, res.Status)
		}
	}
	// A bound a broken run would pass: besides the state deleted, a few
	// sandboxes that failed to start past their retries (5% fail each try).
	fallbacks := 0
	for kind, n := range rep.Fallbacks {
		if kind != "lost" {
			fallbacks += n
		}
	}
	if bound := max(2, p.trajectories/20); fallbacks > bound {
		t.Errorf("%d fallbacks besides lost state, over the bound of %d", fallbacks, bound)
	}
	if rep.LongTokens < 100_000 || rep.LongDiff < 700_000 {
		t.Errorf("the longest trajectory had %d tokens, the largest diff %d bytes: the run did not reach real sizes",
			rep.LongTokens, rep.LongDiff)
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
		rep.Readmitted += strings.Count(s, `"msg":"trajectory state lost: admitted again from its sample"`)
		rep.Rewatched += strings.Count(s, `"msg":"watch ended under us: watching again"`)
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
func (r *rig) inject(ctx context.Context, kind string, rng *rand.Rand, version *int64, rep *report, in *injections) error {
	pick := func(names ...string) *proc { return r.procs[names[rng.IntN(len(names))]] }
	switch kind {
	case "stop-coordinator":
		// The leader freezes past its lease (as in a long GC or VM pause),
		// the standby takes over, and the leader wakes believing it leads:
		// it must step down (its writes are fenced meanwhile).
		leader := r.leader(ctx)
		if leader == "" {
			return nil
		}
		p := r.procs[leader]
		p.signal(syscall.SIGSTOP)
		tookOver := r.otherLeader(ctx, leader)
		p.signal(syscall.SIGCONT)
		if !tookOver {
			return fmt.Errorf("no coordinator took over from the stopped %s within %v", leader, 10*leaderLease)
		}
		if !testkit.Poll(ctx, 5*leaderLease, func() bool { return httpReady(r.coordURLs[leader]+"/readyz")(ctx) != nil }) {
			return fmt.Errorf("%s, woken after its lease, still leads %v later", leader, 5*leaderLease)
		}
		return nil
	case "lose-state":
		// A running trajectory's state is gone from Redis (a Redis that lost
		// its data, keys deleted by hand).
		act, err := r.rdb.HKeys(ctx, "actloop:{coordinator}:active").Result()
		if err != nil || len(act) == 0 {
			return nil // Redis restarting, or nothing running: nothing to lose
		}
		id := act[rng.IntN(len(act))]
		base := "actloop:traj:{" + id + "}"
		if err := r.rdb.Del(ctx, base, base+":msgs", base+":tok", base+":lp", base+":mask", base+":ver", base+":audit").Err(); err != nil {
			return nil
		}
		if !in.lost[id] {
			in.lost[id] = true
			rep.StateLost++
		}
		return nil
	case "poison":
		// Samples no one can run, of every size up to max_payload: each is
		// dead-lettered, and one with a readable id answered failed,
		// "rejected:".
		id := fmt.Sprintf("poison-%02d", rep.Poison)
		var body []byte
		switch rng.IntN(4) {
		case 0: // not JSON
			body = []byte("\x00not a sample")
		case 1: // a field wrong
			body = fmt.Appendf(nil, `{"v":1,"id":%q,"task":"t","env":{"backend":"sim","step_timeout_ms":-1}}`, id)
		case 2: // over the sample limit (512 KiB), under max_payload
			body = fmt.Appendf(nil, `{"v":1,"id":%q,"task":%q,"env":{"backend":"sim"}}`, id, strings.Repeat("x", 600<<10))
		default: // just under max_payload
			body = fmt.Appendf(nil, `{"v":1,"id":%q,"task":%q,"env":{"backend":"sim"}}`, id, strings.Repeat("x", (1<<20)-4<<10))
		}
		if _, err := r.js.Publish(ctx, schema.SubjectSamples, body, jetstream.WithMsgID(id)); err != nil {
			return nil // NATS restarting: this poison was not sent
		}
		rep.Poison++
		if body[0] == '{' {
			in.poison[id] = true
		}
		return nil
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
		if !r.otherLeader(ctx, leader) {
			return fmt.Errorf("no coordinator took over within %v", 10*leaderLease)
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
		testkit.Pause(ctx, ackWait+time.Second) // longer than AckWait: its steps are redelivered elsewhere
		p.signal(syscall.SIGCONT)
		return nil
	case "restart-nats":
		p := pick("nats-0", "nats-1", "nats-2")
		p.kill()
		return r.restart(ctx, p)
	case "restart-redis":
		p := r.procs["redis-server"]
		p.kill()
		return r.restart(ctx, p)
	case "kill-coordinator-and-nats":
		// Two faults at once: the leader coordinator and a NATS node.
		leader := r.leader(ctx)
		n := pick("nats-0", "nats-1", "nats-2")
		n.kill()
		if leader != "" {
			r.procs[leader].kill()
		}
		if err := r.restart(ctx, n); err != nil {
			return err
		}
		if leader != "" {
			return r.restart(ctx, r.procs[leader])
		}
		return nil
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
			testkit.Pause(ctx, 500*time.Millisecond) // a coordinator may be between terms
		}
	case "cut-inference":
		p := pick("sim-r0", "sim-r1")
		p.kill()
		testkit.Pause(ctx, 3*time.Second) // the replica is down meanwhile
		return r.restart(ctx, p)
	}
	return fmt.Errorf("unknown fault %q", kind)
}

// injections are the samples whose results the faults decide.
type injections struct {
	lost   map[string]bool // state deleted
	poison map[string]bool // poison samples with an id
}

// checkAudit reads a trajectory's audit log (in Redis, appended in the same
// script as each write) and checks that its seqs run 0, 1, 2, … with
// none twice and none missing: no step applied twice, none lost.
func checkAudit(ctx context.Context, rdb *redis.Client, id string) error {
	lines, err := rdb.LRange(ctx, "actloop:traj:{"+id+"}:audit", 0, -1).Result()
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	if len(lines) == 0 {
		return errors.New("no audit log")
	}
	for i, l := range lines {
		f := strings.Fields(l)
		if len(f) != 3 || f[0] != strconv.Itoa(i) || (i == 0) != (f[1] == "Created") {
			return fmt.Errorf("audit log line %d is %q (log: %q)", i, l, lines)
		}
	}
	return nil
}

func msgData(m *nats.Msg) string {
	if m == nil {
		return ""
	}
	return string(m.Data)
}
