package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/actloop/actloop/internal/coordinator"
	"github.com/actloop/actloop/internal/gateway"
	"github.com/actloop/actloop/internal/metrics"
	"github.com/actloop/actloop/pkg/schema"
)

// httpCall is one HTTP call of a service: its method, path and body (or,
// when bodyOf is set, what it returns at the call), and what its answer
// must hold besides a 2xx status (check; nil: nothing more).
type httpCall struct {
	method, path, body string
	bodyOf             func() string
	check              func(body []byte) error
}

func getCall(path string, check func([]byte) error) httpCall {
	return httpCall{method: http.MethodGet, path: path, check: check}
}

func postCall(path, body string, check func([]byte) error) httpCall {
	return httpCall{method: http.MethodPost, path: path, body: body, check: check}
}

// callAll makes each call on the service at base, with token as the bearer
// token, and fails (fatalf, which names the NATS server's permission
// violations) unless each answers 2xx with a body its check accepts.
func callAll(ctx context.Context, fatalf func(string, ...any), service, base, token string, calls ...httpCall) {
	for _, c := range calls {
		if c.bodyOf != nil {
			c.body = c.bodyOf()
		}
		req, err := http.NewRequestWithContext(ctx, c.method, base+c.path, strings.NewReader(c.body))
		if err != nil {
			fatalf("%s: %s %s: %v", service, c.method, c.path, err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		if c.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fatalf("%s: %s %s: %v", service, c.method, c.path, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			fatalf("%s: %s %s: read the answer: %v", service, c.method, c.path, err)
		}
		if resp.StatusCode/100 != 2 {
			fatalf("%s: %s %s: %s: %.500s", service, c.method, c.path, resp.Status, b)
		}
		if c.check != nil {
			if err := c.check(b); err != nil {
				fatalf("%s: %s %s: %v\n%.2000s", service, c.method, c.path, err, b)
			}
		}
	}
}

// healthCalls are every service's /healthz and /readyz (both "ok") and
// /metrics, which must hold every catalogue metric of the given catalogue
// services (metrics.All, metrics.Coordinator, …).
func healthCalls(exports ...string) []httpCall {
	ok := func(b []byte) error {
		if string(b) != "ok\n" {
			return errors.New(`want "ok"`)
		}
		return nil
	}
	return []httpCall{getCall("/healthz", ok), getCall("/readyz", ok), getCall("/metrics", scrapeHas(exports...))}
}

// scrapeHas checks a Prometheus scrape: it parses, it holds every
// catalogue metric of the catalogue services exports, and the handler has
// counted no failed scrape (promhttp_metric_handler_errors_total: a
// collector that could not read its source).
func scrapeHas(exports ...string) func([]byte) error {
	return func(b []byte) error {
		fams, err := parseScrape(b)
		if err != nil {
			return err
		}
		var missing []string
		for _, m := range metrics.Catalogue {
			if slices.ContainsFunc(m.Services, func(s string) bool { return slices.Contains(exports, s) }) && fams[m.Name] == nil {
				missing = append(missing, m.Name)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("scrape lacks %v", missing)
		}
		if fams["go_goroutines"] == nil {
			return errors.New("scrape lacks Go's metrics")
		}
		f := fams["promhttp_metric_handler_errors_total"]
		if f == nil {
			return errors.New("scrape lacks promhttp_metric_handler_errors_total")
		}
		for _, m := range f.GetMetric() {
			if m.GetCounter().GetValue() != 0 {
				return fmt.Errorf("the handler counted failed scrapes: %v", m)
			}
		}
		return nil
	}
}

func parseScrape(b []byte) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(b)))
	if err != nil {
		return nil, fmt.Errorf("parse the scrape: %w", err)
	}
	return fams, nil
}

// decoded checks that the body is one JSON value of type T that check
// (when not nil) accepts.
func decoded[T any](check func(T) error) func([]byte) error {
	return func(b []byte) error {
		var v T
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		if check == nil {
			return nil
		}
		return check(v)
	}
}

// wholeStatus checks a GET /v1/status of a stack with replicas: every
// replica, the work queues, the finished counts read, and no source left
// out.
func wholeStatus(replicas int) func([]byte) error {
	return func(b []byte) error {
		var st coordinator.Status
		if err := json.Unmarshal(b, &st); err != nil {
			return err
		}
		switch {
		case len(st.Errors) > 0:
			return fmt.Errorf("status with errors %q", st.Errors)
		case len(st.Replicas) != replicas:
			return fmt.Errorf("%d replicas, want %d", len(st.Replicas), replicas)
		case len(st.Queues) == 0:
			return errors.New("no queues")
		case st.Finished[schema.StatusSubmitted] == 0:
			return fmt.Errorf("finished %v, want some submitted", st.Finished)
		}
		return nil
	}
}

// contains checks that the body holds each of want and none of not.
func contains(want []string, not ...string) func([]byte) error {
	return func(b []byte) error {
		for _, w := range want {
			if !strings.Contains(string(b), w) {
				return fmt.Errorf("lacks %q", w)
			}
		}
		for _, n := range not {
			if strings.Contains(string(b), n) {
				return fmt.Errorf("holds %q", n)
			}
		}
		return nil
	}
}

// coordinatorCalls are every call of a leading coordinator's HTTP API
// (coordinator.Handler) in a stack with replicas that has run the
// gateway's batch (gw-000, …); the pause and resume
// leave generation running at weight version version.
func coordinatorCalls(replicas int, version int64) []httpCall {
	return append(healthCalls(metrics.All, metrics.Coordinator),
		getCall("/", contains([]string{"<title>actloop status</title>", `data-replica="r0"`}, `id="errors"`)),
		getCall("/v1/status", wholeStatus(replicas)),
		getCall("/v1/control", decoded[schema.ControlStatus](nil)),
		// The gateway's batch's first trajectory, finished: its state and
		// audit log read from Redis, its class from the priority bucket.
		getCall("/v1/trajectories/gw-000", decoded(func(in coordinator.Inspection) error {
			if in.State != "terminated" || len(in.Audit) < 2 || in.Replica == "" {
				return fmt.Errorf("state %q, %d audit lines, replica %q", in.State, len(in.Audit), in.Replica)
			}
			return nil
		})),
		postCall("/v1/pause", `{"mode":"abort","timeout_ms":60000}`, decoded(func(r schema.PauseReply) error {
			if r.Workers != replicas {
				return fmt.Errorf("%d workers paused, want %d", r.Workers, replicas)
			}
			return nil
		})),
		postCall("/v1/resume", fmt.Sprintf(`{"weight_version":%d}`, version), decoded[schema.Control](nil)),
		postCall("/v1/abort", `{"traj_ids":["no-such-trajectory"]}`, decoded(func(r schema.AbortReply) error {
			if len(r.Aborted) != 0 {
				return fmt.Errorf("aborted %q", r.Aborted)
			}
			return nil
		})))
}

// gatewayRoutes are the calls openapi.yaml lists ("GET /v1/status", …).
func gatewayRoutes(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../internal/gateway/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	var out []string
	for path, ops := range doc.Paths {
		for method := range ops {
			out = append(out, strings.ToUpper(method)+" "+path)
		}
	}
	slices.Sort(out)
	return out
}

// gatewayCalls are the calls of the gateway's API that checkGateway does
// not make (a read of results from a consumer of its own and a nak of what
// it delivered, a read of groups, the status, the control calls); the
// pause and resume leave generation running at weight version version.
func gatewayCalls(replicas int, version int64) []httpCall {
	var ack string
	return append(healthCalls(metrics.Gateway),
		getCall("/v1/openapi.yaml", contains([]string{"openapi:"})),
		getCall("/v1/status", wholeStatus(replicas)),
		getCall("/v1/control", decoded[schema.ControlStatus](nil)),
		getCall("/v1/groups?consumer=endpoints-groups&max=1&wait_ms=100", decoded[gateway.ReadReply](nil)),
		getCall("/v1/results?consumer=endpoints-results&max=1&wait_ms=10000", decoded(func(r gateway.ReadReply) error {
			if len(r.Deliveries) != 1 {
				return fmt.Errorf("%d deliveries, want 1", len(r.Deliveries))
			}
			ack = r.Deliveries[0].Ack
			return nil
		})),
		httpCall{method: http.MethodPost, path: "/v1/nak", bodyOf: func() string {
			b, _ := json.Marshal(gateway.SettleRequest{Acks: []string{ack}})
			return string(b)
		}, check: decoded(func(r gateway.SettleReply) error {
			if r.Settled != 1 {
				return fmt.Errorf("settled %+v, want the one delivery", r)
			}
			return nil
		})},
		postCall("/v1/pause", `{"mode":"abort","timeout_ms":60000}`, decoded(func(r schema.PauseReply) error {
			if r.Workers != replicas {
				return fmt.Errorf("%d workers paused, want %d", r.Workers, replicas)
			}
			return nil
		})),
		postCall("/v1/resume", fmt.Sprintf(`{"weight_version":%d}`, version), decoded[schema.Control](nil)),
		postCall("/v1/abort", `{"traj_ids":["no-such-trajectory"]}`, decoded[schema.AbortReply](nil)))
}

// gatewayAnswered checks the gateway's scrape: every call of openapi.yaml
// (routes) answered 2xx at least once (actloop_gateway_requests_total).
func gatewayAnswered(routes []string) func([]byte) error {
	return func(b []byte) error {
		fams, err := parseScrape(b)
		if err != nil {
			return err
		}
		ok := map[string]bool{}
		for _, m := range fams["actloop_gateway_requests_total"].GetMetric() {
			var route, code string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "route":
					route = l.GetValue()
				case "code":
					code = l.GetValue()
				}
			}
			if strings.HasPrefix(code, "2") && m.GetCounter().GetValue() > 0 {
				ok[route] = true
			}
		}
		var never []string
		for _, r := range routes {
			if !ok[r] {
				never = append(never, r)
			}
		}
		if len(never) > 0 {
			return fmt.Errorf("never answered 2xx: %v", never)
		}
		return nil
	}
}

// serviceAddr is the address service last logged "http listening" at in
// the JSON log, or "".
func serviceAddr(log, service string) string {
	addr := ""
	for line := range strings.SplitSeq(log, "\n") {
		var rec struct {
			Msg     string `json:"msg"`
			Addr    string `json:"addr"`
			Service string `json:"service"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "http listening" && rec.Service == service {
			addr = rec.Addr
		}
	}
	return addr
}
