package predict_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/predict"
	"github.com/actloop/actloop/internal/sim"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/schema"
)

var chat = tokenize.NewByteChatML()

func startSim(t testing.TB, cfg sim.Config) string {
	t.Helper()
	srv := httptest.NewServer(sim.New(cfg))
	t.Cleanup(srv.Close)
	return srv.URL
}

// game is an unscripted conversation played on the simulator to its
// submission, as actloop plays it.
type game struct {
	chat   tokenize.ChatTemplate
	task   string
	prompt []int32   // system and user messages
	outs   [][]int32 // each turn's output ids, <|im_end|> included
	obs    []string  // the observation after each turn
}

// play plays task on the simulator at url, on the byte-level template.
func play(t testing.TB, url, task string) game {
	t.Helper()
	return playWith(t, url, task, chat)
}

// playWith plays task on the simulator at url, whose tokenizer is chat's.
func playWith(t testing.TB, url, task string, chat tokenize.ChatTemplate) game {
	t.Helper()
	g := game{chat: chat, task: task, prompt: slices.Concat(chat.Message("system", "You are a helpful assistant."), chat.Message("user", task))}
	in := slices.Clone(g.prompt)
	for k := 1; k <= 100; k++ {
		in = append(in, chat.GenerationPrompt()...)
		body, _ := json.Marshal(map[string]any{"input_ids": in,
			"sampling_params": map[string]any{"max_new_tokens": 4096, "stop_token_ids": chat.StopTokenIDs()}})
		resp, err := http.Post(url+"/generate", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			OutputIDs []int32 `json:"output_ids"`
		}
		err = json.NewDecoder(resp.Body).Decode(&out)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("generate: %d %v", resp.StatusCode, err)
		}
		g.outs = append(g.outs, out.OutputIDs)
		obs := fmt.Sprintf("<returncode>0</returncode>\n<output>\n%s\n</output>", strings.Repeat("o", k*7%50))
		g.obs = append(g.obs, obs)
		if strings.Contains(chat.Tokenizer().Decode(out.OutputIDs), sim.Submission) {
			return g
		}
		in = slices.Concat(in, out.OutputIDs, chat.CloseTurn(out.OutputIDs), chat.Message("user", obs))
	}
	t.Fatalf("%s: no submission after 100 turns", task)
	return g
}

// playLong plays tasks until one takes at least turns turns.
func playLong(t testing.TB, url string, turns int) game {
	t.Helper()
	for i := range 200 {
		if g := play(t, url, fmt.Sprintf("Fix issue #%d.", i)); len(g.outs) >= turns {
			return g
		}
	}
	t.Fatalf("no task takes %d turns", turns)
	return game{}
}

// tokensAt is what the store holds after k model calls: after the gen step
// (each output and its close), or also after the env step that follows
// (the observation and the next generation prompt).
func (g game) tokensAt(k int, afterEnv bool) []int32 {
	chat := g.chat
	ids := slices.Clone(g.prompt)
	if k == 0 {
		if afterEnv {
			ids = append(ids, chat.GenerationPrompt()...)
		}
		return ids
	}
	ids = append(ids, chat.GenerationPrompt()...)
	for i := range k {
		ids = slices.Concat(ids, g.outs[i], chat.CloseTurn(g.outs[i]))
		if i < k-1 || afterEnv {
			ids = slices.Concat(ids, chat.Message("user", g.obs[i]), chat.GenerationPrompt())
		}
	}
	return ids
}

// generated is the output tokens of the first k turns.
func (g game) generated(k int) int {
	n := 0
	for _, o := range g.outs[:k] {
		n += len(o)
	}
	return n
}

// remaining is the oracle's answer after k turns: what the game actually
// generated after them.
func (g game) remaining(k int) schema.PredictReply {
	return g.remainingUntil(k, len(g.outs))
}

// remainingUntil is the remaining work when the trajectory stops after
// turn end.
func (g game) remainingUntil(k, end int) schema.PredictReply {
	rep := schema.PredictReply{V: schema.Version, Source: predict.SourceOracle}
	for _, o := range g.outs[k:end] {
		rep.RemainingTokens += float64(len(o))
		rep.RemainingTurns++
	}
	return rep
}

// storeAt stores the trajectory id holding g's tokens after k turns.
func storeAt(t testing.TB, st *traj.Store, id string, g game, k int, stepLimit int, afterEnv ...bool) {
	t.Helper()
	ctx := context.Background()
	s := schema.Sample{V: schema.Version, ID: id, Task: g.task, Limits: schema.Limits{StepLimit: stepLimit}}
	toks := g.tokensAt(k, len(afterEnv) > 0 && afterEnv[0])
	if err := st.Put(ctx, &traj.Trajectory{ID: id, Status: traj.StatusNeedsEnvStep, Seq: 1, Sample: s, Tokens: toks,
		Logprobs: make([]float32, len(toks)), Mask: make([]int8, len(toks)), Versions: make([]int32, len(toks))}); err != nil {
		t.Fatal(err)
	}
}

// On the byte-level template and on the Qwen tokenizer's ChatML.
func TestOracleEveryTurn(t *testing.T) {
	qwen, err := tokenize.OpenTokenizer(tokenize.TokenizerQwen)
	if err != nil {
		t.Fatal(err)
	}
	qwenChat, err := tokenize.NewTemplate(tokenize.TemplateChatML, qwen)
	if err != nil {
		t.Fatal(err)
	}
	for name, tmpl := range map[string]tokenize.ChatTemplate{"bytes": chat, "qwen": qwenChat} {
		t.Run(name, func(t *testing.T) { testOracleEveryTurn(t, tmpl) })
	}
}

func testOracleEveryTurn(t *testing.T, chat tokenize.ChatTemplate) {
	simURL := startSim(t, sim.Config{Seed: 3, MaxTurns: 10, Tokenizer: chat.Tokenizer()})
	rdb, _ := testkit.StartRedis(t, testkit.PreferredRedis(t))
	st := traj.New(rdb, nil)
	o := predict.NewOracle(st, chat, simURL+"/", time.Minute)
	t.Cleanup(func() { _ = o.Close() })
	for i := range 5 {
		g := playWith(t, simURL, fmt.Sprintf("Task %d of the oracle.", i), chat)
		for k := 0; k <= len(g.outs); k++ {
			for _, afterEnv := range []bool{false, true} {
				id := fmt.Sprintf("t%d-%d-%v", i, k, afterEnv)
				storeAt(t, st, id, g, k, 0, afterEnv)
				got, err := o.Predict(context.Background(), request(id, "", "", k, g.generated(k)))
				if err != nil {
					t.Fatalf("%s: %v", id, err)
				}
				if want := g.remaining(k); got != want {
					t.Fatalf("%s (%d turns in all): %+v, want %+v", id, len(g.outs), got, want)
				}
			}
		}
	}
}

// The request is about an earlier turn than the store holds: the oracle
// answers for the request's turn.
func TestOracleTrajectoryMovedOn(t *testing.T) {
	simURL := startSim(t, sim.Config{Seed: 4})
	rdb, _ := testkit.StartRedis(t, testkit.PreferredRedis(t))
	st := traj.New(rdb, nil)
	o := predict.NewOracle(st, chat, simURL, time.Minute)
	t.Cleanup(func() { _ = o.Close() })
	g := playLong(t, simURL, 3)
	storeAt(t, st, "moved", g, 3, 0)
	got, err := o.Predict(context.Background(), request("moved", "", "", 1, g.generated(1)))
	if want := g.remaining(1); err != nil || got != want {
		t.Fatalf("Predict = %+v, %v; want %+v", got, err, want)
	}
	// The store cannot be behind the request.
	if _, err := o.Predict(context.Background(), request("moved", "", "", 5, 0)); err == nil ||
		!strings.Contains(err.Error(), "holds 3 assistant turns") {
		t.Fatalf("Predict past the store: %v", err)
	}
}

func TestOracleStepLimit(t *testing.T) {
	simURL := startSim(t, sim.Config{Seed: 5, MaxTurns: 10})
	rdb, _ := testkit.StartRedis(t, testkit.PreferredRedis(t))
	st := traj.New(rdb, nil)
	o := predict.NewOracle(st, chat, simURL, time.Minute)
	t.Cleanup(func() { _ = o.Close() })
	g := playLong(t, simURL, 5)
	const limit = 3
	for k := 0; k <= limit; k++ {
		id := fmt.Sprintf("lim-%d", k)
		storeAt(t, st, id, g, k, limit)
		got, err := o.Predict(context.Background(), request(id, "", "", k, g.generated(k)))
		if want := g.remainingUntil(k, limit); err != nil || got != want {
			t.Fatalf("after %d turns with step_limit %d: %+v, %v; want %+v", k, limit, got, err, want)
		}
	}
}

func TestOracleScriptedSample(t *testing.T) {
	simURL := startSim(t, sim.Config{})
	rdb, _ := testkit.StartRedis(t, testkit.PreferredRedis(t))
	st := traj.New(rdb, nil)
	s := schema.Sample{V: schema.Version, ID: "scripted", Task: "x", Script: []string{"```bash\nls\n```"}}
	if err := st.Put(context.Background(), &traj.Trajectory{ID: s.ID, Status: traj.StatusNeedsEnvStep, Sample: s}); err != nil {
		t.Fatal(err)
	}
	o := predict.NewOracle(st, chat, simURL, time.Minute)
	t.Cleanup(func() { _ = o.Close() })
	if _, err := o.Predict(context.Background(), request("scripted", "", "", 0, 0)); err == nil || !strings.Contains(err.Error(), "scripted") {
		t.Fatalf("Predict(scripted) = %v, want an error naming the script", err)
	}
}

// fakeServer answers /get_model_info with info (after failing the first
// failFirst calls with 503) and counts the calls to each path.
type fakeServer struct {
	info      map[string]any
	failFirst int64
	infoCalls atomic.Int64
	planCalls atomic.Int64
	next      http.Handler
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/get_model_info":
		if f.infoCalls.Add(1) <= f.failFirst {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		_ = json.NewEncoder(w).Encode(f.info)
	case sim.PlanPath:
		f.planCalls.Add(1)
		if f.next != nil {
			f.next.ServeHTTP(w, r)
			return
		}
		http.NotFound(w, r)
	default:
		http.NotFound(w, r)
	}
}

func TestOracleRefusesRealServer(t *testing.T) {
	f := &fakeServer{info: map[string]any{"model_path": "Qwen/Qwen3-8B", "is_generation": true}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	rdb, _ := testkit.StartRedis(t, testkit.PreferredRedis(t))
	o := predict.NewOracle(traj.New(rdb, nil), chat, srv.URL, time.Minute)
	t.Cleanup(func() { _ = o.Close() })
	for range 3 {
		_, err := o.Predict(context.Background(), request("a", "", "", 1, 10))
		if !errors.Is(err, predict.ErrNotSimulator) || !strings.Contains(err.Error(), "simulator only") {
			t.Fatalf("Predict against a real server: %v, want ErrNotSimulator", err)
		}
	}
	if n, p := f.infoCalls.Load(), f.planCalls.Load(); n != 1 || p != 0 {
		t.Fatalf("%d model-info and %d plan calls, want 1 and 0: the refusal is final", n, p)
	}
}

func TestOracleRetriesFailedCheck(t *testing.T) {
	s := sim.New(sim.Config{Seed: 9})
	f := &fakeServer{info: map[string]any{sim.SimulatorKey: true}, failFirst: 1, next: s}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	simURL := startSim(t, sim.Config{Seed: 9})
	rdb, _ := testkit.StartRedis(t, testkit.PreferredRedis(t))
	st := traj.New(rdb, nil)
	g := playLong(t, simURL, 2)
	storeAt(t, st, "r", g, 1, 0)
	o := predict.NewOracle(st, chat, srv.URL, time.Minute)
	t.Cleanup(func() { _ = o.Close() })
	var se *predict.StatusError
	if _, err := o.Predict(context.Background(), request("r", "", "", 1, g.generated(1))); !errors.As(err, &se) || se.Status != http.StatusServiceUnavailable {
		t.Fatalf("first Predict: %v, want the 503 of the check", err)
	}
	got, err := o.Predict(context.Background(), request("r", "", "", 1, g.generated(1)))
	if want := g.remaining(1); err != nil || got != want {
		t.Fatalf("second Predict = %+v, %v; want %+v", got, err, want)
	}
}
