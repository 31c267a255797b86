package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/actloop/actloop/internal/coordinator"
	"github.com/actloop/actloop/internal/demo"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/pkg/schema"
)

// After a small batch (two demo tasks solved, one sim task submitted and
// scored 0) the status, its table and /metrics carry throughput, solve
// rate, reward and staleness consistent with the batch; `actloop inspect`
// shows a finished trajectory's state, trace id and audit log, and names
// an unknown id in its error.
func TestOutcomesAndInspect(t *testing.T) {
	// Traced, as with an OTLP endpoint: each trajectory gets a trace id.
	tp := sdktrace.NewTracerProvider()
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() {
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
		_ = tp.Shutdown(context.Background())
	})
	ctx, st, coord, dir := startStack(t)
	d, err := st.Deps(ctx, "trainer")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	ws, err := demo.Workspace(dir)
	if err != nil {
		t.Fatal(err)
	}
	samples := demo.Samples(2, ws, "out")
	unsolved := schema.Sample{V: schema.Version, ID: "out-unsolved", Task: "fail the eval",
		Script: []string{"```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"},
		Env:    schema.Env{Backend: schema.BackendSim, Eval: "exit 1"}, Sampling: schema.Sampling{MaxNewTokens: 4096}}
	unsolved.Normalize()
	samples = append(samples, unsolved)
	for _, s := range samples {
		if err := d.Pub.Publish(ctx, schema.SubjectSamples, s.ID, s); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(coord.Handler())
	t.Cleanup(srv.Close)
	t.Setenv("ACTLOOP_COORDINATOR_URL", srv.URL)
	t.Setenv("ACTLOOP_API_TOKEN", st.Creds.APIToken)

	var out, errOut bytes.Buffer
	var s coordinator.Status
	testkit.Eventually(t, 2*time.Minute, "the coordinator to see the three results", func() bool {
		out.Reset()
		if err := run(ctx, []string{"status", "--json"}, &out, &errOut); err != nil {
			return false
		}
		s = coordinator.Status{}
		return json.Unmarshal(out.Bytes(), &s) == nil && s.Outcomes.Total.Trajectories == 3
	})
	o := s.Outcomes
	var finished int64
	for _, n := range s.Finished {
		finished += n
	}
	if tot := o.Total; tot.Results != 3 || tot.Solved != 2 || tot.Solved > finished || tot.SolveRate != 2.0/3 ||
		tot.MeanReward != 2.0/3 || tot.GenTokens <= 0 || tot.EnvSteps < 3 || tot.MaxStaleness != 0 {
		t.Errorf("total %+v (finished %d): want 3 results, 2 solved, tokens and env steps, no staleness", tot, finished)
	}
	if o.WindowS <= 0 || o.WindowS > coordinator.OutcomeWindow.Seconds() ||
		o.Window.Trajectories > o.Total.Trajectories || o.TokensPerS != float64(o.Window.GenTokens)/o.WindowS ||
		o.TrajectoriesPerS != float64(o.Window.Trajectories)/o.WindowS || o.EnvStepsPerS != float64(o.Window.EnvSteps)/o.WindowS {
		t.Errorf("window %+v: rates not the window's counts over window_s", o)
	}
	out.Reset()
	if err := run(ctx, []string{"status"}, &out, &errOut); err != nil ||
		!regexp.MustCompile(`(?m)^throughput  last \d+s: [\d.]+ trajectories/s, [\d.]+ tokens/s, [\d.]+ env steps/s$`).MatchString(out.String()) ||
		!strings.Contains(out.String(), "this term: solved 2/3 (67%), mean reward 0.667") {
		t.Errorf("status table: %v\n%s", err, out.String())
	}

	// /metrics: the same figures as counters and gauges.
	fams := scrapeCoordinator(t, srv.URL)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"actloop_solved_total", nil, 2},
		{"actloop_reward", nil, 3}, // a histogram: its count
		{"actloop_result_tokens_total", nil, float64(o.Total.GenTokens)},
		{"actloop_result_env_steps_total", nil, float64(o.Total.EnvSteps)},
	} {
		if got := sampleOf(fams[c.name], c.labels); got != c.want {
			t.Errorf("%s%v = %g, want %g", c.name, c.labels, got, c.want)
		}
	}
	if h := fams["actloop_reward"].GetMetric()[0].GetHistogram(); h.GetSampleSum() != 2 {
		t.Errorf("actloop_reward sum %g, want 2", h.GetSampleSum())
	}
	for _, kind := range []string{"trajectories", "tokens", "env_steps"} {
		if got := sampleOf(fams["actloop_throughput_per_second"], map[string]string{"kind": kind}); got < 0 {
			t.Errorf("actloop_throughput_per_second{kind=%q} missing", kind)
		}
	}

	// inspect: a finished trajectory, as a table and as JSON.
	id := samples[0].ID
	out.Reset()
	if err := run(ctx, []string{"inspect", id}, &out, &errOut); err != nil {
		t.Fatalf("inspect %s: %v", id, err)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^state +terminated, seq \d+; ended submitted \(submitted`),
		regexp.MustCompile(`(?m)^waits on +nothing \(ended\)$`),
		regexp.MustCompile(`(?m)^replica +r0 \(rid [0-9a-f]{32}\)$`),
		regexp.MustCompile(`(?m)^env-worker +env-0$`),
		regexp.MustCompile(`(?m)^weights +0 to 0 \(current 0\)$`),
		regexp.MustCompile(`(?m)^trace id +[0-9a-f]{32}$`),
		regexp.MustCompile(`(?m)^ +0 +Created +\d{4}-`),
	} {
		if !want.MatchString(out.String()) {
			t.Errorf("inspect %s lacks %v:\n%s", id, want, out.String())
		}
	}
	out.Reset()
	if err := run(ctx, []string{"inspect", "--json", id}, &out, &errOut); err != nil {
		t.Fatalf("inspect --json %s: %v", id, err)
	}
	var in coordinator.Inspection
	if err := json.Unmarshal(out.Bytes(), &in); err != nil {
		t.Fatal(err)
	}
	if in.ID != id || in.State != "terminated" || in.End != schema.StatusSubmitted || in.Turns == 0 || in.GenTokens == 0 ||
		in.NumTokens <= in.GenTokens || len(in.Audit) < 2 || !strings.HasPrefix(in.Audit[0], "0 Created ") ||
		in.WaitsOn != "" || in.Traceparent == "" || !strings.Contains(in.Traceparent, in.TraceID) {
		t.Errorf("inspect --json: %+v", in)
	}
	if len(in.Audit) > 0 {
		if last := strings.Fields(in.Audit[len(in.Audit)-1])[0]; last != strconv.FormatInt(in.Seq, 10) {
			t.Errorf("audit ends at seq %s, the state is at %d", last, in.Seq)
		}
	}

	// An unknown id: an error naming it.
	err = run(ctx, []string{"inspect", "no-such-traj"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), `"no-such-traj"`) || !strings.Contains(err.Error(), "no such trajectory") ||
		!strings.Contains(err.Error(), "404") {
		t.Fatalf("inspect of an unknown id: %v", err)
	}
	if err := run(ctx, []string{"inspect"}, &out, &errOut); exitCode(err) != 2 {
		t.Fatalf("inspect without an id: exit %d (%v), want 2", exitCode(err), err)
	}
}

// scrapeCoordinator GETs base's /metrics and parses it.
func scrapeCoordinator(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	fams, err := parseScrape(b)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// sampleOf is the value of fam's sample whose labels include want (a
// histogram's count); -1 when there is none.
func sampleOf(fam *dto.MetricFamily, want map[string]string) float64 {
	for _, m := range fam.GetMetric() {
		ok := true
		for k, v := range want {
			found := false
			for _, l := range m.GetLabel() {
				found = found || l.GetName() == k && l.GetValue() == v
			}
			ok = ok && found
		}
		switch {
		case !ok:
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	return -1
}
