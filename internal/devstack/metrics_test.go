package devstack_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/metrics"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/pkg/schema"
)

// scrape GETs url and parses the Prometheus text it serves.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return fams
}

// value is the sample of fam whose labels include want: a counter's or
// gauge's value, a histogram's count; -1 when there is none.
func value(fam *dto.MetricFamily, want map[string]string) float64 {
	if fam == nil {
		return -1
	}
	for _, m := range fam.GetMetric() {
		ok := true
		for k, v := range want {
			ok = ok && slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == k && l.GetValue() == v })
		}
		if !ok {
			continue
		}
		switch {
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

// Every service serves its catalogue metrics on /metrics, and they move
// with the work: results, fallbacks by reason, dead letters, tokens, step
// times, queue depths.
func TestMetricsExported(t *testing.T) {
	e := newEnv(t, 1)
	c, err := e.stack.StartCoordinator(e.ctx, e.stack.CoordinatorConfig())
	if err != nil {
		t.Fatal(err)
	}
	gd, err := e.stack.StartGenWorker(e.ctx, "r0", nil)
	if err != nil {
		t.Fatal(err)
	}
	ed, err := e.stack.StartEnvWorker(e.ctx, e.stack.EnvWorkerConfig("env-0"))
	if err != nil {
		t.Fatal(err)
	}
	servers := map[string]*httptest.Server{
		metrics.Coordinator: httptest.NewServer(c.Handler()),
		metrics.GenWorker:   httptest.NewServer(metrics.Handler(gd.Metrics)),
		metrics.EnvWorker:   httptest.NewServer(metrics.Handler(ed.Metrics)),
	}
	for _, s := range servers {
		t.Cleanup(s.Close)
	}
	if err := e.pub.PublishRaw(e.ctx, schema.SubjectSamples, "", []byte(`{"v":1,"id":"bad"}`)); err != nil {
		t.Fatal(err)
	}
	e.submit(simSample("m1", "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"))
	e.results(2)

	var fams map[string]map[string]*dto.MetricFamily
	read := func() {
		fams = map[string]map[string]*dto.MetricFamily{}
		for name, s := range servers {
			fams[name] = scrape(t, s.URL+"/metrics")
		}
	}
	coordinator := func(name string, labels map[string]string) float64 {
		return value(fams[metrics.Coordinator][name], labels)
	}
	// The coordinator counts a result once it has read it from the stream;
	// an env-worker times its finish step once the step is done, which may
	// be after its result is out.
	testkit.Eventually(t, wait, "the coordinator to count both results", func() bool {
		read()
		return coordinator("actloop_results_total", map[string]string{"status": "submitted"}) == 1 &&
			coordinator("actloop_results_total", map[string]string{"status": "failed"}) == 1 &&
			value(fams[metrics.EnvWorker]["actloop_env_step_seconds"], map[string]string{"kind": "finish"}) >= 1
	})
	for _, m := range metrics.Catalogue {
		for name, got := range fams {
			if (m.Services[0] == metrics.All || slices.Contains(m.Services, name)) && got[m.Name] == nil {
				t.Errorf("%s does not export %s", name, m.Name)
			}
		}
	}
	checks := []struct {
		service, name string
		labels        map[string]string
		atLeast       float64
	}{
		{metrics.Coordinator, "actloop_fallbacks_total", map[string]string{"reason": "rejected"}, 1},
		{metrics.Coordinator, "actloop_fallbacks_total", map[string]string{"reason": "stalled"}, 0},
		{metrics.Coordinator, "actloop_dlq_total", nil, 1},
		{metrics.Coordinator, "actloop_trajectory_seconds", nil, 1},
		{metrics.Coordinator, "actloop_replica_up", map[string]string{"replica": "r0"}, 1},
		{metrics.Coordinator, "actloop_queue_depth", map[string]string{"subject": bus.SubjectGen("r0", "hi")}, 0},
		{metrics.Coordinator, "actloop_queue_oldest_age_seconds", map[string]string{"subject": bus.SubjectEnvStart}, 0},
		{metrics.GenWorker, "actloop_generated_tokens_total", map[string]string{"replica": "r0"}, 1},
		{metrics.GenWorker, "actloop_gen_step_seconds", map[string]string{"replica": "r0"}, 1},
		{metrics.GenWorker, "actloop_slots", map[string]string{"replica": "r0"}, 2},
		{metrics.EnvWorker, "actloop_env_step_seconds", map[string]string{"kind": "exec"}, 1},
		{metrics.EnvWorker, "actloop_env_step_seconds", map[string]string{"kind": "finish"}, 1},
	}
	for _, ck := range checks {
		if got := value(fams[ck.service][ck.name], ck.labels); got < ck.atLeast {
			t.Errorf("%s %s%v = %g, want at least %g", ck.service, ck.name, ck.labels, got, ck.atLeast)
		}
	}
}
