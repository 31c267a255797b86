package metrics

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func TestCatalogue(t *testing.T) {
	seen := map[string]bool{}
	for _, m := range Catalogue {
		if seen[m.Name] {
			t.Errorf("%s twice", m.Name)
		}
		seen[m.Name] = true
		if !model.IsValidLegacyMetricName(m.Name) || !strings.HasPrefix(m.Name, "actloop_") || m.Help == "" || len(m.Services) == 0 {
			t.Errorf("%+v: want a valid actloop_ name, help and a service", m)
		}
		// Prometheus's naming conventions.
		switch m.Type {
		case "counter":
			if !strings.HasSuffix(m.Name, "_total") {
				t.Errorf("counter %s does not end in _total", m.Name)
			}
		case "histogram", "gauge":
			if strings.HasSuffix(m.Name, "_total") {
				t.Errorf("%s %s ends in _total", m.Type, m.Name)
			}
		default:
			t.Errorf("%s: type %q", m.Name, m.Type)
		}
	}
}

// dashboardNames returns the actloop metric names the dashboard's queries
// use, with histograms' _bucket, _sum and _count series read as the
// histogram.
func dashboardNames(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../../deploy/grafana/actloop.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	names := map[string]bool{}
	name := regexp.MustCompile(`\bactloop_[a-z0-9_]+`)
	cat := Names()
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, n := range name.FindAllString(tg.Expr, -1) {
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if base, ok := strings.CutSuffix(n, suffix); ok && cat[base].Type == "histogram" {
						n = base
					}
				}
				names[n] = true
			}
		}
	}
	return names
}

// Every metric the dashboard queries is exported, and every exported one
// is on the dashboard.
func TestDashboardMatchesCatalogue(t *testing.T) {
	used := dashboardNames(t)
	cat := Names()
	for n := range used {
		if _, ok := cat[n]; !ok {
			t.Errorf("the dashboard queries %s, which no service exports", n)
		}
	}
	for n := range cat {
		if !used[n] {
			t.Errorf("%s is exported but not on the dashboard", n)
		}
	}
}

func TestScopeUnregisters(t *testing.T) {
	reg := NewRegistry()
	for range 2 { // a second term registers the same metrics again
		s := NewScope(reg)
		Histogram(s, "actloop_trajectory_seconds", nil)
		GaugeFunc(s, "actloop_paused", nil, func() float64 { return 1 })
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		if !has(fams, "actloop_paused") {
			t.Fatal("registered metric not gathered")
		}
		s.Close()
		if fams, _ := reg.Gather(); has(fams, "actloop_paused") {
			t.Fatal("metric still gathered after Close")
		}
	}
}

func has(fams []*dto.MetricFamily, name string) bool {
	for _, f := range fams {
		if f.GetName() == name {
			return true
		}
	}
	return false
}

var _ prometheus.Registerer = (*Scope)(nil)

// HistogramQuantile reads a quantile from the buckets as
// histogram_quantile does: within a quarter of the truth on
// DispatchBuckets, 0 before any observation, the last bound past it.
func TestHistogramQuantile(t *testing.T) {
	h := NewHistogram("actloop_gen_queue_wait_seconds", nil, DispatchBuckets...)
	if q := HistogramQuantile(h, 0.5); q != 0 {
		t.Fatalf("empty: %g", q)
	}
	for ms := 1; ms <= 1000; ms++ {
		h.Observe(float64(ms) / 1000)
	}
	for _, c := range []struct{ q, want float64 }{{0.5, 0.5}, {0.99, 0.99}, {0.1, 0.1}} {
		if got := HistogramQuantile(h, c.q); got < c.want*0.75 || got > c.want*1.25 {
			t.Errorf("q%g = %g, want about %g", c.q, got, c.want)
		}
	}
	h.Observe(1e6) // past the last bucket
	if got, last := HistogramQuantile(h, 1), DispatchBuckets[len(DispatchBuckets)-1]; got != last {
		t.Errorf("q1 past the buckets = %g, want the last bound %g", got, last)
	}
}

// failing is a collector whose source failed: it sends an invalid metric,
// as the coordinator's does for a gauge it could not read.
type failing struct{ desc *prometheus.Desc }

func (f failing) Describe(ch chan<- *prometheus.Desc) { ch <- f.desc }
func (f failing) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.NewInvalidMetric(f.desc, errors.New("nats: permissions violation"))
}

// A collector that fails does not fail the scrape: each scrape answers
// 200 with every other metric, and the failures are counted
// (promhttp_metric_handler_errors_total, after the scrape that had one).
func TestHandlerServesPastAFailingCollector(t *testing.T) {
	reg := NewRegistry()
	GaugeFunc(reg, "actloop_paused", nil, func() float64 { return 1 })
	reg.MustRegister(failing{prometheus.NewDesc("actloop_trajectories_active", lookup("actloop_trajectories_active").Help, nil, nil)})
	h := Handler(reg)
	for scrape := range 3 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("scrape %d: %d %s", scrape, rec.Code, rec.Body)
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(rec.Body)
		if err != nil {
			t.Fatalf("scrape %d: %v", scrape, err)
		}
		if f := fams["actloop_paused"]; f == nil || f.GetMetric()[0].GetGauge().GetValue() != 1 {
			t.Errorf("scrape %d: actloop_paused %v, want 1", scrape, f)
		}
		if fams["go_goroutines"] == nil {
			t.Errorf("scrape %d lacks Go's metrics", scrape)
		}
		if fams["actloop_trajectories_active"] != nil {
			t.Errorf("scrape %d has the failed metric", scrape)
		}
		var errs float64 = -1
		for _, m := range fams["promhttp_metric_handler_errors_total"].GetMetric() {
			if m.GetLabel()[0].GetValue() == "gathering" {
				errs = m.GetCounter().GetValue()
			}
		}
		if errs != float64(scrape) {
			t.Errorf("scrape %d: %g gathering errors counted, want %d", scrape, errs, scrape)
		}
	}
}
