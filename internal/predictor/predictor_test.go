package predictor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/predict"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/sim"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/schema"
)

// History (and the learned backend, which answers as History until it has
// examples enough) learns from results on actloop.results, each counted
// once however often it is delivered, and predicts for a sibling; two
// instances share the work.
func TestHistoryLearnsFromResults(t *testing.T) {
	for _, backend := range []string{BackendHistory, BackendLearned} {
		for _, kind := range testkit.RedisKinds(t) {
			t.Run(backend+"/"+kind, func(t *testing.T) { historyLearns(t, backend, kind) })
		}
	}
}

func historyLearns(t *testing.T, backend, kind string) {
	e := newEnv(t, kind)
	d := e.start(t, Config{Backend: backend, Timeout: wait})
	e.start(t, Config{Backend: backend, Timeout: wait})

	if rep := e.ask(t, request("g-2", "g", 1, 100)); !strings.Contains(rep.Error, "no finished trajectories") {
		t.Fatalf("before any result: %+v, want an error saying there is no evidence", rep)
	}
	_ = e.ask(t, request("g-1", "g", 2, 300)) // the learned backend keeps it for g-1's result
	ctx := context.Background()
	publish := func(msgID string, r schema.Result) {
		t.Helper()
		if err := d.Results.Publish(ctx, r, msgID); err != nil {
			t.Fatal(err)
		}
	}
	publish("g-0", result("g-0", "g", schema.StatusSubmitted, 1000, 5))
	// A copy of g-0's head, as a publisher that does not ask for the
	// subject to be empty would leave.
	stream, err := d.JS.Stream(ctx, schema.StreamResults)
	if err != nil {
		t.Fatal(err)
	}
	head, err := stream.GetLastMsgForSubject(ctx, schema.SubjectResult("g-0"))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.pub.PublishRaw(ctx, schema.SubjectResult("g-0"), "g-0-again", head.Data); err != nil {
		t.Fatal(err)
	}
	publish("g-1", result("g-1", "g", schema.StatusSubmitted, 2000, 9))
	publish("g-3", result("g-3", "g", schema.StatusFallback, 10, 1))
	if err := e.pub.PublishRaw(ctx, schema.SubjectResult("junk"), "junk", []byte(`{"v":1,"traj_id":"`)); err != nil {
		t.Fatal(err)
	}

	js := d.JS
	testkit.Eventually(t, wait, "every result observed", func() bool {
		c, err := js.Consumer(ctx, schema.StreamResults, HistoryConsumer)
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0 && info.Delivered.Consumer >= 5
	})
	want := schema.PredictReply{V: schema.Version, RemainingTokens: 1400, RemainingTurns: 6, Source: predict.SourceGroup}
	if rep := e.ask(t, request("g-2", "g", 1, 100)); rep != want {
		t.Fatalf("sibling: %+v, want %+v", rep, want)
	}
	testkit.Eventually(t, wait, "the junk result dead-lettered", func() bool {
		s, err := js.Stream(ctx, schema.StreamDLQ)
		if err != nil {
			return false
		}
		info, err := s.Info(ctx)
		return err == nil && info.State.Msgs == 1
	})
	if backend == BackendLearned {
		if n, err := e.rdb.HGet(ctx, "actloop:{predict}:learned", "0").Float64(); err != nil || n != 1 {
			t.Fatalf("examples learned = %v (%v), want 1: g-1's", n, err)
		}
	}
}

// The http backend sends the model server the request's fields with the
// conversation read from the store (bounded by ACTLOOP_PREDICTOR_MESSAGES_BYTES)
// and the group siblings' progress, learned from actloop.results.
func TestHTTPBackend(t *testing.T) {
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.Store(string(b))
		_, _ = io.WriteString(w, `{"remaining_tokens": 321.5, "remaining_turns": 2}`)
	}))
	t.Cleanup(srv.Close)
	e := newEnv(t, testkit.PreferredRedis(t))
	d := e.start(t, Config{Backend: BackendHTTP, URL: srv.URL, Timeout: wait, MessagesBytes: 1 << 10,
		Chat: tokenize.Chat{Tokenizer: tokenize.TokenizerBytes, ChatTemplate: tokenize.TemplateChatML}})
	ctx := context.Background()
	msgs := []schema.Message{{Role: "system", Content: "sys"}, {Role: "user", Content: "Fix it."},
		{Role: "assistant", Content: "```bash\nls\n```"}}
	if err := traj.New(e.rdb, nil).Put(ctx, &traj.Trajectory{ID: "h-0", Status: traj.StatusNeedsEnvStep, Seq: 1,
		Sample: schema.Sample{V: schema.Version, ID: "h-0", GroupID: "h", Task: "Fix it."}, Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	seen := func() predict.HTTPRequest {
		t.Helper()
		r, err := predict.DecodeHTTPRequest([]byte(got.Load().(string)))
		if err != nil {
			t.Fatalf("model server got %v: %v", got.Load(), err)
		}
		return r
	}
	req := request("h-0", "h", 1, 400)
	want := schema.PredictReply{V: schema.Version, RemainingTokens: 321.5, RemainingTurns: 2, Source: predict.SourceHTTP}
	if rep := e.ask(t, req); rep != want {
		t.Fatalf("reply %+v, want %+v", rep, want)
	}
	r := seen()
	if r.PredictRequest != req || r.Protocol != predict.HTTPProtocol || r.Conversation == nil ||
		!slices.Equal(r.Conversation.Messages, msgs) || r.Siblings == nil || len(r.Siblings.Finished) != 0 {
		t.Fatalf("model server saw %+v, want %+v with its conversation and no finished sibling", r, req)
	}

	if err := d.Results.Publish(ctx, result("h-1", "h", schema.StatusSubmitted, 1000, 5), "h-1"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, wait, "h-1's result observed", func() bool {
		_ = e.ask(t, request("h-2", "h", 1, 10))
		s := seen().Siblings
		return len(s.Finished) == 1 && s.Finished[0] == predict.SiblingTotal{GenTokens: 1000, Turns: 5}
	})
	if s := seen().Siblings; len(s.Running) != 1 || s.Running[0] != (predict.SiblingProgress{TrajID: "h-0", GenTokens: 400, Turns: 1}) {
		t.Fatalf("running siblings %+v, want h-0's progress", s.Running)
	}
}

func TestOracleBackend(t *testing.T) {
	simSrv := httptest.NewServer(sim.New(sim.Config{Seed: 21, MaxTurns: 8}))
	t.Cleanup(simSrv.Close)
	e := newEnv(t, testkit.PreferredRedis(t))
	e.start(t, Config{Backend: BackendOracle, OracleURL: simSrv.URL, Timeout: wait, Chat: tokenize.Chat{Tokenizer: tokenize.TokenizerBytes}})

	chat := tokenize.NewByteChatML()
	prompt := slices.Concat(chat.Message("system", "sys"), chat.Message("user", "Make the tests pass."))
	// Play the conversation to its end to know the truth.
	var outs [][]int32
	in := slices.Clone(prompt)
	for len(outs) < 20 {
		in = append(in, chat.GenerationPrompt()...)
		out := simGenerate(t, simSrv.URL, in)
		outs = append(outs, out)
		if strings.Contains(tokenize.Bytes{}.Decode(out), sim.Submission) {
			break
		}
		in = slices.Concat(in, out, chat.CloseTurn(out), chat.Message("user", "ok"))
	}
	// The store holds the trajectory after its first turn.
	st := traj.New(e.rdb, nil)
	ctx := context.Background()
	toks := slices.Concat(prompt, chat.GenerationPrompt(), outs[0], chat.CloseTurn(outs[0]))
	if err := st.Put(ctx, &traj.Trajectory{ID: "o-0", Status: traj.StatusNeedsEnvStep, Seq: 1,
		Sample: schema.Sample{V: schema.Version, ID: "o-0", Task: "Make the tests pass."}, Tokens: toks,
		Logprobs: make([]float32, len(toks)), Mask: make([]int8, len(toks)), Versions: make([]int32, len(toks))}); err != nil {
		t.Fatal(err)
	}
	want := schema.PredictReply{V: schema.Version, RemainingTurns: float64(len(outs) - 1), Source: predict.SourceOracle}
	for _, o := range outs[1:] {
		want.RemainingTokens += float64(len(o))
	}
	if rep := e.ask(t, request("o-0", "", 1, len(outs[0]))); rep != want {
		t.Fatalf("reply %+v, want %+v (%d turns in all)", rep, want, len(outs))
	}
	if rep := e.ask(t, request("o-missing", "", 1, 10)); !strings.Contains(rep.Error, "not found") {
		t.Fatalf("unknown trajectory: %+v, want an error", rep)
	}
}

func simGenerate(t *testing.T, url string, input []int32) []int32 {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"input_ids": input,
		"sampling_params": map[string]any{"max_new_tokens": 4096, "stop_token_ids": []int32{tokenize.ImEnd}}})
	resp, err := http.Post(url+"/generate", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		OutputIDs []int32 `json:"output_ids"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("generate: %d %v", resp.StatusCode, err)
	}
	return out.OutputIDs
}

// A backend slower than the deadline: the caller gets an error reply, and
// the gateway goes on answering.
func TestSlowBackendAnswersWithError(t *testing.T) {
	var slow atomic.Bool
	slow.Store(true)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read the body: only then does the server notice the client going.
		_, _ = io.Copy(io.Discard, r.Body)
		if slow.Load() {
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		_, _ = io.WriteString(w, `{"remaining_tokens": 1, "remaining_turns": 1}`)
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	e := newEnv(t, testkit.PreferredRedis(t))
	// Long enough for a quick answer on a loaded machine.
	e.start(t, Config{Backend: BackendHTTP, URL: srv.URL, Timeout: 2 * time.Second})
	rep := e.ask(t, request("s-0", "", 1, 10))
	if !strings.Contains(rep.Error, "deadline exceeded") || rep.RemainingTokens != 0 {
		t.Fatalf("slow backend: %+v, want a deadline error", rep)
	}
	slow.Store(false)
	if rep := e.ask(t, request("s-1", "", 1, 10)); rep.Error != "" {
		t.Fatalf("after the slow one: %+v", rep)
	}
}

// Requests run concurrently: four requests that a backend answers only
// once all four have arrived all get answers.
func TestRequestsRunConcurrently(t *testing.T) {
	const n = 4
	var arrived atomic.Int32
	all := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if arrived.Add(1) == n {
			close(all)
		}
		select {
		case <-all:
			_, _ = io.WriteString(w, `{"remaining_tokens": 5, "remaining_turns": 1}`)
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	e := newEnv(t, testkit.PreferredRedis(t))
	e.start(t, Config{Backend: BackendHTTP, URL: srv.URL, Timeout: wait})
	e.ask(t, []byte(`{}`)) // wait for the subscription
	var wg sync.WaitGroup
	reps := make([]schema.PredictReply, n)
	for i := range n {
		wg.Go(func() { reps[i] = e.ask(t, request(fmt.Sprintf("c-%d", i), "", 1, 1)) })
	}
	wg.Wait()
	for i, rep := range reps {
		if rep.Error != "" || rep.RemainingTokens != 5 {
			t.Fatalf("request %d: %+v", i, rep)
		}
	}
}

func TestMalformedRequests(t *testing.T) {
	e := newEnv(t, testkit.PreferredRedis(t))
	e.start(t, Config{Backend: BackendHistory, Timeout: wait})
	tests := []struct {
		name, body, wantField string
	}{
		{"not JSON", `{"v":1,"traj_id":`, "(message)"},
		{"empty", ``, "(message)"},
		{"no version", `{"traj_id":"a","turns":1}`, "v: missing"},
		{"other version", `{"v":2,"traj_id":"a"}`, "v: unsupported"},
		{"no traj_id", `{"v":1,"turns":1}`, "traj_id"},
		{"bad traj_id", `{"v":1,"traj_id":"a b"}`, "traj_id"},
		{"negative turns", `{"v":1,"traj_id":"a","turns":-1}`, "turns"},
		{"gen_tokens type", `{"v":1,"traj_id":"a","gen_tokens":"5"}`, "gen_tokens"},
		{"negative turn_seq", `{"v":1,"traj_id":"a","turn_seq":-3}`, "seq"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := e.ask(t, []byte(tt.body))
			if !strings.HasPrefix(rep.Error, "bad request: ") || !strings.Contains(rep.Error, tt.wantField) {
				t.Fatalf("reply %+v does not name %q", rep, tt.wantField)
			}
		})
	}
	// The gateway is still there.
	if rep := e.ask(t, request("a", "", 0, 0)); !strings.Contains(rep.Error, "no finished trajectories") {
		t.Fatalf("after bad requests: %+v", rep)
	}
}

func TestHealth(t *testing.T) {
	e := newEnv(t, testkit.PreferredRedis(t))
	var g *Gateway
	e.start(t, Config{Backend: BackendHistory, Timeout: wait}, func(gw *Gateway) { g = gw })
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s", path, resp.Status)
		}
	}
	http.DefaultClient.CloseIdleConnections()
}

func TestRunRejectsBadSettings(t *testing.T) {
	e := newEnv(t, testkit.PreferredRedis(t))
	for _, cfg := range []Config{
		{Backend: "nope", Timeout: time.Second},
		{Backend: BackendHTTP},
		{Backend: BackendOracle, OracleURL: "localhost:30000"},
	} {
		cfg.Common = e.c
		err := New(cfg, e.deps(t)).Run(context.Background())
		if err == nil || !strings.Contains(err.Error(), "ACTLOOP_") {
			t.Fatalf("Run(%+v) = %v, want an error naming the setting", cfg, err)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	base := func() Config {
		var c Config
		c.Common = service.CommonDefaults()
		c.Backend, c.Timeout, c.Addr = BackendHistory, 200*time.Millisecond, ":8083"
		c.Tokenizer, c.ChatTemplate = "qwen", "chatml"
		c.MessagesBytes = predict.DefaultMessagesBytes
		return c
	}
	tests := []struct {
		name string
		edit func(*Config)
		want []string // each must appear in the error; none = valid
	}{
		{"defaults", func(*Config) {}, nil},
		{"http", func(c *Config) { c.Backend, c.URL = BackendHTTP, "http://model:9000/predict" }, nil},
		{"http without messages", func(c *Config) {
			c.Backend, c.URL, c.MessagesBytes, c.ChatTemplate = BackendHTTP, "http://model:9000/predict", 0, "alpaca"
		}, nil},
		{"http messages bytes", func(c *Config) {
			c.Backend, c.URL, c.MessagesBytes = BackendHTTP, "http://model:9000/predict", predict.MaxMessagesBytes+1
		}, []string{"ACTLOOP_PREDICTOR_MESSAGES_BYTES"}},
		{"http with an unknown template", func(c *Config) {
			c.Backend, c.URL, c.ChatTemplate = BackendHTTP, "http://model:9000/predict", "alpaca"
		}, []string{"ACTLOOP_CHAT_TEMPLATE"}},
		{"oracle", func(c *Config) { c.Backend, c.OracleURL = BackendOracle, "http://sim:30000" }, nil},
		{"unknown backend", func(c *Config) { c.Backend = "magic" }, []string{"ACTLOOP_PREDICTOR: unknown backend"}},
		{"http without url", func(c *Config) { c.Backend = BackendHTTP }, []string{"ACTLOOP_PREDICTOR_URL: missing"}},
		{"http bad url", func(c *Config) { c.Backend, c.URL = BackendHTTP, "model:9000" }, []string{"ACTLOOP_PREDICTOR_URL"}},
		{"oracle without url", func(c *Config) { c.Backend = BackendOracle }, []string{"ACTLOOP_ORACLE_URL: missing"}},
		{"oracle with an unknown template", func(c *Config) { c.Backend, c.OracleURL, c.ChatTemplate = BackendOracle, "http://sim:30000", "alpaca" },
			[]string{"ACTLOOP_CHAT_TEMPLATE"}},
		{"timeout", func(c *Config) { c.Timeout = 0 }, []string{"ACTLOOP_PREDICTOR_TIMEOUT"}},
		{"every problem", func(c *Config) { c.Backend, c.Timeout, c.NATSURL = BackendOracle, -1, "" },
			[]string{"ACTLOOP_ORACLE_URL", "ACTLOOP_PREDICTOR_TIMEOUT", "ACTLOOP_NATS_URL"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base()
			tt.edit(&c)
			err := c.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate passed, want %v", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("Validate: %v, want it to name %q", err, w)
				}
			}
		})
	}
}
