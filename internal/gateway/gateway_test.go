package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/actloop/actloop/internal/devstack"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/pkg/schema"
)

const wait = 2 * time.Minute

// api is a gateway over a dev stack (coordinator, one gen-worker, one
// env-worker, simulated model and sandboxes), and an HTTP client for it.
type api struct {
	t     *testing.T
	url   string
	token string
}

func newAPI(t *testing.T) *api {
	t.Helper()
	common := service.CommonDefaults()
	common.PullWait = 100 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	s, err := devstack.StartInfra(ctx, devstack.Options{Dir: t.TempDir(), RedisKind: testkit.PreferredRedis(t),
		Replicas: 1, Slots: 4, EnvSlots: 4, Common: common, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := s.Wait(); err != nil {
			t.Error(err)
		}
		s.Close()
	})
	if _, err := s.StartCoordinator(ctx, s.CoordinatorConfig()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartGenWorker(ctx, "r0", nil); err != nil {
		t.Fatal(err)
	}
	ec := s.EnvWorkerConfig("env-0")
	ec.SimStartLatency, ec.SimExecLatency = 0, 0
	if _, err := s.StartEnvWorker(ctx, ec); err != nil {
		t.Fatal(err)
	}
	d, err := s.Deps(ctx, "gateway")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	const token = "s3cret"
	srv := httptest.NewServer(New(Config{APIToken: token, MaxWait: time.Minute, MaxBatch: 64}, d).Handler())
	t.Cleanup(srv.Close)
	return &api{t: t, url: srv.URL, token: token}
}

// call makes a request and decodes the answer into out (when not nil),
// returning the status.
func (a *api) call(method, path string, body any, out any) int {
	a.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			a.t.Fatal(err)
		}
		r = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, a.url+path, r)
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			a.t.Fatalf("%s %s: %d, answer: %v", method, path, resp.StatusCode, err)
		}
	}
	return resp.StatusCode
}

func sampleLine(t *testing.T, id string) string {
	t.Helper()
	s := schema.Sample{V: schema.Version, ID: id, Task: "task " + id, Env: schema.Env{Backend: schema.BackendSim, Eval: "exit 0"},
		Script: []string{"```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"}}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A trainer on plain HTTP: a batch with a bad line submits nothing and
// names the line; a good one is stored; results are read by long polls on
// a durable consumer, a read not acknowledged (handed back, as a trainer
// that went away before acknowledging leaves it) comes again, and an
// acknowledged one never does: each trajectory is kept once.
func TestSubmitReadAcknowledge(t *testing.T) {
	a := newAPI(t)
	var bad SubmitReply
	batch := sampleLine(t, "h-0") + "\n" + `{"v":1,"id":"h-bad","task":"t"}` + "\n"
	if st := a.call("POST", "/v1/samples", batch, &bad); st != http.StatusBadRequest || len(bad.Errors) != 1 ||
		bad.Errors[0].Line != 2 || !strings.Contains(bad.Errors[0].Error, "env.backend") || bad.Accepted != 0 {
		t.Fatalf("a batch with a bad line: %d %+v", st, bad)
	}
	var dup SubmitReply
	if st := a.call("POST", "/v1/samples", "["+sampleLine(t, "h-0")+","+sampleLine(t, "h-0")+"]", &dup); st != http.StatusBadRequest ||
		len(dup.Errors) != 1 || !strings.Contains(dup.Errors[0].Error, "repeats line 1") {
		t.Fatalf("a repeated id: %d %+v", st, dup)
	}
	var ids []string
	var lines []string
	for i := range 6 {
		ids = append(ids, fmt.Sprintf("h-%d", i))
		lines = append(lines, sampleLine(t, ids[i]))
	}
	var ok SubmitReply
	if st := a.call("POST", "/v1/samples", strings.Join(lines, "\n"), &ok); st != http.StatusOK || ok.Accepted != 6 {
		t.Fatalf("submit: %d %+v", st, ok)
	}

	kept := map[string]int{}
	var handedBack []string
	testkit.Eventually(t, wait, "every result kept once", func() bool {
		var rr ReadReply
		if st := a.call("GET", "/v1/results?consumer=trainer&max=4&wait_ms=2000", nil, &rr); st != http.StatusOK {
			t.Fatalf("read: %d", st)
		}
		var acks, naks []string
		for _, d := range rr.Deliveries {
			id := d.Result.TrajID
			if !d.Result.Solved() || len(d.Result.Tokens) == 0 {
				t.Fatalf("%s: %s %q, %d tokens", id, d.Result.Status, d.Result.Reason, len(d.Result.Tokens))
			}
			if !slices.Contains(handedBack, id) { // the first time: hand it back unkept
				handedBack = append(handedBack, id)
				naks = append(naks, d.Ack)
				continue
			}
			kept[id]++
			acks = append(acks, d.Ack)
		}
		for path, toks := range map[string][]string{"/v1/ack": acks, "/v1/nak": naks} {
			var sr SettleReply
			if st := a.call("POST", path, SettleRequest{Acks: toks}, &sr); st != http.StatusOK || sr.Settled != len(toks) {
				t.Fatalf("%s: %d %+v", path, st, sr)
			}
		}
		return len(kept) == len(ids)
	})
	for _, id := range ids {
		if kept[id] != 1 {
			t.Errorf("%s kept %d times", id, kept[id])
		}
	}
	var rr ReadReply
	if st := a.call("GET", "/v1/results?consumer=trainer&wait_ms=300", nil, &rr); st != http.StatusOK || len(rr.Deliveries) != 0 {
		t.Fatalf("after every result was acknowledged: %d, %d deliveries", st, len(rr.Deliveries))
	}
	// Another trainer's consumer starts at the oldest result.
	testkit.Eventually(t, wait, "a second consumer to read the six", func() bool {
		var rr ReadReply
		a.call("GET", "/v1/results?consumer=other&max=64&wait_ms=1000", nil, &rr)
		return len(rr.Deliveries) == 6
	})

	// A sample id names one run: submitted again, it is refused naming the
	// id and the earlier run, not dropped in silence (issue 31, items 5
	// and 6).
	var again SubmitReply
	if st := a.call("POST", "/v1/samples", sampleLine(t, "h-new")+"\n"+sampleLine(t, "h-2"), &again); st != http.StatusConflict ||
		again.Accepted != 0 || len(again.Errors) != 1 || again.Errors[0].Line != 2 || again.Errors[0].ID != "h-2" ||
		!strings.Contains(again.Errors[0].Error, "id h-2: already used by an earlier run, whose result "+schema.SubjectResult("h-2")+" holds") {
		t.Fatalf("a batch with an id of a finished run: %d %+v", st, again)
	}
	if st := a.call("POST", "/v1/samples", sampleLine(t, "h-new"), &again); st != http.StatusOK || again.Accepted != 1 {
		t.Fatalf("a new id after a refused batch: %d %+v", st, again)
	}
	if st := a.call("POST", "/v1/samples", sampleLine(t, "h-new"), &again); st != http.StatusConflict || again.Accepted != 0 ||
		len(again.Errors) != 1 || !strings.Contains(again.Errors[0].Error, "id h-new: already used by a sample submitted within the last 2 minutes") {
		t.Fatalf("an id submitted just before: %d %+v", st, again)
	}
}

// A run's reader sees its run's results and groups only: the ids that
// start with "<run>.", whatever else the stream holds; its consumer name
// cannot be taken up for another run, for every run or for the other
// subject (409); and a batch submitted again as a retry (resubmit=true)
// is taken as stored, not refused.
func TestRunScopedReads(t *testing.T) {
	a := newAPI(t)
	group := func(id, gid string, index int) string {
		var s schema.Sample
		if err := json.Unmarshal([]byte(sampleLine(t, id)), &s); err != nil {
			t.Fatal(err)
		}
		s.GroupID, s.GroupIndex, s.GroupSize = gid, index, 2
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	mine := []string{"ra.0", "ra.1", "ra.g-0", "ra.g-1"}
	batch := []string{sampleLine(t, "ra.0"), sampleLine(t, "rb.0"), sampleLine(t, "ra.1"), sampleLine(t, "ra-0"),
		sampleLine(t, "rab.0"), group("ra.g-0", "ra.g", 0), group("ra.g-1", "ra.g", 1), group("rb.g-0", "rb.g", 0),
		group("rb.g-1", "rb.g", 1)}
	var rep SubmitReply
	if st := a.call("POST", "/v1/samples", strings.Join(batch, "\n"), &rep); st != http.StatusOK || rep.Accepted != len(batch) {
		t.Fatalf("submit: %d %+v", st, rep)
	}
	// The answer was lost, say: the same batch again as a retry is stored
	// already, every id of it.
	if st := a.call("POST", "/v1/samples?resubmit=true", strings.Join(batch, "\n"), &rep); st != http.StatusOK ||
		rep.Accepted != len(batch) || len(rep.Already) != len(batch) {
		t.Fatalf("the batch again, resubmit=true: %d %+v", st, rep)
	}
	if st := a.call("POST", "/v1/samples", batch[0], &rep); st != http.StatusConflict {
		t.Fatalf("an id again without resubmit: %d %+v", st, rep)
	}

	got := map[string]int{}
	testkit.Eventually(t, wait, "run ra's results", func() bool {
		var rr ReadReply
		if st := a.call("GET", "/v1/results?consumer=ra-results&run=ra&max=3&wait_ms=1000", nil, &rr); st != http.StatusOK {
			t.Fatalf("read run ra: %d", st)
		}
		var acks []string
		for _, d := range rr.Deliveries {
			got[d.Result.TrajID]++
			acks = append(acks, d.Ack)
		}
		var sr SettleReply
		if st := a.call("POST", "/v1/ack", SettleRequest{Acks: acks}, &sr); st != http.StatusOK || sr.Settled != len(acks) {
			t.Fatalf("ack: %d %+v", st, sr)
		}
		return len(got) >= len(mine)
	})
	for _, id := range mine {
		if got[id] != 1 {
			t.Errorf("run ra: %s read %d times, want once; read %v", id, got[id], got)
		}
	}
	if len(got) != len(mine) {
		t.Errorf("run ra read %v, want %v only", got, mine)
	}
	// The other runs' results came and were acknowledged unseen.
	var rr ReadReply
	if st := a.call("GET", "/v1/results?consumer=ra-results&run=ra&wait_ms=0", nil, &rr); st != http.StatusOK || len(rr.Deliveries) != 0 {
		t.Fatalf("run ra after its results: %d, %d deliveries", st, len(rr.Deliveries))
	}
	testkit.Eventually(t, wait, "run ra's group", func() bool {
		var rr ReadReply
		if st := a.call("GET", "/v1/groups?consumer=ra-groups&run=ra&wait_ms=1000", nil, &rr); st != http.StatusOK {
			t.Fatalf("groups of run ra: %d", st)
		}
		for _, d := range rr.Deliveries {
			if d.Group.GroupID != "ra.g" {
				t.Fatalf("run ra was handed group %s", d.Group.GroupID)
			}
			return true
		}
		return false
	})
	// A reader of every run still reads them all.
	all := map[string]bool{}
	testkit.Eventually(t, wait, "every result on a consumer of every run", func() bool {
		var rr ReadReply
		a.call("GET", "/v1/results?consumer=all&max=64&wait_ms=1000", nil, &rr)
		var acks []string
		for _, d := range rr.Deliveries {
			all[d.Result.TrajID] = true
			acks = append(acks, d.Ack)
		}
		a.call("POST", "/v1/ack", SettleRequest{Acks: acks}, nil)
		return len(all) == len(batch)
	})

	for _, c := range []struct{ path, says string }{
		{"/v1/results?consumer=ra-results&run=rb&wait_ms=0", "reads actloop.results.> of run ra, not actloop.results.> of run rb"},
		{"/v1/results?consumer=ra-results&wait_ms=0", "not actloop.results.> (every run)"},
		{"/v1/groups?consumer=ra-results&run=ra&wait_ms=0", "not actloop.groups.> of run ra"},
		{"/v1/results?consumer=all&run=ra&wait_ms=0", "reads actloop.results.> (every run), not actloop.results.> of run ra"},
	} {
		var e schema.APIError
		if st := a.call("GET", c.path, nil, &e); st != http.StatusConflict || !strings.Contains(e.Error, c.says) {
			t.Errorf("GET %s: %d %q, want 409 saying %q", c.path, st, e.Error, c.says)
		}
	}
}

// A batch that is wrong throughout gets a bounded answer: the first
// MaxLineErrors errors, each cut to MaxLineErrorBytes, and how many more
// were left out (issue 31, item 12); members of a group at odds are
// refused by line (item 8).
func TestSubmitErrorsBounded(t *testing.T) {
	a := newAPI(t)
	const n = 3 * MaxLineErrors
	long := strings.Repeat("x", 4*MaxLineErrorBytes)
	var lines []string
	for i := range n {
		lines = append(lines, fmt.Sprintf(`{"v":1,"id":"b-%d","task":"t","%s":1}`, i, long))
	}
	var bad SubmitReply
	if st := a.call("POST", "/v1/samples", strings.Join(lines, "\n"), &bad); st != http.StatusBadRequest ||
		len(bad.Errors) != MaxLineErrors || bad.Omitted != n-MaxLineErrors ||
		!strings.Contains(bad.Error, fmt.Sprintf("%d more left out", n-MaxLineErrors)) {
		t.Fatalf("a batch wrong throughout: %d, %d errors, %d omitted, %q", st, len(bad.Errors), bad.Omitted, bad.Error)
	}
	for _, e := range bad.Errors {
		if len(e.Error) > MaxLineErrorBytes+64 {
			t.Fatalf("line %d: error of %d bytes, want at most about %d", e.Line, len(e.Error), MaxLineErrorBytes)
		}
	}
	group := func(id string, index, size int) string {
		var s schema.Sample
		if err := json.Unmarshal([]byte(sampleLine(t, id)), &s); err != nil {
			t.Fatal(err)
		}
		s.GroupID, s.GroupIndex, s.GroupSize = "g1", index, size
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if st := a.call("POST", "/v1/samples", group("g-0", 0, 2)+"\n"+group("g-1", 0, 2)+"\n"+group("g-2", 1, 3), &bad); st != http.StatusBadRequest ||
		len(bad.Errors) != 2 || bad.Errors[0].Line != 2 || !strings.Contains(bad.Errors[0].Error, "group_index: 0 of group g1 is held by sample g-0") ||
		bad.Errors[1].Line != 3 || !strings.Contains(bad.Errors[1].Error, "group_size: 3, but sample g-0 of group g1 says 2") {
		t.Fatalf("a group at odds: %d %+v", st, bad)
	}
}

// Bad requests are refused naming what is wrong, and every call but the
// description needs the token.
func TestRefusals(t *testing.T) {
	a := newAPI(t)
	want := map[[2]string]float64{} // the answers by route and code
	for _, c := range []struct {
		method, path string
		body         any
		status       int
		says         string
	}{
		{"GET", "/v1/results?consumer=a.b", nil, http.StatusBadRequest, "consumer"},
		{"GET", "/v1/results?consumer=coordinator-results", nil, http.StatusBadRequest, "a service's consumer"},
		{"GET", "/v1/groups?consumer=predictor-history", nil, http.StatusBadRequest, "a service's consumer"},
		{"POST", "/v1/ack", SettleRequest{Acks: []string{"$JS.ACK.ACTLOOP_RESULTS.coordinator-results.1.1.1.1.0"}},
			http.StatusBadRequest, "a delivery of a service's consumer"},
		{"GET", "/v1/results?consumer=t&max=0", nil, http.StatusBadRequest, "max"},
		{"GET", "/v1/results?consumer=t&run=a.b", nil, http.StatusBadRequest, "run"},
		{"GET", "/v1/groups?consumer=t&run=", nil, http.StatusBadRequest, "run"},
		{"POST", "/v1/samples?resubmit=maybe", "", http.StatusBadRequest, "resubmit"},
		{"GET", "/v1/groups?consumer=t&wait_ms=3600001", nil, http.StatusBadRequest, "wait_ms"},
		{"POST", "/v1/ack", SettleRequest{Acks: []string{"$KV.actloop_control.state"}}, http.StatusBadRequest, "acks[0]"},
		{"POST", "/v1/samples", "", http.StatusBadRequest, "no sample"},
		{"POST", "/v1/abort", "", http.StatusBadRequest, "traj_ids"},
		{"POST", "/v1/resume", `{"weight_version": "x"}`, http.StatusBadRequest, "weight_version"},
		{"GET", "/v1/status", nil, http.StatusNotImplemented, "ACTLOOP_COORDINATOR_URL"},
	} {
		var e schema.APIError
		if st := a.call(c.method, c.path, c.body, &e); st != c.status || !strings.Contains(e.Error, c.says) {
			t.Errorf("%s %s: %d %q, want %d naming %q", c.method, c.path, st, e.Error, c.status, c.says)
		}
		path, _, _ := strings.Cut(c.path, "?")
		want[[2]string{c.method + " " + path, strconv.Itoa(c.status)}]++
	}
	a.token = "wrong"
	if st := a.call("GET", "/v1/control", nil, nil); st != http.StatusUnauthorized {
		t.Errorf("a wrong token: %d", st)
	}
	if st := a.call("GET", "/v1/openapi.yaml", nil, nil); st != http.StatusOK {
		t.Errorf("the description: %d", st)
	}
	want[[2]string{"GET /v1/control", "401"}]++
	want[[2]string{"GET /v1/openapi.yaml", "200"}]++
	want[[2]string{"POST /v1/ack", "200"}] = 0 // made at 0
	// Each answer is counted by route and code, and timed by route. A
	// request is counted once its handler has returned, which may be just
	// after its client has the answer: scrape until the counts are in.
	var fams map[string]*dto.MetricFamily
	scrape := func() {
		resp, err := http.Get(a.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		p := expfmt.NewTextParser(model.UTF8Validation)
		if fams, err = p.TextToMetricFamilies(resp.Body); err != nil {
			t.Fatal(err)
		}
	}
	count := func(route, code string) float64 {
		for _, m := range fams["actloop_gateway_requests_total"].GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["route"] == route && l["code"] == code {
				return m.GetCounter().GetValue()
			}
		}
		return -1
	}
	counted := func() bool {
		for k, n := range want {
			if count(k[0], k[1]) < n {
				return false
			}
		}
		return true
	}
	testkit.Poll(context.Background(), time.Minute, func() bool { scrape(); return counted() }) // the counts say what is missing
	for k, n := range want {
		if got := count(k[0], k[1]); got != n {
			t.Errorf("actloop_gateway_requests_total{route=%q,code=%q} = %g, want %g", k[0], k[1], got, n)
		}
	}
	if h := fams["actloop_gateway_request_seconds"]; len(h.GetMetric()) != len((&Gateway{}).routes()) {
		t.Errorf("actloop_gateway_request_seconds: %d series, want one per route", len(h.GetMetric()))
	}
}

// openapi.yaml lists exactly the calls the handler serves, each with the
// same method, and marks exactly the open ones as needing no token.
func TestOpenAPIMatchesHandlers(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]struct {
			Security *[]map[string][]string `yaml:"security"`
		} `yaml:"paths"`
	}
	if err := yaml.Unmarshal(openAPI, &doc); err != nil {
		t.Fatal(err)
	}
	described := map[string]bool{}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			key := strings.ToUpper(method) + " " + path
			described[key] = op.Security != nil && len(*op.Security) == 0 // security: [] = open
		}
	}
	served := map[string]bool{}
	for _, rt := range (&Gateway{}).routes() {
		served[rt.method+" "+rt.path] = rt.open
	}
	for k, open := range served {
		if d, ok := described[k]; !ok {
			t.Errorf("%s is served but not described", k)
		} else if d != open {
			t.Errorf("%s: open %v, described as open %v", k, open, d)
		}
	}
	for k := range described {
		if _, ok := served[k]; !ok {
			t.Errorf("%s is described but not served", k)
		}
	}
}
