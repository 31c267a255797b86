package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/coordinator"
	"github.com/actloop/actloop/internal/demo"
	"github.com/actloop/actloop/internal/devstack"
	"github.com/actloop/actloop/internal/envworker"
	"github.com/actloop/actloop/internal/gateway"
	"github.com/actloop/actloop/internal/genworker"
	"github.com/actloop/actloop/internal/metrics"
	"github.com/actloop/actloop/internal/predictor"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/service/servicetest"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/pkg/client"
	"github.com/actloop/actloop/pkg/schema"
)

// clientPerms is one row of the NATS permissions table in docs/security.md.
type clientPerms struct {
	pub, sub  []string
	pubDeny   []string // publish denied
	responses bool     // allow_responses
}

// securitySection is docs/security.md's section under "## title", and the
// rows of the table in it whose header is header, each row's cells.
func securitySection(t *testing.T, title, header string) (string, [][]string) {
	t.Helper()
	b, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## "+title+"\n")
	if !ok {
		t.Fatalf("docs/security.md: no %s section", title)
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	cols := strings.Count(header, "|") - 1
	_, table, ok := strings.Cut(sec, header+"\n|"+strings.Repeat("---|", cols)+"\n")
	if !ok {
		t.Fatalf("docs/security.md: no table in the %s section", title)
	}
	var rows [][]string
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) != cols {
			t.Fatalf("docs/security.md %s row %q: want %d cells", title, line, cols)
		}
		rows = append(rows, cells)
	}
	return sec, rows
}

// codeSpans are the `…` spans of a table cell.
var codeSpans = regexp.MustCompile("`([^`]+)`")

// documentedPermissions reads the table of docs/security.md's "NATS
// permissions" section, by client.
func documentedPermissions(t *testing.T) map[string]clientPerms {
	t.Helper()
	_, rows := securitySection(t, "NATS permissions", "| client | publish | subscribe | publish denied |")
	out := map[string]clientPerms{}
	for _, cells := range rows {
		var p clientPerms
		for _, m := range codeSpans.FindAllStringSubmatch(cells[1], -1) {
			if m[1] == "allow_responses" {
				p.responses = true
				continue
			}
			p.pub = append(p.pub, m[1])
		}
		for _, m := range codeSpans.FindAllStringSubmatch(cells[2], -1) {
			p.sub = append(p.sub, m[1])
		}
		for _, m := range codeSpans.FindAllStringSubmatch(cells[3], -1) {
			p.pubDeny = append(p.pubDeny, m[1])
		}
		out[cells[0]] = p
	}
	for _, c := range []string{"every service", "coordinator", "gen-worker", "env-worker", "predictor-gw", "CLI (trainer)", "gateway"} {
		if _, ok := out[c]; !ok {
			t.Fatalf("docs/security.md permissions table: no row %q (rows %v)", c, out)
		}
	}
	return out
}

// natsUser is a server user with the permissions of rows, placeholders
// replaced.
func natsUser(name, password string, subst map[string]string, rows ...clientPerms) *server.User {
	p := &server.Permissions{Publish: &server.SubjectPermission{}, Subscribe: &server.SubjectPermission{}}
	fill := func(s string) string {
		for k, v := range subst {
			s = strings.ReplaceAll(s, k, v)
		}
		return s
	}
	for _, r := range rows {
		for _, s := range r.pub {
			p.Publish.Allow = append(p.Publish.Allow, fill(s))
		}
		for _, s := range r.sub {
			p.Subscribe.Allow = append(p.Subscribe.Allow, fill(s))
		}
		for _, s := range r.pubDeny {
			p.Publish.Deny = append(p.Publish.Deny, fill(s))
		}
		if r.responses {
			p.Response = &server.ResponsePermission{MaxMsgs: 1, Expires: time.Minute}
		}
	}
	return &server.User{Username: name, Password: password, Permissions: p}
}

// violations collects the server's permission violations; first is
// closed at the first.
type violations struct {
	mu    sync.Mutex
	lines []string
	first chan struct{}
}

func (v *violations) add(format string, a []any) {
	if msg := fmt.Sprintf(format, a...); strings.Contains(msg, "Violation") {
		v.mu.Lock()
		if len(v.lines) == 0 {
			close(v.first)
		}
		v.lines = append(v.lines, msg)
		v.mu.Unlock()
	}
}

func (v *violations) Noticef(string, ...any)         {}
func (v *violations) Debugf(string, ...any)          {}
func (v *violations) Tracef(string, ...any)          {}
func (v *violations) Warnf(format string, a ...any)  { v.add(format, a) }
func (v *violations) Errorf(format string, a ...any) { v.add(format, a) }
func (v *violations) Fatalf(format string, a ...any) { v.add(format, a) }
func (v *violations) get() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.lines...)
}

// The services and the CLI run a batch end to end on a NATS server that
// wants TLS and a password and grants each client only docs/security.md's
// permissions: every service connects with the ACTLOOP_NATS_ settings
// (service.Connect), the CLI with the same variables from its environment,
// and the server reports no permission violation: not in a batch, a weight
// sync, nor in the recovery paths (a leader takeover, stealing a step from
// a dead replica, publishing a step again, moving a dead replica's
// trajectories), nor when every HTTP endpoint of every service is called and
// every /metrics scraped (the CLI's status and top too), each of which
// answers whole.
func TestLeastPrivilegeNATSPermissions(t *testing.T) {
	perms := documentedPermissions(t)
	base := perms["every service"]
	pki := servicetest.NewPKI(t, "nats")
	const password = "perm-test-pass"
	users := []*server.User{
		natsUser("coordinator", password, nil, base, perms["coordinator"]),
		natsUser("predictor-gw", password, nil, base, perms["predictor-gw"]),
		natsUser("env-0", password, map[string]string{"<id>": "env-0"}, base, perms["env-worker"]),
		natsUser("trainer", password, nil, perms["CLI (trainer)"]),
		natsUser("gateway", password, nil, perms["gateway"]),
	}
	replicas := []string{"r0", "r1"}
	for _, r := range replicas {
		users = append(users, natsUser("gen-"+r, password, map[string]string{"<replica>": r}, base, perms["gen-worker"]))
	}
	srv := servicetest.StartNATS(t, server.Options{TLSConfig: pki.ServerTLS(false), Users: users})
	viol := &violations{first: make(chan struct{})}
	srv.SetLogger(viol, false, false)
	url := "tls://" + servicetest.Addr(srv)

	// A violation ends the run at once: what it stops would only time out.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	go func() {
		select {
		case <-viol.first:
			cancel()
		case <-ctx.Done():
		}
	}()
	fatalf := func(format string, a ...any) {
		t.Helper()
		if v := viol.get(); len(v) > 0 {
			t.Errorf("permission violations with docs/security.md's permissions:\n%s", strings.Join(v, "\n"))
		}
		t.Fatalf(format, a...)
	}
	dir := testkit.SearchableTempDir(t)
	common := service.CommonDefaults()
	common.PullWait = 100 * time.Millisecond
	// The stack's own NATS server goes unused: only its Redis and
	// simulators serve.
	// Its Redis has docs/security.md's ACL user per service (LeastPrivilege).
	st, err := devstack.StartInfra(ctx, devstack.Options{Dir: dir, RedisKind: testkit.PreferredRedis(t),
		Replicas: len(replicas), Slots: 2, EnvSlots: 2, Common: common, LeastPrivilege: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// as logs c in to this test's NATS as user and to Redis as redisUser.
	as := func(c service.Common, user, redisUser string) service.Common {
		c.NATSURL, c.NATSUser, c.NATSPassword, c.NATSTLSCA = url, user, password, pki.CA
		c.RedisUsername, c.RedisPassword = redisUser, st.Creds.Redis[redisUser]
		return c
	}

	svcCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	logs := &syncBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	// start runs a service until runCtx (within svcCtx) ends.
	start := func(runCtx context.Context, name string, c service.Common, build func(d *service.Deps) (func(context.Context) error, error)) *service.Deps {
		t.Helper()
		if err := c.Validate(); err != nil {
			fatalf("%s: %v", name, err)
		}
		d, err := service.Connect(ctx, c, name, logger.With("service", name))
		if err != nil {
			fatalf("%s: %v", name, err)
		}
		run, err := build(d)
		if err != nil {
			d.Close()
			fatalf("%s: %v", name, err)
		}
		wg.Go(func() {
			defer d.Close()
			// One killed (its connection closed under it, as kill does)
			// may end with the connection's error before its ctx ends.
			if err := run(runCtx); err != nil && runCtx.Err() == nil && !d.NC.IsClosed() {
				errc <- fmt.Errorf("%s: %w", name, err)
			}
		})
		return d
	}
	stopped := false
	shutdown := func() {
		if !stopped {
			stopped = true
			stop()
			wg.Wait()
		}
	}
	defer shutdown()

	// Two coordinators under the leader lease, as deployed; short timeouts,
	// so that the recovery paths run (below). Every service serves its HTTP
	// API, at an address it logs; the coordinator's read-only calls want
	// the token too.
	cc := st.CoordinatorConfig()
	cc.Common, cc.Addr, cc.StatusOpen = as(cc.Common, "coordinator", service.NATSCoordinator), "127.0.0.1:0", false
	// A replica counts down 6 s after its last heartbeat: the batch that
	// comes in after r1 is killed must be admitted within that, some of it
	// to r1, for the move to be seen (2 s was too short on a loaded
	// machine: all went to r0).
	cc.ReplicaTimeout, cc.RepublishAfter = 6*time.Second, time.Second
	c1Ctx, stopC1 := context.WithCancel(svcCtx)
	defer stopC1()
	for _, id := range []string{"c1", "c2"} {
		cfg := cc
		cfg.CoordinatorID = id
		runCtx := svcCtx
		if id == "c1" {
			runCtx = c1Ctx
		}
		start(runCtx, "coordinator-"+id, cfg.Common, func(d *service.Deps) (func(context.Context) error, error) {
			return coordinator.NewElected(cfg, d).Run, nil
		})
		if id == "c1" {
			testkit.Eventually(t, time.Minute, "c1 to lead", func() bool { return leads(logs.String(), "coordinator-c1") })
		}
	}
	// startGen runs replica r's gen-worker until the returned stop.
	type genRun struct {
		w    *genworker.Worker
		d    *service.Deps
		stop context.CancelFunc
	}
	startGen := func(r string, steal bool) genRun {
		t.Helper()
		gc := st.GenWorkerConfig(r)
		gc.Common, gc.Addr = as(gc.Common, "gen-"+r, service.NATSGenWorker), "127.0.0.1:0"
		gc.Steal, gc.StealAfter, gc.HeartbeatInterval = steal, 300*time.Millisecond, 200*time.Millisecond
		runCtx, stop := context.WithCancel(svcCtx)
		g := genRun{stop: stop}
		g.d = start(runCtx, "gen-worker-"+r, gc.Common, func(d *service.Deps) (func(context.Context) error, error) {
			w, err := genworker.New(runCtx, gc, d, nil)
			if err != nil {
				return nil, err
			}
			g.w = w
			return w.Run, nil
		})
		return g
	}
	gens := map[string]genRun{}
	for _, r := range replicas {
		gens[r] = startGen(r, true)
		defer gens[r].stop()
	}
	ec := st.EnvWorkerConfig("env-0")
	ec.Common, ec.Addr = as(ec.Common, "env-0", service.NATSEnvWorker), "127.0.0.1:0"
	ec.HeartbeatInterval = 200 * time.Millisecond
	start(svcCtx, "env-worker", ec.Common, func(d *service.Deps) (func(context.Context) error, error) {
		w, err := envworker.New(svcCtx, ec, d)
		if err != nil {
			return nil, err
		}
		return w.Run, nil
	})
	pc := st.PredictorConfig()
	pc.Common, pc.Addr = as(pc.Common, "predictor-gw", service.NATSPredictor), "127.0.0.1:0"
	start(svcCtx, "predictor-gw", pc.Common, func(d *service.Deps) (func(context.Context) error, error) {
		return predictor.New(pc, d).Run, nil
	})

	// The trainer: the CLI with the same variables.
	t.Setenv("ACTLOOP_NATS_URL", url)
	t.Setenv("ACTLOOP_NATS_USER", "trainer")
	t.Setenv("ACTLOOP_NATS_PASSWORD", password)
	t.Setenv("ACTLOOP_NATS_TLS_CA", pki.CA)
	ws, err := demo.Workspace(dir)
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	var lines []string
	for _, s := range demo.Samples(n, ws, "perm") {
		b, _ := json.Marshal(s)
		lines = append(lines, string(b))
	}
	file := filepath.Join(dir, "samples.jsonl")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if err := run(ctx, []string{"submit", file}, &out, &errOut); err != nil {
		fatalf("submit: %v", err)
	}
	out.Reset()
	if err := run(ctx, []string{"results", "-n", fmt.Sprint(n)}, &out, &errOut); err != nil {
		fatalf("results: %v", err)
	}
	got := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(got) != n {
		fatalf("%d results, want %d: %s", len(got), n, out.String())
	}
	for _, l := range got {
		if r, err := schema.Decode[schema.Result]([]byte(l)); err != nil || r.Status != schema.StatusSubmitted {
			fatalf("result %v: %s", err, l)
		}
	}
	// urlOf is the base URL service serves its HTTP API at.
	urlOf := func(service string) string {
		t.Helper()
		var addr string
		if !testkit.Poll(ctx, time.Minute, func() bool { addr = serviceAddr(logs.String(), service); return addr != "" }) {
			fatalf("%s serves no HTTP API", service)
		}
		return "http://" + addr
	}
	// The gateway, as its own user: a trainer over HTTP submits a batch,
	// reads its results and acknowledges them.
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gcfg := gateway.Config{Common: as(common, "gateway", ""), Addr: gl.Addr().String(), APIToken: cc.APIToken,
		CoordinatorURL: urlOf("coordinator-c1"), MaxWait: time.Minute, MaxBatch: 64}
	wg.Go(func() {
		if err := gateway.Serve(svcCtx, gcfg, gl, logger.With("service", "gateway")); err != nil && svcCtx.Err() == nil {
			errc <- fmt.Errorf("gateway: %w", err)
		}
	})
	checkGateway(t, "http://"+gl.Addr().String(), gcfg.APIToken, ws, n)
	// The CLI's consumer has them too: read them, so the batches below
	// find only their own.
	out.Reset()
	if err := run(ctx, []string{"results", "-n", fmt.Sprint(n)}, &out, &errOut); err != nil {
		fatalf("results of the gateway's batch: %v", err)
	}
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if r, err := schema.Decode[schema.Result]([]byte(l)); err != nil || !strings.HasPrefix(r.TrajID, "gw") {
			fatalf("result of the gateway's batch %v: %.200s", err, l)
		}
	}

	// Weight sync over NATS: every gen-worker reports its pause in KV.
	testkit.Eventually(t, time.Minute, "both gen-workers to report running", func() bool {
		out.Reset()
		var c schema.ControlStatus
		return run(ctx, []string{"control"}, &out, &errOut) == nil && json.Unmarshal(out.Bytes(), &c) == nil &&
			len(c.Workers) == len(replicas)
	})
	for _, args := range [][]string{{"pause", "--mode", "abort", "--timeout", "1m"}, {"resume", "--weight-version", "1"}} {
		out.Reset()
		if err := run(ctx, args, &out, &errOut); err != nil {
			fatalf("%v: %v", args, err)
		}
	}

	// The coordinator's notice to the gen-workers of trajectories an abort
	// ended while running (actloop.cancel): the gen-workers get it (a
	// malformed one, which they dead-letter; a refused dead letter would be
	// a violation).
	coordUser := as(common, "coordinator", "")
	cnc, err := coordUser.ConnectNATS("cancel-check")
	if err != nil {
		fatalf("coordinator's user: %v", err)
	}
	defer cnc.Close()
	if err := cnc.Publish(bus.SubjectCancel, []byte(`{"v":1,"traj_ids":[]}`)); err != nil {
		fatalf("publish %s: %v", bus.SubjectCancel, err)
	}
	testkit.Eventually(t, time.Minute, "both gen-workers to dead-letter the malformed cancel", func() bool {
		return strings.Count(logs.String(), `"msg":"malformed cancel dead-lettered"`) == len(replicas)
	})

	// Every HTTP call of every service, each /metrics scraped, and the
	// CLI's status and top, under the same permissions: each answers 2xx
	// with all it should hold (a call the permissions refuse in part would
	// only time out, or leave out what it could not read).
	token := cc.APIToken
	callAll(ctx, fatalf, "coordinator-c1", urlOf("coordinator-c1"), token, coordinatorCalls(len(replicas), 2)...)
	ok := contains([]string{"ok"})
	callAll(ctx, fatalf, "coordinator-c2 (standing by)", urlOf("coordinator-c2"), token,
		getCall("/healthz", ok), getCall("/metrics", scrapeHas(metrics.All)))
	for _, r := range replicas {
		callAll(ctx, fatalf, "gen-worker-"+r, urlOf("gen-worker-"+r), token, append(healthCalls(metrics.All, metrics.GenWorker),
			getCall("/v1/stats", decoded[genworker.Stats](nil)))...)
	}
	callAll(ctx, fatalf, "env-worker", urlOf("env-worker"), token, healthCalls(metrics.All, metrics.EnvWorker)...)
	callAll(ctx, fatalf, "predictor-gw", urlOf("predictor-gw"), token, healthCalls(metrics.All)...)
	gwURL := "http://" + gl.Addr().String()
	callAll(ctx, fatalf, "gateway", gwURL, token, gatewayCalls(len(replicas), 3)...)
	callAll(ctx, fatalf, "gateway", gwURL, token, getCall("/metrics", gatewayAnswered(gatewayRoutes(t))))
	t.Setenv("ACTLOOP_COORDINATOR_URL", urlOf("coordinator-c1"))
	t.Setenv("ACTLOOP_API_TOKEN", token)
	out.Reset()
	if err := run(ctx, []string{"status", "--json"}, &out, &errOut); err != nil {
		fatalf("status --json: %v", err)
	}
	if err := wholeStatus(len(replicas))(out.Bytes()); err != nil {
		fatalf("status --json: %v\n%s", err, out.String())
	}
	// The status reads the components' state as last published (every
	// 250 ms): the resume shows soon.
	var statusErr error
	if !testkit.Poll(ctx, time.Minute, func() bool {
		out.Reset()
		statusErr = run(ctx, []string{"status"}, &out, &errOut)
		return statusErr == nil && strings.Contains(out.String(), "control     running, weight version 3")
	}) {
		fatalf("status: %v\n%s", statusErr, out.String())
	}
	topCtx, stopTop := context.WithCancel(ctx)
	topOut := &syncBuffer{}
	topDone := make(chan error, 1)
	go func() { topDone <- run(topCtx, []string{"top", "--interval", "10ms"}, topOut, io.Discard) }()
	framed := testkit.Poll(ctx, time.Minute, func() bool { return strings.Count(topOut.String(), "control     running") >= 2 })
	stopTop()
	if err := <-topDone; err != nil || !framed {
		fatalf("top: %v\n%s", err, topOut.String())
	}

	// Recovery under the same permissions. The leader stops and the
	// standby takes over (leader takeover). Gen-worker r1 dies (its
	// connection drops, its heartbeats stop) while a batch comes in: r0
	// takes the steps waiting on r1's low class (stealing). Then, without
	// stealing, r1's steps wait until they are published again
	// (republish) and its trajectories move to r0 once it counts as down
	// (moves).
	stopC1()
	testkit.Eventually(t, time.Minute, "c2 to take over", func() bool { return leads(logs.String(), "coordinator-c2") })
	// kill ends r's gen-worker as a crash would: its connection drops.
	kill := func(r string) {
		gens[r].d.NC.Close()
		gens[r].stop()
	}
	batch := func(prefix string) {
		t.Helper()
		var lines []string
		for _, s := range demo.Samples(n, ws, prefix) {
			b, _ := json.Marshal(s)
			lines = append(lines, string(b))
		}
		file := filepath.Join(dir, prefix+".jsonl")
		if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		out.Reset()
		if err := run(ctx, []string{"submit", file}, &out, &errOut); err != nil {
			fatalf("submit: %v", err)
		}
		out.Reset()
		if err := run(ctx, []string{"results", "-n", fmt.Sprint(n)}, &out, &errOut); err != nil {
			fatalf("results of %s: %v", prefix, err)
		}
		for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			if r, err := schema.Decode[schema.Result]([]byte(l)); err != nil || r.Status != schema.StatusSubmitted || !strings.HasPrefix(r.TrajID, prefix) {
				fatalf("result of %s %v: %s", prefix, err, l)
			}
		}
	}
	kill("r1")
	batch("steal")
	if stolen := gens["r0"].w.Stats().Stolen; stolen == 0 {
		t.Errorf("r0 stole no gen step from dead r1")
	}
	// Again without stealing: r1's steps wait until they are published
	// again, and r1's trajectories move to r0 once it counts as down.
	gens["r0"].stop()
	gens["r0"] = startGen("r0", false)
	gens["r1"] = startGen("r1", false)
	defer gens["r0"].stop()
	defer gens["r1"].stop()
	testkit.Eventually(t, time.Minute, "both gen-workers to report running", func() bool {
		out.Reset()
		var c schema.ControlStatus
		return run(ctx, []string{"control"}, &out, &errOut) == nil && json.Unmarshal(out.Bytes(), &c) == nil &&
			len(c.Workers) == len(replicas)
	})
	kill("r1")
	batch("move")
	for _, what := range []string{"no progress: publishing the pending step again", "replica down: moving its trajectories"} {
		if !strings.Contains(logs.String(), what) {
			t.Errorf("the coordinator never logged %q", what)
		}
	}
	// The new leader's read-only calls and scrape; the steps left on dead
	// r1's queue are there, with their age (the oldest message, read).
	callAll(ctx, fatalf, "coordinator-c2", urlOf("coordinator-c2"), token, append(slices.DeleteFunc(coordinatorCalls(len(replicas), 0),
		func(c httpCall) bool { return c.method != http.MethodGet }),
		getCall("/v1/status", decoded(func(st coordinator.Status) error {
			for _, q := range st.Queues {
				if strings.HasPrefix(q.Subject, "actloop.gen.r1.") && q.Depth > 0 && q.OldestAgeS > 0 {
					return nil
				}
			}
			return fmt.Errorf("no step waiting on r1's queues: %+v", st.Queues)
		})))...)

	// Stopped cleanly: heartbeats and the lease are removed, too.
	shutdown()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if v := viol.get(); len(v) > 0 {
		t.Fatalf("permission violations with docs/security.md's permissions:\n%s", strings.Join(v, "\n"))
	}
	// Redis's: what its ACL LOG holds (the stack's NATS went unused).
	if v := st.Violations(); len(v) > 0 {
		t.Fatalf("Redis ACL denials with docs/security.md's Redis users:\n%s", strings.Join(v, "\n"))
	}

	// A wrong password is refused, and the error does not show it.
	nctx, ncancel := context.WithTimeout(context.Background(), time.Minute)
	defer ncancel()
	t.Setenv("ACTLOOP_NATS_PASSWORD", "not-"+password)
	err = run(nctx, []string{"submit", file}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "Authorization Violation") || strings.Contains(err.Error(), password) {
		t.Fatalf("submit with a wrong password: %v", err)
	}
	// Without the CA the server's certificate is not trusted.
	t.Setenv("ACTLOOP_NATS_PASSWORD", password)
	t.Setenv("ACTLOOP_NATS_TLS_CA", "")
	if err := run(nctx, []string{"submit", file}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("submit without the CA: %v", err)
	}
	// A bad setting is named before anything connects.
	t.Setenv("ACTLOOP_NATS_TLS_CA", filepath.Join(dir, "missing.pem"))
	if err := run(nctx, []string{"control"}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "ACTLOOP_NATS_TLS_CA") {
		t.Fatalf("control with a missing CA file: %v", err)
	}
}

// Each service refuses to start unauthenticated, naming the settings that
// would authenticate it and the switch that lets it start anyway; with
// that switch it goes on (here to find no server).
func TestServeRefusesUnauthenticated(t *testing.T) {
	for _, k := range []string{"ACTLOOP_NATS_USER", "ACTLOOP_NATS_PASSWORD", "ACTLOOP_NATS_TOKEN", "ACTLOOP_NATS_CREDS",
		"ACTLOOP_NATS_NKEY", "ACTLOOP_NATS_TLS_CERT", "ACTLOOP_NATS_TLS_KEY", "ACTLOOP_REDIS_USERNAME",
		"ACTLOOP_REDIS_PASSWORD", "ACTLOOP_API_TOKEN", "ACTLOOP_INSECURE"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	t.Setenv("ACTLOOP_NATS_URL", "nats://127.0.0.1:1")
	t.Setenv("ACTLOOP_REDIS_URL", "redis://127.0.0.1:1/0")
	t.Setenv("ACTLOOP_GATEWAY_ADDR", "127.0.0.1:0")
	t.Setenv("ACTLOOP_SANDBOX_ALLOW_UNISOLATED", "true")
	t.Setenv("ACTLOOP_SANDBOX_ROOT", t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, name := range []string{"coordinator", "gen-worker", "env-worker", "predictor-gw", "gateway"} {
		want := []string{"refusing to start unauthenticated", "ACTLOOP_NATS_USER", "ACTLOOP_REDIS_PASSWORD", "ACTLOOP_INSECURE=true"}
		switch name {
		case "coordinator":
			want = append(want, "ACTLOOP_API_TOKEN")
		case "gateway": // NATS only: no Redis
			want = append(want[:2], "ACTLOOP_INSECURE=true", "ACTLOOP_API_TOKEN")
		}
		var out, errOut bytes.Buffer
		err := run(ctx, []string{"serve", name}, &out, &errOut)
		for _, w := range want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("serve %s unauthenticated: %v; want it to name %s", name, err, w)
			}
		}
		if name == "gateway" && err != nil && strings.Contains(err.Error(), "REDIS") {
			t.Errorf("serve gateway unauthenticated: %v; want no Redis setting named (it does not connect to Redis)", err)
		}
		t.Run(name+" insecure", func(t *testing.T) {
			t.Setenv("ACTLOOP_INSECURE", "true")
			err := run(ctx, []string{"serve", name}, &out, &errOut)
			if err == nil || strings.Contains(err.Error(), "unauthenticated") || !strings.Contains(err.Error(), "nats") {
				t.Errorf("serve %s with ACTLOOP_INSECURE=true: %v, want it to try NATS", name, err)
			}
		})
	}
}

// checkGateway submits n samples through the gateway at url, reads their
// results and acknowledges them.
func checkGateway(t *testing.T, url, token, ws string, n int) {
	t.Helper()
	var lines []string
	for _, s := range demo.Samples(n, ws, "gw") {
		b, _ := json.Marshal(s)
		lines = append(lines, string(b))
	}
	call := func(method, path, body string, out any) {
		t.Helper()
		req, err := http.NewRequest(method, url+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || json.Unmarshal(b, out) != nil {
			t.Fatalf("%s %s: %s: %s", method, path, resp.Status, b)
		}
	}
	var sub gateway.SubmitReply
	call(http.MethodPost, "/v1/samples", strings.Join(lines, "\n"), &sub)
	if sub.Accepted != n {
		t.Fatalf("gateway: %d samples accepted, want %d", sub.Accepted, n)
	}
	// The consumer reads the stream from its start: the CLI's results
	// come too, and are acknowledged with these.
	var acks []string
	mine := 0
	testkit.Eventually(t, 2*time.Minute, "the gateway's results", func() bool {
		var r gateway.ReadReply
		call(http.MethodGet, "/v1/results?consumer=gw&max=64&wait_ms=1000", "", &r)
		for _, d := range r.Deliveries {
			if d.Result == nil || d.Result.Status != schema.StatusSubmitted {
				t.Fatalf("gateway: delivery %+v", d)
			}
			if strings.HasPrefix(d.Result.TrajID, "gw") {
				mine++
			}
			acks = append(acks, d.Ack)
		}
		return mine >= n
	})
	body, _ := json.Marshal(gateway.SettleRequest{Acks: acks})
	var settled gateway.SettleReply
	call(http.MethodPost, "/v1/ack", string(body), &settled)
	if settled.Settled != len(acks) {
		t.Fatalf("gateway: ack: %+v", settled)
	}
	var c schema.ControlStatus
	call(http.MethodGet, "/v1/control", "", &c)
}

// authPost posts a JSON body to url with token as the bearer token.
func authPost(url, token, body string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	return http.DefaultClient.Do(req)
}

// docs/security.md's table is the code's (service.NATSTable), which the
// embedded server of `actloop dev` grants.
func TestPermissionsTableIsTheCodes(t *testing.T) {
	doc := documentedPermissions(t)
	for client, want := range service.NATSTable {
		got, ok := doc[client]
		if !ok {
			t.Errorf("docs/security.md: no row %q", client)
			continue
		}
		if !slices.Equal(got.pub, want.Publish) || !slices.Equal(got.sub, want.Subscribe) ||
			!slices.Equal(got.pubDeny, want.PublishDeny) || got.responses != want.Responses {
			t.Errorf("docs/security.md row %q:\n got pub %q sub %q pub denied %q responses %v\nwant pub %q sub %q pub denied %q responses %v",
				client, got.pub, got.sub, got.pubDeny, got.responses, want.Publish, want.Subscribe, want.PublishDeny, want.Responses)
		}
	}
	if len(doc) != len(service.NATSTable) {
		t.Errorf("docs/security.md has %d rows, the code %d", len(doc), len(service.NATSTable))
	}
}

// leads reports whether the JSON log holds service's "leading" record.
func leads(log, service string) bool {
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, `"msg":"leading"`) && strings.Contains(l, `"service":"`+service+`"`) {
			return true
		}
	}
	return false
}

// docs/security.md's Redis users are the code's (service.RedisTable and
// service.RedisCommands), which `actloop dev` creates.
func TestRedisUsersTableIsTheCodes(t *testing.T) {
	sec, rows := securitySection(t, "Redis users", "| user | keys | keys read only |")
	doc, read := map[string][]string{}, map[string][]string{}
	for _, cells := range rows {
		for _, m := range codeSpans.FindAllStringSubmatch(cells[1], -1) {
			doc[cells[0]] = append(doc[cells[0]], m[1])
		}
		for _, m := range codeSpans.FindAllStringSubmatch(cells[2], -1) {
			read[cells[0]] = append(read[cells[0]], m[1])
		}
	}
	for user := range service.RedisTable {
		if !slices.Equal(read[user], service.RedisReadTable[user]) {
			t.Errorf("docs/security.md Redis user %q: keys read only %q, the code %q", user, read[user], service.RedisReadTable[user])
		}
	}
	if len(doc) != len(service.RedisTable) {
		t.Errorf("docs/security.md has %d Redis users, the code %d", len(doc), len(service.RedisTable))
	}
	for user, keys := range service.RedisTable {
		if !slices.Equal(doc[user], keys) {
			t.Errorf("docs/security.md Redis user %q: keys %q, the code %q", user, doc[user], keys)
		}
	}
	_, block, _ := strings.Cut(sec, "```\n")
	block, _, _ = strings.Cut(block, "\n```")
	if got := strings.Fields(block); !slices.Equal(got, service.RedisCommands) {
		t.Errorf("docs/security.md Redis commands %q, the code %q", got, service.RedisCommands)
	}
}

// refusals collects the publishes the server refused a connection, from
// its asynchronous errors.
type refusals struct {
	mu   sync.Mutex
	errs []string
}

// connectAs connects to srv as user, recording the permission violations
// the server reports to it.
func connectAs(t *testing.T, srv *server.Server, user, password string) (*nats.Conn, jetstream.JetStream, *refusals) {
	t.Helper()
	r := &refusals{}
	nc, err := nats.Connect("nats://"+servicetest.Addr(srv), nats.UserInfo(user, password), nats.ErrorHandler(r.handler))
	if err != nil {
		t.Fatalf("%s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js, r
}

func (r *refusals) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	if errors.Is(err, nats.ErrPermissionViolation) {
		r.mu.Lock()
		r.errs = append(r.errs, err.Error())
		r.mu.Unlock()
	}
}

// refused reports whether the server refused a publish to subject.
func (r *refusals) refused(subject string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(r.errs, func(e string) bool { return strings.Contains(e, fmt.Sprintf("Publish to %q", subject)) })
}

func (r *refusals) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.errs)
}

// The trainer's and the gateway's users, as docs/security.md grants them
// and as `actloop dev` does (devstack.ServerPermissions of
// service.NATSPermissionsOf), are refused the services' consumers of
// results: creating or updating coordinator-results and predictor-history,
// inspecting them, pulling from them and acknowledging what they delivered
// to their services; each service's consumer is left as it was. On a
// consumer of its own each may do all of it.
func TestTrainerRefusedServiceConsumers(t *testing.T) {
	perms := documentedPermissions(t)
	const password = "deny-test-pass"
	dev := func(name, client string) *server.User {
		return &server.User{Username: name, Password: password,
			Permissions: devstack.ServerPermissions(service.NATSPermissionsOf(client, ""))}
	}
	trainers := []string{"trainer", "gateway", "dev-trainer", "dev-gateway"}
	srv := servicetest.StartNATS(t, server.Options{Users: []*server.User{
		natsUser("coordinator", password, nil, perms["every service"], perms["coordinator"]),
		natsUser("predictor-gw", password, nil, perms["every service"], perms["predictor-gw"]),
		natsUser("trainer", password, nil, perms["CLI (trainer)"]),
		natsUser("gateway", password, nil, perms["gateway"]),
		dev("dev-trainer", service.NATSTrainer),
		dev("dev-gateway", service.NATSGateway),
		{Username: "admin", Password: password}, // looks at the consumers
	}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	connect := func(user string) (*nats.Conn, jetstream.JetStream, *refusals) {
		return connectAs(t, srv, user, password)
	}

	// Each service's consumer, with one result delivered to it and held.
	type held struct {
		cons jetstream.Consumer
		msg  jetstream.Msg
	}
	_, admin, _ := connect("admin")
	if _, err := admin.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: schema.StreamResults,
		Subjects: []string{schema.SubjectResults, schema.SubjectGroups}}); err != nil {
		t.Fatal(err)
	}
	services := map[string]*held{}
	// The coordinator creates the trainers' consumers on their behalf.
	cnc, cjs, _ := connect("coordinator")
	serveCtx, stopServing := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- coordinator.ServeTrainerConsumers(serveCtx, cnc, cjs, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() {
		stopServing()
		if err := <-served; err != nil {
			t.Errorf("ServeTrainerConsumers: %v", err)
		}
	})
	for _, c := range []struct{ user, consumer string }{{"coordinator", "coordinator-results"}, {"predictor-gw", predictor.HistoryConsumer}} {
		if !schema.ServiceConsumer(c.consumer) {
			t.Errorf("schema.ServiceConsumer(%q) = false", c.consumer)
		}
		_, js, r := connect(c.user)
		cons, err := js.CreateOrUpdateConsumer(ctx, schema.StreamResults, jetstream.ConsumerConfig{Durable: c.consumer,
			FilterSubject: schema.SubjectResults, AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute})
		if err != nil {
			t.Fatalf("%s: consumer %s: %v", c.user, c.consumer, err)
		}
		services[c.consumer] = &held{cons: cons}
		if v := r.get(); len(v) > 0 {
			t.Fatalf("%s refused: %q", c.user, v)
		}
	}
	for _, id := range []string{"t1", "t2", "t3"} {
		if _, err := admin.Publish(ctx, "actloop.results."+id, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	for name, h := range services {
		b, err := h.cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
		if err != nil {
			t.Fatalf("%s: fetch: %v", name, err)
		}
		for m := range b.Messages() {
			h.msg = m
		}
		if h.msg == nil {
			t.Fatalf("%s: no delivery: %v", name, b.Error())
		}
	}

	for _, user := range trainers {
		nc, js, r := connect(user)
		inbox := nats.NewInbox()
		for _, name := range slices.Sorted(maps.Keys(services)) {
			h := services[name]
			// An update to a consumer of groups, a look at it, a pull and
			// an acknowledgement of what it delivered to its service.
			create, err := json.Marshal(jetstream.ConsumerConfig{Durable: name, FilterSubject: schema.SubjectGroups,
				AckPolicy: jetstream.AckExplicitPolicy})
			if err != nil {
				t.Fatal(err)
			}
			attempts := []struct{ subject, body string }{
				{"$JS.API.CONSUMER.CREATE." + schema.StreamResults + "." + name + "." + schema.SubjectGroups,
					fmt.Sprintf(`{"stream_name":%q,"config":%s}`, schema.StreamResults, create)},
				{"$JS.API.CONSUMER.INFO." + schema.StreamResults + "." + name, ""},
				{"$JS.API.CONSUMER.MSG.NEXT." + schema.StreamResults + "." + name, `{"batch":1,"expires":1000000000}`},
				{h.msg.Reply(), "+ACK"},
			}
			for _, a := range attempts {
				if err := nc.PublishRequest(a.subject, inbox, []byte(a.body)); err != nil {
					t.Fatal(err)
				}
				testkit.Eventually(t, 10*time.Second, user+" refused a publish to "+a.subject, func() bool { return r.refused(a.subject) })
			}
		}

		// Nor may it have the coordinator make one of them.
		for _, name := range slices.Sorted(maps.Keys(services)) {
			req, err := json.Marshal(client.ConsumerRequest{V: 1, Name: name, Subject: schema.SubjectGroups})
			if err != nil {
				t.Fatal(err)
			}
			m, err := nc.RequestWithContext(ctx, client.SubjectConsumerCreate, req)
			if err != nil {
				t.Fatalf("%s: ask for %s: %v", user, name, err)
			}
			var reply client.ConsumerReply
			if err := json.Unmarshal(m.Data, &reply); err != nil || reply.Error == "" {
				t.Errorf("%s: the coordinator made it %s: %s (%v)", user, name, m.Data, err)
			}
		}

		// Its own consumer: created (by the coordinator), inspected,
		// pulled from, acknowledged on.
		own := "own-" + user
		cons, err := client.EnsureConsumer(ctx, nc, js, own, schema.SubjectResults)
		if err != nil {
			t.Fatalf("%s: its consumer: %v", user, err)
		}
		b, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
		if err != nil {
			t.Fatalf("%s: fetch from its consumer: %v", user, err)
		}
		n := 0
		for m := range b.Messages() {
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatalf("%s: ack on its consumer: %v", user, err)
			}
			n++
		}
		info, err := cons.Info(ctx)
		if err != nil || n != 1 || info.AckFloor.Consumer != 1 {
			t.Fatalf("%s: its consumer: %d deliveries, info %+v, %v", user, n, info, err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if v := r.get(); len(v) != 4*len(services) {
			t.Errorf("%s: refusals %q, want the %d attempts on the services' consumers only", user, v, 4*len(services))
		}
	}

	// The services' consumers are as they were: their filter, the one
	// delivery each holds (which its service still acknowledges), the rest
	// pending.
	for name, h := range services {
		cons, err := admin.Consumer(ctx, schema.StreamResults, name)
		if err != nil {
			t.Fatal(err)
		}
		info := cons.CachedInfo()
		if info.Config.FilterSubject != schema.SubjectResults || info.NumAckPending != 1 || info.NumPending != 2 ||
			info.AckFloor.Consumer != 0 {
			t.Errorf("%s after the trainers: filter %s, %d unacknowledged, %d pending, ack floor %d; want %s, 1, 2, 0",
				name, info.Config.FilterSubject, info.NumAckPending, info.NumPending, info.AckFloor.Consumer, schema.SubjectResults)
		}
		if err := h.msg.DoubleAck(ctx); err != nil {
			t.Errorf("%s: its service's ack: %v", name, err)
		}
	}
}

// A trainer (the CLI, the gateway) creates the streams that are missing and
// never changes one: on an empty server its CreateStreams makes every
// stream; after a service declared them, a trainer running other settings
// leaves them as they are, and its user is refused a stream update.
func TestTrainerCannotChangeStreams(t *testing.T) {
	perms := documentedPermissions(t)
	const password = "streams-test-pass"
	srv := servicetest.StartNATS(t, server.Options{Users: []*server.User{
		natsUser("service", password, nil, perms["every service"]),
		natsUser("trainer", password, nil, perms["CLI (trainer)"]),
		natsUser("gateway", password, nil, perms["gateway"]),
		{Username: "dev-trainer", Password: password,
			Permissions: devstack.ServerPermissions(service.NATSPermissionsOf(service.NATSTrainer, ""))},
	}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	connect := func(user string) (*nats.Conn, jetstream.JetStream, *refusals) {
		return connectAs(t, srv, user, password)
	}
	common := service.CommonDefaults()
	services := common.Topology()
	services.Memory = true
	trainer := services
	trainer.ResultsAge, trainer.DLQAge = time.Hour, 2*time.Hour // not the services'

	// The first trainer on an empty server creates every stream.
	_, js, r := connect("trainer")
	if err := trainer.CreateStreams(ctx, js); err != nil {
		t.Fatalf("trainer on an empty server: %v", err)
	}
	for _, name := range []string{schema.StreamSamples, schema.StreamResults, schema.StreamDLQ, bus.StreamGen, bus.StreamEnv, bus.StreamEvents} {
		if _, err := js.Stream(ctx, name); err != nil {
			t.Errorf("trainer: stream %s not created: %v", name, err)
		}
	}
	if v := r.get(); len(v) > 0 {
		t.Fatalf("trainer refused: %q", v)
	}

	// A service declares them with its settings: it updates them.
	_, sjs, sr := connect("service")
	if err := services.EnsureStreams(ctx, sjs); err != nil {
		t.Fatalf("service: %v", err)
	}
	results := func() jetstream.StreamConfig {
		t.Helper()
		s, err := sjs.Stream(ctx, schema.StreamResults)
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().Config
	}
	if got := results().MaxAge; got != services.ResultsAge {
		t.Fatalf("after the service's declaration: %s MaxAge %v, want the service's %v", schema.StreamResults, got, services.ResultsAge)
	}
	if v := sr.get(); len(v) > 0 {
		t.Fatalf("service refused: %q", v)
	}

	for _, user := range []string{"trainer", "gateway", "dev-trainer"} {
		nc, js, r := connect(user)
		if err := trainer.CreateStreams(ctx, js); err != nil {
			t.Errorf("%s: %v", user, err)
		}
		if got := results().MaxAge; got != services.ResultsAge {
			t.Errorf("%s changed %s's MaxAge to %v", user, schema.StreamResults, got)
		}
		if v := r.get(); len(v) > 0 {
			t.Errorf("%s refused while creating the streams: %q", user, v)
		}
		// What nats.go's UpdateStream sends: refused.
		cfg := results()
		cfg.MaxAge = time.Minute
		b, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		subject := "$JS.API.STREAM.UPDATE." + schema.StreamResults
		if err := nc.PublishRequest(subject, nats.NewInbox(), b); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 10*time.Second, user+" refused a stream update", func() bool { return r.refused(subject) })
		if got := results().MaxAge; got != services.ResultsAge {
			t.Errorf("%s's update went through: MaxAge %v", user, got)
		}
	}
}
