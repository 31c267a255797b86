package coordinator_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/actloop/actloop/internal/coordinator"
)

// A source of the status that cannot be read (here the samples consumer's
// info: refused, then never answered, as when the NATS server refuses the
// request) leaves the rest to show: GET /v1/status and the page answer
// 200 with everything else and name the source, within the status's
// bound on the reads; /metrics answers 200 with every gauge but the
// samples waiting, and counts the failure.
func TestStatusWithoutASource(t *testing.T) {
	ctx, s, d := stack(t)
	c, err := coordinator.New(ctx, s.CoordinatorConfig(), d)
	if err != nil {
		t.Fatal(err)
	}
	defer c.RegisterMetrics()()
	h := c.Handler()
	get := func(path string) string {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
		}
		return rec.Body.String()
	}
	status := func(want string) {
		t.Helper()
		var st coordinator.Status
		if err := json.Unmarshal([]byte(get("/v1/status")), &st); err != nil {
			t.Fatal(err)
		}
		if len(st.Errors) != 1 || !strings.HasPrefix(st.Errors[0], "samples not yet taken in: ") || !strings.Contains(st.Errors[0], want) {
			t.Errorf("status errors %q, want the samples' %q alone", st.Errors, want)
		}
		if len(st.Replicas) != 2 || st.Finished == nil || len(st.Queues) == 0 || st.MaxActive == 0 {
			t.Errorf("status without the samples' source: %+v; want the rest", st)
		}
	}

	// Refused.
	refused := errors.New("nats: permissions violation")
	c.SetSamplesInfo(func(context.Context) (*jetstream.ConsumerInfo, error) { return nil, refused })
	status(refused.Error())
	if page := get("/"); !strings.Contains(page, `id="errors"`) || !strings.Contains(page, "samples not yet taken in: "+refused.Error()) ||
		!strings.Contains(page, `id="trajectories"`) {
		t.Errorf("the page does not show the rest and name the source:\n%s", page)
	}
	for scrape := range 2 {
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(strings.NewReader(get("/metrics")))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"actloop_trajectories_active", "actloop_admission_limit", "actloop_replica_up",
			"actloop_queue_depth", "actloop_paused", "actloop_results_total"} {
			if fams[name] == nil {
				t.Errorf("scrape %d lacks %s", scrape, name)
			}
		}
		if fams["actloop_samples_waiting"] != nil {
			t.Errorf("scrape %d has actloop_samples_waiting, whose source failed", scrape)
		}
		// The handler counts a failed gathering after serving it.
		if got := gatheringErrors(fams); got != float64(scrape) {
			t.Errorf("scrape %d: promhttp_metric_handler_errors_total{cause=gathering} = %g, want %d", scrape, got, scrape)
		}
	}

	// Never answered: the status gives up on it at its bound (a minute
	// here ends a status that has none).
	c.SetSamplesInfo(func(ctx context.Context) (*jetstream.ConsumerInfo, error) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Minute):
			return nil, errors.New("not answered in a minute")
		}
	})
	status(context.DeadlineExceeded.Error())
}

func gatheringErrors(fams map[string]*dto.MetricFamily) float64 {
	for _, m := range fams["promhttp_metric_handler_errors_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "cause" && l.GetValue() == "gathering" {
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}
