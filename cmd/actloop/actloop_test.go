package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/bench"
	"github.com/actloop/actloop/internal/coordinator"
	"github.com/actloop/actloop/internal/demo"
	"github.com/actloop/actloop/internal/devstack"
	"github.com/actloop/actloop/internal/launch"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/pkg/schema"
)

// `actloop dev --tasks N --json` runs the demo end to end and ends with one
// JSON object on the last line.
func TestDevJSON(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run(fmt.Sprintf("weight-sync=%v", sync), func(t *testing.T) { testDevJSON(t, sync) })
	}
}

func testDevJSON(t *testing.T, sync bool) {
	args := []string{"dev", "--tasks", "3", "--json", "--dir", t.TempDir(), "--addr", "127.0.0.1:0", "--replicas", "1"}
	if sync {
		// Syncs far more often than a trajectory takes: every run has some.
		args = append(args, "--weight-sync-every", "50ms", "--time-scale", "0.05")
	}
	sum := runDevJSON(t, args)
	for k, want := range map[string]float64{"trajectories": 3, "completed": 3, "fallback": 0, "solved": 3} {
		if sum[k] != want {
			t.Errorf("%s = %v, want %v", k, sum[k], want)
		}
	}
	keys := []string{"gen_steps", "env_steps", "wall_s"}
	if sync {
		keys = append(keys, "weight_syncs", "max_version")
	}
	for _, k := range keys {
		if v, ok := sum[k].(float64); !ok || v <= 0 {
			t.Errorf("%s = %v, want > 0", k, sum[k])
		}
	}
}

// runDevJSON runs `actloop` with args, which hold dev and --json, and
// returns the summary on its output's last line.
func runDevJSON(t *testing.T, args []string) map[string]any {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("dev: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var sum map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil {
		t.Fatalf("last line is not JSON: %q", lines[len(lines)-1])
	}
	return sum
}

// `actloop dev --agent` runs the demo batch with a small agent written
// against the OpenAI HTTP API alone (examples/proxy_agent.py, the proxy
// flow), through weight syncs, and it solves every task as the built-in
// agent does.
func TestDevAgent(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not on PATH: the example agent needs it")
	}
	sum := runDevJSON(t, []string{"dev", "--tasks", "6", "--json", "--dir", testkit.SearchableTempDir(t), "--addr", "127.0.0.1:0",
		"--replicas", "1", "--agent", "python3 ../../examples/proxy_agent.py", "--weight-sync-every", "50ms", "--time-scale", "0.05"})
	for k, want := range map[string]float64{"trajectories": 6, "completed": 6, "fallback": 0, "solved": 6} {
		if sum[k] != want {
			t.Errorf("%s = %v, want %v", k, sum[k], want)
		}
	}
	if v, _ := sum["gen_steps"].(float64); v < 12 {
		t.Errorf("gen_steps = %v: every task takes the agent two calls or more", sum["gen_steps"])
	}
}

// --agent is refused where it cannot run, naming the flag.
func TestDevAgentUsage(t *testing.T) {
	for _, args := range [][]string{{"--agent", " "}, {"--agent", "python3 a.py", "--serve"}} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), append([]string{"dev", "--dir", t.TempDir()}, args...), &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), "--agent") {
			t.Errorf("%v: %v, want an error naming --agent", args, err)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{nil, {"frobnicate"}, {"dev", "--tasks", "0"}, {"dev", "--redis", "mongo"}, {"submit"}, {"schema", "x"}} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), args, &out, &errOut); exitCode(err) != 2 {
			t.Errorf("%v: exit %d (%v), want 2", args, exitCode(err), err)
		}
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"schema", "result"}, &out, &out); err != nil || !json.Valid(out.Bytes()) {
		t.Fatalf("schema result: %v", err)
	}
}

// startStack runs a small stack (one replica, every service) for the CLI
// to talk to, stopped at cleanup; dir is its state directory.
func startStack(t *testing.T) (context.Context, *devstack.Stack, *coordinator.Coordinator, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	common := service.CommonDefaults()
	common.PullWait = 100 * time.Millisecond
	dir := t.TempDir()
	st, err := devstack.StartInfra(ctx, devstack.Options{Dir: dir, RedisKind: testkit.PreferredRedis(t),
		Replicas: 1, Slots: 2, EnvSlots: 2, Common: common})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := st.Wait(); err != nil {
			t.Error(err)
		}
		st.Close()
	})
	coord, err := st.StartAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, st, coord, dir
}

// A trainer drives a running deployment with submit, results and status.
func TestSubmitResultsStatus(t *testing.T) {
	ctx, st, coord, dir := startStack(t)
	for _, kv := range st.TrainerEnv() { // the stack's NATS wants its credentials
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	ws, err := demo.Workspace(dir)
	if err != nil {
		t.Fatal(err)
	}

	var lines []string
	for _, s := range demo.Samples(2, ws, "cli") {
		b, _ := json.Marshal(s)
		lines = append(lines, string(b))
	}
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte(lines[0]+"\n\n"+`{"v":1,"id":"x","env":{"backend":"sim"}}`+"\n"+lines[0]+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	err = run(ctx, []string{"submit", bad}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "line 3: task: missing") || !strings.Contains(err.Error(), "line 4: id:") {
		t.Fatalf("submit of a bad file: %v", err)
	}
	good := filepath.Join(dir, "good.jsonl")
	if err := os.WriteFile(good, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run(ctx, []string{"submit", good}, &out, &errOut); err != nil || !strings.Contains(out.String(), "submitted 2") {
		t.Fatalf("submit: %v %s", err, out.String())
	}
	out.Reset()
	if err := run(ctx, []string{"results", "-n", "2"}, &out, &errOut); err != nil {
		t.Fatalf("results: %v", err)
	}
	got := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(got) != 2 {
		t.Fatalf("results printed %d lines: %q", len(got), out.String())
	}
	for _, l := range got {
		r, err := schema.Decode[schema.Result]([]byte(l))
		if err != nil || !r.Solved() {
			t.Fatalf("result %v: %s", err, l)
		}
	}
	// Acknowledged: the same consumer does not see them again.
	out.Reset()
	if err := run(ctx, []string{"results"}, &out, &errOut); err != nil || out.Len() != 0 {
		t.Fatalf("second results: %v %q", err, out.String())
	}

	srv := httptest.NewServer(coord.Handler())
	t.Cleanup(srv.Close)
	t.Setenv("ACTLOOP_COORDINATOR_URL", srv.URL)
	testkit.Eventually(t, time.Minute, "status to count both results", func() bool {
		out.Reset()
		if err := run(ctx, []string{"status", "--json"}, &out, &errOut); err != nil {
			return false
		}
		var s coordinator.Status
		return json.Unmarshal(out.Bytes(), &s) == nil && s.Finished[schema.StatusSubmitted] == 2 && s.Active == 0
	})
	out.Reset()
	if err := run(ctx, []string{"status"}, &out, &errOut); err != nil ||
		!strings.Contains(out.String(), "finished: 2 submitted") || !strings.Contains(out.String(), "control     running") ||
		!regexp.MustCompile(`(?m)^r0 +yes +0 +\d+`).MatchString(out.String()) {
		t.Fatalf("status table: %v\n%s", err, out.String())
	}
	// top refreshes the same table until interrupted.
	topCtx, stopTop := context.WithCancel(ctx)
	topOut := &syncBuffer{}
	topDone := make(chan error, 1)
	go func() { topDone <- run(topCtx, []string{"top", "--interval", "10ms"}, topOut, &errOut) }()
	testkit.Eventually(t, time.Minute, "top to print the table twice", func() bool {
		return strings.Count(topOut.String(), "finished: 2 submitted") >= 2
	})
	stopTop()
	if err := <-topDone; err != nil {
		t.Fatalf("top: %v", err)
	}

	// Weight sync from the command line (NATS) and over HTTP.
	testkit.Eventually(t, time.Minute, "the gen-worker to report running", func() bool {
		out.Reset()
		var c schema.ControlStatus
		return run(ctx, []string{"control"}, &out, &errOut) == nil && json.Unmarshal(out.Bytes(), &c) == nil &&
			len(c.Workers) == 1 && !c.Workers[0].Paused
	})
	out.Reset()
	if err := run(ctx, []string{"pause", "--mode", "drain", "--timeout", "1m"}, &out, &errOut); err != nil {
		t.Fatalf("pause: %v", err)
	}
	var pr schema.PauseReply
	if err := json.Unmarshal(out.Bytes(), &pr); err != nil || pr.Epoch != 1 || pr.Workers != 1 || pr.Mode != schema.PauseDrain {
		t.Fatalf("pause answered %v %s", err, out.String())
	}
	if err := run(ctx, []string{"pause", "--mode", "nap"}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "mode") {
		t.Fatalf("pause with a bad mode: %v", err)
	}
	resp, err := authPost(srv.URL+"/v1/resume", st.Creds.APIToken, `{"weight_version":3}`)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/resume: %s", resp.Status)
	}
	out.Reset()
	if err := run(ctx, []string{"resume", "--weight-version", "2"}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "go back") {
		t.Fatalf("resume to an older version: %v", err)
	}
	resp, err = http.Get(srv.URL + "/v1/control")
	if err != nil {
		t.Fatal(err)
	}
	var cs schema.ControlStatus
	err = json.NewDecoder(resp.Body).Decode(&cs)
	resp.Body.Close()
	if err != nil || cs.Control.Paused || cs.Control.WeightVersion != 3 || cs.Control.Epoch != 1 {
		t.Fatalf("GET /v1/control: %+v %v", cs, err)
	}
	resp, err = authPost(srv.URL+"/v1/pause", st.Creds.APIToken, `{"mode":"abort","timeout_ms":"soon"}`)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("POST /v1/pause with a bad timeout: %s", resp.Status)
	}
}

// docs/configuration.md lists every ACTLOOP_ setting the code reads, and no
// other: the services' (which internal/launch/docgen generates), the CLI's
// and the tests'.
func TestDocsListEverySetting(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	read := map[string]bool{"ACTLOOP_TEST_REDIS": true, "ACTLOOP_TEST_DOCKER_IMAGE": true, // read by the tests
		"ACTLOOP_CHAOS": true, "ACTLOOP_CHAOS_SEED": true, "ACTLOOP_CHAOS_APPENDFSYNC": true, "ACTLOOP_CHAOS_TRAJECTORIES": true}
	names := service.Settings(trainerConfig{})
	for _, name := range launch.Names {
		names = append(names, launch.Settings(name)...)
	}
	for _, k := range names {
		read[k] = true
	}
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile("`(ACTLOOP_[A-Z0-9_]+)`").FindAllStringSubmatch(string(doc), -1) {
		listed[m[1]] = true
	}
	var missing, unknown []string
	for k := range read {
		if !listed[k] {
			missing = append(missing, k)
		}
	}
	for k := range listed {
		if !read[k] {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(unknown)
	if len(missing) > 0 || len(unknown) > 0 {
		t.Fatalf("docs/configuration.md settings: missing %v; listed but not read %v", missing, unknown)
	}
}

// `actloop bench-pipeline` passes its flags to internal/bench and prints
// its report as one JSON object (the harness's own tests are there).
func TestBenchPipelineCommand(t *testing.T) {
	args := []string{"bench-pipeline", "--trajectories", "4", "--turns", "2", "--tokens", "8", "--slots", "4",
		"--gen-workers", "2", "--redis", "in-process", "-json"}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), args, &out, &errOut); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, errOut.String())
	}
	var b bench.PipelineReport
	if err := json.Unmarshal(out.Bytes(), &b); err != nil {
		t.Fatalf("output %q: %v", out.String(), err)
	}
	if b.Trajectories != 4 || b.Actions != 8 || b.GenWorkers != 2 || b.EnvWorkers != 1 || b.Redis != "in-process" {
		t.Errorf("report %+v: want the flags' batch", b)
	}
}

// The bench commands refuse settings that cannot run, naming the flag,
// before starting anything.
func TestBenchUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--modes", "magic"}, `--modes: unknown mode "magic"`},
		{[]string{"bench", "--scenarios", "nope"}, `--scenarios: unknown scenario "nope"`},
		{[]string{"bench", "--tasks", "-1"}, "--tasks: must be >= 0"},
		{[]string{"bench", "--engine", "live", "--time-scale", "0"}, "--time-scale: must be positive"},
		{[]string{"bench", "--machine", "tpu"}, `--machine: unknown machine "tpu"`},
		{[]string{"bench-sync", "--mode", "nap"}, `--mode: "nap"`},
		{[]string{"bench-sync", "--in-flight", "5000"}, "--in-flight"},
		{[]string{"bench-pipeline", "--gen-workers", "0"}, "--gen-workers"},
		{[]string{"bench-pipeline", "--slots", "many"}, `"--slots"`},
	} {
		err := run(context.Background(), tt.args, io.Discard, io.Discard)
		if exitCode(err) != 2 || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: exit %d (%v), want 2 and %q", tt.args, exitCode(err), err, tt.want)
		}
	}
	if err := run(context.Background(), []string{"serve", "nope"}, io.Discard, io.Discard); exitCode(err) != 2 {
		t.Errorf("serve nope: %v", err)
	}
}
