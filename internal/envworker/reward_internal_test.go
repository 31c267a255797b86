package envworker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/agent"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/sandbox"
	"github.com/actloop/actloop/pkg/schema"
)

// The eval's JSON reward line: the last line that is a JSON object with a
// "reward" field gives the reward and its numeric fields the components,
// over the exit code and the listed tests; a reward that is not a finite
// number scores 0 naming the field; a timed-out eval scores 0.
func TestScoreEvalRewardLine(t *testing.T) {
	tests := &schema.Tests{FailToPass: []string{"t.py::a"}}
	tests2 := func() map[string]string { return map[string]string{"t.py::a": "PASSED"} }
	many := map[string]any{"reward": 1}
	for i := range schema.MaxRewardComponents + 1 {
		many[fmt.Sprint("c", i)] = i
	}
	manyLine, _ := json.Marshal(many)
	for _, tt := range []struct {
		name       string
		tests      *schema.Tests
		res        sandbox.ExecResult
		want       float64
		components map[string]float64
		wantTests  map[string]string
		note       string // part of the note; "" = none
	}{
		{name: "exit 0, no line", res: sandbox.ExecResult{Output: "ok\n"}, want: 1},
		{name: "exit 1, no line", res: sandbox.ExecResult{Output: "bad\n", ReturnCode: 1}, want: 0},
		{name: "line over exit code", res: sandbox.ExecResult{Output: "x\n{\"reward\": 0.7, \"pass_rate\": 0.5, \"label\": \"x\", \"n\": {\"a\": 1}}\n", ReturnCode: 1},
			want: 0.7, components: map[string]float64{"pass_rate": 0.5}},
		{name: "last line wins", res: sandbox.ExecResult{Output: `{"reward": 0.1, "a": 1}` + "\n" + `{"reward": 0.9}` + "\n"}, want: 0.9},
		{name: "line followed by text and other objects", res: sandbox.ExecResult{
			Output: "  {\"reward\": -0.5, \"len\": 1e3}\r\nbye\n{\"other\": 1}\n{oops}\n{\"reward\": 1\n", ReturnCode: 3},
			want: -0.5, components: map[string]float64{"len": 1000}},
		{name: "integer reward", res: sandbox.ExecResult{Output: `{"reward":2}`}, want: 2},
		{name: "string reward", res: sandbox.ExecResult{Output: `{"reward": "high"}`}, want: 0,
			note: `eval's JSON reward line: field "reward" is not a number: "high"`},
		{name: "null reward", res: sandbox.ExecResult{Output: `{"reward": null}` + "\n"}, want: 0, note: `field "reward" is not a number`},
		{name: "reward past float64", res: sandbox.ExecResult{Output: `{"reward": 1e999}`}, want: 0,
			note: `field "reward" is not a finite number: 1e999`},
		{name: "invalid last line does not fall back", res: sandbox.ExecResult{Output: `{"reward": 1}` + "\n" + `{"reward": "x"}`}, want: 0,
			note: `field "reward"`},
		{name: "component past float64", res: sandbox.ExecResult{Output: `{"reward": 1, "big": -1e400}`}, want: 0,
			note: `field "big" is not a finite number`},
		{name: "too many components", res: sandbox.ExecResult{Output: string(manyLine)}, want: 0,
			note: fmt.Sprintf("%d components, more than %d", schema.MaxRewardComponents+1, schema.MaxRewardComponents)},
		{name: "long component name", res: sandbox.ExecResult{Output: `{"reward": 1, "` + strings.Repeat("n", 129) + `": 1}`}, want: 0,
			note: "is not 1 to 128 bytes"},
		{name: "timed out", res: sandbox.ExecResult{Output: `{"reward": 1}`, TimedOut: true}, want: 0, note: "eval timed out"},
		{name: "tests without line", tests: tests, res: sandbox.ExecResult{Output: "PASSED t.py::a\n", ReturnCode: 1}, want: 1,
			wantTests: tests2()},
		{name: "line over tests", tests: tests, res: sandbox.ExecResult{Output: "PASSED t.py::a\n{\"reward\": 0.3, \"f2p\": 1}\n"},
			want: 0.3, components: map[string]float64{"f2p": 1}, wantTests: tests2()},
		{name: "tests, timed out with a line", tests: tests, res: sandbox.ExecResult{Output: "PASSED t.py::a\n{\"reward\": 1}", TimedOut: true},
			want: 0, wantTests: tests2(), note: "eval timed out"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ev := score(schema.Env{Tests: tt.tests}, tt.res)
			if ev.reward != tt.want || fmt.Sprint(ev.components) != fmt.Sprint(tt.components) ||
				fmt.Sprint(ev.tests) != fmt.Sprint(tt.wantTests) {
				t.Errorf("score = reward %v, components %v, tests %v; want %v, %v, %v", ev.reward, ev.components, ev.tests,
					tt.want, tt.components, tt.wantTests)
			}
			if tt.note == "" && ev.note != "" || !strings.Contains(ev.note, tt.note) {
				t.Errorf("note = %q, want one containing %q", ev.note, tt.note)
			}
		})
	}
}

// Any eval output gives a finite reward with components within bounds, or
// no line, or an error; never a panic. decodeReward alike on any answer.
func FuzzEvalRewardLine(f *testing.F) {
	f.Add("x\n{\"reward\": 0.5, \"a\": 1}\n")
	f.Add(`{"reward": 1e999}`)
	f.Add(`{"reward": 1, "reward": "x", "": 2}`)
	f.Add("{\"reward\":-0,\"b\":[1],\"c\":{\"reward\":1}}\r\n\n")
	f.Add("{\n\"reward\": 1}")
	f.Add(`{"reward":1,"\ud800":2}`)
	f.Fuzz(func(t *testing.T, out string) {
		check := func(r reward) {
			if math.IsNaN(r.value) || math.IsInf(r.value, 0) {
				t.Fatalf("reward %v is not finite", r.value)
			}
			if err := schema.CheckRewardComponents(r.components); err != nil {
				t.Fatalf("components %v: %v", r.components, err)
			}
			if _, ok := r.components[rewardKey]; ok {
				t.Fatal("reward is a component")
			}
		}
		if r, ok, err := evalRewardLine(out); ok && err == nil {
			check(r)
		} else if !ok && err != nil {
			t.Fatalf("no line, but an error: %v", err)
		}
		if r, err := decodeReward([]byte(out)); err == nil {
			check(r)
			if !json.Valid([]byte(out)) {
				t.Fatalf("a reward from invalid JSON %q", out)
			}
		}
	})
}

const agentSubmitMarker = agent.SubmitMarker

// rewardServer is a reward endpoint for tests: answer gives each call's
// status and body; it records the requests it got.
type rewardServer struct {
	*httptest.Server
	mu       sync.Mutex
	requests []schema.RewardRequest
	calls    atomic.Int32
}

func newRewardServer(t *testing.T, answer func(call int32, r *http.Request) (int, string)) *rewardServer {
	t.Helper()
	s := &rewardServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := s.calls.Add(1)
		b, _ := io.ReadAll(r.Body)
		var req schema.RewardRequest
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" || json.Unmarshal(b, &req) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.requests = append(s.requests, req)
		s.mu.Unlock()
		status, body := answer(n, r)
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *rewardServer) got() []schema.RewardRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]schema.RewardRequest(nil), s.requests...)
}

// finishWith runs endpointReward for a trajectory of sample s (its eval
// ev) as a finish step does, on a worker with cfg edited.
func finishWith(t *testing.T, edit func(*Config), s schema.Sample, ev evaluation) (finishedReward, error) {
	t.Helper()
	w := newTestWorker(t, edit)
	w.rewards.backoff = time.Millisecond
	tr := admit(t, w, s)
	f := finishedOf(ev)
	err := w.endpointReward(context.Background(), tr, ev, &f)
	return finishedReward{reward: f.Reward, components: f.RewardComponents, rewardError: f.RewardError, reason: f.Reason}, err
}

// finishedOf is the Finished of a submitted trajectory scored ev.
func finishedOf(ev evaluation) traj.Finished {
	return traj.Finished{Reason: traj.ReasonSubmitted, Reward: ev.reward, RewardComponents: ev.components, Tests: ev.tests}
}

type finishedReward struct {
	reward      float64
	components  map[string]float64
	rewardError string
	reason      string
}

func rewardSample(id, url string, retries int) schema.Sample {
	return schema.Sample{ID: id, Env: schema.Env{Backend: schema.BackendSim},
		Reward: &schema.RewardEndpoint{URL: url, Retries: &retries}, Metadata: json.RawMessage(`{"k":"v"}`)}
}

var evalRan = evaluation{reward: 1, components: map[string]float64{"lint": 1}, tests: map[string]string{"a": "PASSED"},
	run: &schema.RewardEval{ExitCode: 0, Output: "ok\n", Reward: 1, Components: map[string]float64{"lint": 1}}}

// A reward endpoint's answer is the reward, its other numeric fields the
// components; the request holds the trajectory and its eval.
func TestRewardEndpointAnswers(t *testing.T) {
	srv := newRewardServer(t, func(int32, *http.Request) (int, string) {
		return http.StatusOK, `{"reward": 0.75, "judge": 0.5, "note": "fine"}`
	})
	got, err := finishWith(t, func(c *Config) { c.RewardURLs = []string{srv.URL + "/"} },
		rewardSample("ok", srv.URL+"/score", 0), evalRan)
	if err != nil || got.reward != 0.75 || fmt.Sprint(got.components) != "map[judge:0.5]" || got.rewardError != "" {
		t.Fatalf("endpointReward = %+v, %v; want reward 0.75, components judge", got, err)
	}
	reqs := srv.got()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.V != schema.Version || r.TrajID != "ok" || r.SampleID != "ok" || r.GroupID != "ok" || r.Eval == nil ||
		r.Eval.Reward != 1 || r.Eval.Output != "ok\n" || r.Eval.Components["lint"] != 1 || r.Tests["a"] != "PASSED" ||
		string(r.Metadata) != `{"k":"v"}` || r.Messages == nil {
		t.Fatalf("request %+v", r)
	}
}

// The deployment's ACTLOOP_REWARD_URL serves a sample that names none,
// ACTLOOP_REWARD_URLS or no, with the sample's timeout and retries; a
// sample without eval gets eval null.
func TestRewardEndpointOfTheDeployment(t *testing.T) {
	srv := newRewardServer(t, func(int32, *http.Request) (int, string) { return http.StatusOK, `{"reward": 3}` })
	got, err := finishWith(t, func(c *Config) { c.RewardURL = srv.URL + "/r" },
		schema.Sample{ID: "dep", Env: schema.Env{Backend: schema.BackendSim}}, evaluation{note: "no eval command"})
	if err != nil || got.reward != 3 || got.components != nil || got.rewardError != "" {
		t.Fatalf("endpointReward = %+v, %v; want reward 3", got, err)
	}
	if reqs := srv.got(); len(reqs) != 1 || reqs[0].Eval != nil {
		t.Fatalf("requests %+v, want one with eval null", reqs)
	}
}

// A 5xx is tried again (after a back-off), and the next answer counts.
func TestRewardEndpointRetriesAfter5xx(t *testing.T) {
	srv := newRewardServer(t, func(n int32, _ *http.Request) (int, string) {
		if n == 1 {
			return http.StatusServiceUnavailable, "busy"
		}
		return http.StatusOK, `{"reward": 1, "x": 2}`
	})
	got, err := finishWith(t, func(c *Config) { c.RewardURLs = []string{srv.URL + "/"} },
		rewardSample("retry", srv.URL+"/score", 2), evalRan)
	if err != nil || got.reward != 1 || got.components["x"] != 2 || got.rewardError != "" {
		t.Fatalf("endpointReward = %+v, %v; want reward 1 after a retry", got, err)
	}
	if n := srv.calls.Load(); n != 2 {
		t.Fatalf("%d calls, want 2", n)
	}
}

// A 4xx is final: no retry; reward 0, components gone, the status kept
// and reward_error saying why.
func TestRewardEndpoint4xxIsFinal(t *testing.T) {
	srv := newRewardServer(t, func(int32, *http.Request) (int, string) { return http.StatusBadRequest, "no such task" })
	got, err := finishWith(t, func(c *Config) { c.RewardURLs = []string{srv.URL + "/"} },
		rewardSample("four", srv.URL+"/score", 5), evalRan)
	if err != nil || got.reward != 0 || got.components != nil ||
		!strings.Contains(got.rewardError, "http status 400: no such task") || !strings.Contains(got.reason, "reward_error") {
		t.Fatalf("endpointReward = %+v, %v; want reward 0 and the 400 in reward_error", got, err)
	}
	if n := srv.calls.Load(); n != 1 {
		t.Fatalf("%d calls, want 1 (no retry on a 4xx)", n)
	}
}

// An answer without a finite reward is final too.
func TestRewardEndpointBadAnswer(t *testing.T) {
	for _, body := range []string{`{"score": 1}`, `{"reward": "1"}`, `not json`, `[1]`} {
		srv := newRewardServer(t, func(int32, *http.Request) (int, string) { return http.StatusOK, body })
		got, err := finishWith(t, func(c *Config) { c.RewardURL = srv.URL + "/" }, schema.Sample{ID: "bad",
			Env: schema.Env{Backend: schema.BackendSim}}, evalRan)
		if err != nil || got.reward != 0 || !strings.Contains(got.rewardError, "answer: ") || srv.calls.Load() != 1 {
			t.Errorf("answer %s: %+v, %v (%d calls); want reward 0, reward_error naming the answer, one call",
				body, got, err, srv.calls.Load())
		}
	}
}

// An attempt that gets no answer within the timeout is tried again; when
// none answers, the reward is 0 and reward_error names the timeout.
func TestRewardEndpointTimeout(t *testing.T) {
	srv := newRewardServer(t, func(_ int32, r *http.Request) (int, string) {
		<-r.Context().Done() // the client gave up
		return http.StatusOK, `{"reward": 1}`
	})
	s := rewardSample("slow", srv.URL+"/score", 1)
	s.Reward.TimeoutMS = 50
	got, err := finishWith(t, func(c *Config) { c.RewardURLs = []string{srv.URL + "/"} }, s, evalRan)
	if err != nil || got.reward != 0 || !strings.Contains(got.rewardError, "after 2 attempts: no answer within the timeout (50ms") {
		t.Fatalf("endpointReward = %+v, %v; want reward 0, reward_error naming the timeout after 2 attempts", got, err)
	}
}

// A sample may name only a URL that ACTLOOP_REWARD_URLS allows (or
// ACTLOOP_REWARD_URL): another is not called, and reward_error names the
// setting.
func TestRewardEndpointURLNotAllowed(t *testing.T) {
	srv := newRewardServer(t, func(int32, *http.Request) (int, string) { return http.StatusOK, `{"reward": 1}` })
	for _, tt := range []struct {
		name     string
		prefixes []string
		url      string
		want     string
	}{
		{"no prefixes", nil, srv.URL + "/score", "ACTLOOP_REWARD_URLS is empty"},
		{"another host", []string{"http://judge.internal:8000/"}, srv.URL + "/score", "starts with no prefix in ACTLOOP_REWARD_URLS"},
		{"another path", []string{srv.URL + "/reward/"}, srv.URL + "/admin", "starts with no prefix in ACTLOOP_REWARD_URLS"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := finishWith(t, func(c *Config) { c.RewardURLs = tt.prefixes }, rewardSample("far", tt.url, 0), evalRan)
			if err != nil || got.reward != 0 || got.components != nil || !strings.Contains(got.rewardError, tt.want) {
				t.Fatalf("endpointReward = %+v, %v; want reward 0, reward_error containing %q", got, err, tt.want)
			}
		})
	}
	if n := srv.calls.Load(); n != 0 {
		t.Fatalf("%d calls to a URL not allowed", n)
	}
	// ACTLOOP_REWARD_URL itself is allowed, whatever ACTLOOP_REWARD_URLS.
	got, err := finishWith(t, func(c *Config) { c.RewardURL = srv.URL + "/score" }, rewardSample("own", srv.URL+"/score", 0), evalRan)
	if err != nil || got.reward != 1 || got.rewardError != "" {
		t.Fatalf("the deployment's own URL: %+v, %v", got, err)
	}
}

// A redirect is not followed: an allowed endpoint cannot send the
// env-worker to a URL that is not.
func TestRewardEndpointRedirectNotFollowed(t *testing.T) {
	var hit atomic.Bool
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hit.Store(true)
		_, _ = io.WriteString(w, `{"reward": 1}`)
	}))
	t.Cleanup(other.Close)
	srv := newRewardServer(t, func(_ int32, _ *http.Request) (int, string) { return http.StatusTemporaryRedirect, "" })
	srv.Config.Handler = http.RedirectHandler(other.URL, http.StatusTemporaryRedirect)
	got, err := finishWith(t, func(c *Config) { c.RewardURL = srv.URL + "/" }, schema.Sample{ID: "redir",
		Env: schema.Env{Backend: schema.BackendSim}}, evalRan)
	if err != nil || got.reward != 0 || !strings.Contains(got.rewardError, "redirects are not followed") || hit.Load() {
		t.Fatalf("endpointReward = %+v, %v (redirect target hit: %v)", got, err, hit.Load())
	}
}

// The worker stopping while it asks hands the step back: no reward of 0
// is committed for it.
func TestRewardEndpointStopping(t *testing.T) {
	in := make(chan struct{})
	var once sync.Once
	srv := newRewardServer(t, func(_ int32, r *http.Request) (int, string) {
		once.Do(func() { close(in) })
		<-r.Context().Done()
		return http.StatusOK, `{"reward": 1}`
	})
	w := newTestWorker(t, func(c *Config) { c.RewardURL = srv.URL + "/" })
	tr := admit(t, w, schema.Sample{ID: "stop", Env: schema.Env{Backend: schema.BackendSim}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-in // the call is in: the worker stops
		cancel()
	}()
	f := finishedOf(evalRan)
	if err := w.endpointReward(ctx, tr, evalRan, &f); err == nil {
		t.Fatalf("endpointReward with ctx ended = nil, want ctx's error (reward %v, %q)", f.Reward, f.RewardError)
	}
}

// ACTLOOP_REWARD_* are checked at start, each naming itself.
func TestRewardConfigValidate(t *testing.T) {
	for _, tt := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.RewardURL = "ftp://x/" }, "ACTLOOP_REWARD_URL: must be an http or https URL"},
		{func(c *Config) { c.RewardURLs = []string{"http://judge"} }, `ACTLOOP_REWARD_URLS: "http://judge" must be written`},
		{func(c *Config) { c.RewardURLs = []string{"http:judge/"} }, "ACTLOOP_REWARD_URLS"},
		{func(c *Config) { c.RewardTimeout = 0 }, "ACTLOOP_REWARD_TIMEOUT"},
		{func(c *Config) { c.RewardTimeout = 2 * time.Hour }, "ACTLOOP_REWARD_TIMEOUT"},
		{func(c *Config) { c.RewardRetries = schema.MaxRewardRetries + 1 }, "ACTLOOP_REWARD_RETRIES: must be in [0, 10]"},
		{func(c *Config) {
			c.RewardURL, c.RewardURLs = "https://judge:8000/score", []string{"https://judge:8000/", "HTTP://j/x/"}
		}, ""},
	} {
		var cfg Config
		service.Defaults(&cfg)
		cfg.NATSURL, cfg.SandboxRoot = "nats://127.0.0.1:4222", t.TempDir()
		tt.edit(&cfg)
		err := cfg.Validate()
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("Validate: %v, want %q", err, tt.want)
		}
	}
}

// runTo drives tr through its start step and actions (each the model's
// reply, run in the local sandbox) to its finish, committing each step as
// the driver does, and returns it loaded as a finish step loads it.
func runTo(t *testing.T, w *Worker, tr *traj.Trajectory, actions ...string) *traj.Trajectory {
	t.Helper()
	ctx := context.Background()
	reload := func() *traj.Trajectory {
		t.Helper()
		cur, err := w.d.Store.Load(ctx, tr.ID, traj.WithAll)
		if err != nil {
			t.Fatal(err)
		}
		return cur
	}
	commit := func(cur *traj.Trajectory, next traj.Transition) {
		t.Helper()
		if err := w.d.Store.Commit(ctx, cur, next); err != nil {
			t.Fatalf("commit %T: %v", next, err)
		}
	}
	got := await(t, startAsync(w, tr), 30*time.Second)
	if got.err != nil {
		t.Fatalf("start step: %v", got.err)
	}
	commit(reload(), got.next)
	for _, a := range actions {
		cur := reload()
		commit(cur, traj.Generated{Turn: traj.Turn{Output: []int32{1}, Logprobs: []float32{0}, Text: "```bash\n" + a + "\n```"}, Action: a})
		cur = reload()
		next, err := w.execStep(ctx, cur)
		if err != nil {
			t.Fatalf("exec step %q: %v", a, err)
		}
		commit(cur, next)
	}
	return reload()
}

// End to end through a real finish step, in the local (bash) sandbox: the
// agent's change is evaluated in a fresh sandbox whose eval prints a JSON
// reward line, and the reward endpoint, given the trajectory with its
// diff, eval and messages, gives the result's reward and components.
func TestFinishStepRewardEndpoint(t *testing.T) {
	srv := newRewardServer(t, func(int32, *http.Request) (int, string) {
		return http.StatusOK, `{"reward": 0.5, "judge": 0.25}`
	})
	w := newTestWorker(t, func(c *Config) { c.RewardURLs = []string{srv.URL + "/"} })
	retries := 0
	s := schema.Sample{ID: "e2e", Env: schema.Env{Backend: schema.BackendLocal,
		Setup: []string{"git init -q ."}, // the diff is git's
		Eval:  `echo checking; grep -q new f.txt && echo '{"reward": 0.8, "pass_rate": 1}'; exit 1`},
		Reward: &schema.RewardEndpoint{URL: srv.URL + "/reward", Retries: &retries}, Metadata: json.RawMessage(`{"task":7}`)}
	tr := runTo(t, w, admit(t, w, s), "echo new > f.txt", "echo "+agentSubmitMarker)
	if tr.Status != traj.StatusFinishing {
		t.Fatalf("after the submission: %s, want finishing", tr.Status)
	}
	next, err := w.finishStep(context.Background(), tr)
	if err != nil {
		t.Fatalf("finish step: %v", err)
	}
	if err := w.d.Store.Commit(context.Background(), tr, next); err != nil {
		t.Fatal(err)
	}
	end, err := w.d.Store.Load(context.Background(), tr.ID, traj.WithAll)
	if err != nil {
		t.Fatal(err)
	}
	r := traj.Result(end, schema.DefaultControl())
	if r.Status != schema.StatusSubmitted || r.Reward != 0.5 || fmt.Sprint(r.RewardComponents) != "map[judge:0.25]" || r.RewardError != "" {
		t.Fatalf("result: %s, reward %v, components %v, reward_error %q (%s); want submitted, 0.5, judge",
			r.Status, r.Reward, r.RewardComponents, r.RewardError, r.Reason)
	}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	reqs := srv.got()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	q := reqs[0]
	if q.TrajID != "e2e" || q.Status != schema.StatusSubmitted || !strings.Contains(q.Diff, "+new") || q.Eval == nil ||
		q.Eval.ExitCode != 1 || q.Eval.Reward != 0.8 || q.Eval.Components["pass_rate"] != 1 ||
		!strings.Contains(q.Eval.Output, "checking") || len(q.Messages) < 3 || string(q.Metadata) != `{"task":7}` {
		t.Fatalf("request: %+v", q)
	}
}

// Without an endpoint, the eval's JSON reward line is the result's reward
// and components, through the same finish step; a trajectory ended by a
// limit is not scored under ACTLOOP_REWARD_ON=submitted, and the endpoint
// is not asked.
func TestFinishStepEvalRewardLine(t *testing.T) {
	w := newTestWorker(t, nil)
	s := schema.Sample{ID: "line", Env: schema.Env{Backend: schema.BackendLocal,
		Eval: `printf 'noise\n{"reward": 0.25, "steps": 3}\n'; exit 0`}}
	tr := runTo(t, w, admit(t, w, s), "echo "+agentSubmitMarker)
	next, err := w.finishStep(context.Background(), tr)
	if err != nil {
		t.Fatal(err)
	}
	f, ok := next.(traj.Finished)
	if !ok || f.Reward != 0.25 || fmt.Sprint(f.RewardComponents) != "map[steps:3]" || f.RewardError != "" {
		t.Fatalf("finish step = %#v, want reward 0.25, components steps", next)
	}

	srv := newRewardServer(t, func(int32, *http.Request) (int, string) { return http.StatusOK, `{"reward": 1}` })
	w = newTestWorker(t, func(c *Config) { c.RewardURL = srv.URL + "/" })
	tr = runTo(t, w, admit(t, w, schema.Sample{ID: "limit", Env: schema.Env{Backend: schema.BackendLocal, Eval: "true"}}))
	if err := w.d.Store.Commit(context.Background(), tr, traj.LimitReached{Limit: schema.LimitStep, Reason: "limits exceeded"}); err != nil {
		t.Fatal(err)
	}
	tr, err = w.d.Store.Load(context.Background(), tr.ID, traj.WithAll)
	if err != nil {
		t.Fatal(err)
	}
	next, err = w.finishStep(context.Background(), tr)
	if f, ok := next.(traj.Finished); err != nil || !ok || f.Reward != 0 || !strings.Contains(f.Reason, "ACTLOOP_REWARD_ON=submitted") {
		t.Fatalf("finish step of a limit's end = %#v, %v", next, err)
	}
	if n := srv.calls.Load(); n != 0 {
		t.Fatalf("the endpoint was asked %d times for a trajectory not scored", n)
	}
}
