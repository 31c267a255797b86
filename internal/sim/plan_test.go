package sim

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/actloop/actloop/internal/tokenize"
)

// planAt asks /actloop/plan about input.
func (h *harness) planAt(input []int32) TurnPlan {
	h.t.Helper()
	status, b := h.do(http.MethodPost, PlanPath, map[string]any{"input_ids": input})
	if status != http.StatusOK {
		h.t.Fatalf("plan: status %d: %s", status, b)
	}
	var p TurnPlan
	if err := json.Unmarshal(b, &p); err != nil {
		h.t.Fatalf("plan %s: %v", b, err)
	}
	return p
}

// played is one unscripted conversation played to its submission: the plan
// asked before each turn and the output length each turn produced.
type played struct {
	plans   []TurnPlan
	outLens []int
	replies []string
}

// play drives a conversation as actloop does (tokenize.ChatML: each reply,
// its close, an observation, a generation prompt), asking the plan before
// every turn; observe returns the observation after turn k.
func play(t *testing.T, h *harness, task string, observe func(k int) string) played {
	t.Helper()
	var p played
	in := slices.Concat(chat.Message("system", "You are a helpful assistant."), chat.Message("user", task))
	for k := 1; ; k++ {
		in = append(in, chat.GenerationPrompt()...)
		p.plans = append(p.plans, h.planAt(in))
		r := h.mustGenerate(genBody(fmt.Sprintf("%032x", k), in, map[string]any{
			"max_new_tokens": 4096, "stop_token_ids": chat.StopTokenIDs(),
		}))
		out := r.ids()
		if len(out) == 0 || out[len(out)-1] != tokenize.ImEnd {
			t.Fatalf("turn %d does not end with <|im_end|>: %q", k, tokenize.Bytes{}.Decode(out))
		}
		p.outLens = append(p.outLens, len(out))
		text := tokenize.Bytes{}.Decode(out[:len(out)-1])
		p.replies = append(p.replies, text)
		if strings.Contains(text, Submission) {
			// Past the end: nothing is left to generate.
			in = slices.Concat(in, out, chat.CloseTurn(out), chat.Message("user", observe(k)), chat.GenerationPrompt())
			p.plans = append(p.plans, h.planAt(in))
			return p
		}
		if k > h.s.cfg.MaxTurns {
			t.Fatalf("no submission after %d turns", k)
		}
		in = slices.Concat(in, out, chat.CloseTurn(out), chat.Message("user", observe(k)))
	}
}

func TestPlanMatchesGeneration(t *testing.T) {
	cfg := Config{Seed: 7, MaxTurns: 10}
	h := newHarness(t, cfg)
	rnd := rand.New(rand.NewPCG(1, 2))
	totals := map[int]bool{}
	for i := range 30 {
		task := fmt.Sprintf("Task %d: %x", i, rnd.Uint64())
		p := play(t, h, task, func(k int) string {
			return fmt.Sprintf("<returncode>%d</returncode>\n<output>\n%s\n</output>", rnd.IntN(3), strings.Repeat("x", rnd.IntN(200)))
		})
		n := len(p.outLens)
		totals[n] = true
		for k := 1; k <= n; k++ {
			want := TurnPlan{TurnsTotal: n, Turn: k, RemainingTurns: n - k + 1}
			for _, l := range p.outLens[k-1:] {
				want.RemainingTokens += l
			}
			if got := p.plans[k-1]; got != want {
				t.Fatalf("%s, turn %d: plan %+v, want %+v (output lengths %v)", task, k, got, want, p.outLens)
			}
		}
		if got, want := p.plans[n], (TurnPlan{TurnsTotal: n, Turn: n + 1}); got != want {
			t.Fatalf("%s after the submission: plan %+v, want %+v", task, got, want)
		}
	}
	if len(totals) < 3 {
		t.Fatalf("trajectory lengths hardly vary: %v", totals)
	}
}

// A reply depends on the seed, the task and the turn, not on what the
// observations said.
func TestRepliesIgnoreObservations(t *testing.T) {
	h := newHarness(t, Config{Seed: 3, MaxTurns: 12})
	for i := range 10 {
		task := fmt.Sprintf("Fix issue #%d.", i)
		a := play(t, h, task, func(int) string { return "ok" })
		b := play(t, h, task, func(k int) string { return strings.Repeat("long output ", k*10) })
		if !slices.Equal(a.replies, b.replies) {
			t.Fatalf("%s: replies differ with other observations:\n%q\n%q", task, a.replies, b.replies)
		}
	}
}

func TestPlanWithoutAssistantTurn(t *testing.T) {
	h := newHarness(t, Config{Seed: 5})
	noPrompt := slices.Concat(chat.Message("system", "s"), chat.Message("user", "task"))
	withPrompt := append(slices.Clone(noPrompt), chat.GenerationPrompt()...)
	// Like /generate, an input without an assistant turn is about to
	// generate turn 1.
	if a, b := h.planAt(noPrompt), h.planAt(withPrompt); a != b || a.Turn != 1 || a.RemainingTurns != a.TurnsTotal {
		t.Fatalf("plans %+v and %+v", a, b)
	}
}

func TestPlanMalformed(t *testing.T) {
	h := newHarness(t, Config{})
	tests := []struct{ name, body, wantField string }{
		{"not JSON", `{"input_ids":[1,`, "malformed JSON"},
		{"no input_ids", `{}`, "input_ids"},
		{"text only", `{"text":"hi"}`, "input_ids"},
		{"empty input_ids", `{"input_ids":[]}`, "input_ids"},
		{"string input_ids", `{"input_ids":"abc"}`, "input_ids"},
		{"null token id", `{"input_ids":[1,null]}`, "input_ids[1]"},
		{"negative token id", `{"input_ids":[1,-2]}`, "input_ids[1]"},
		{"token id too big", `{"input_ids":[4294967296]}`, "input_ids"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, b := h.do(http.MethodPost, PlanPath, tt.body)
			if status != http.StatusBadRequest {
				t.Fatalf("status %d (%s), want 400", status, b)
			}
			var e struct {
				Error struct{ Message string } `json:"error"`
			}
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatalf("error body %s: %v", b, err)
			}
			if !strings.HasPrefix(e.Error.Message, tt.wantField) {
				t.Fatalf("message %q does not name %q", e.Error.Message, tt.wantField)
			}
		})
	}
	if status, _ := h.do(http.MethodGet, PlanPath, nil); status != http.StatusMethodNotAllowed {
		t.Fatalf("GET %s: %d", PlanPath, status)
	}
}

func TestModelInfoNamesSimulator(t *testing.T) {
	h := newHarness(t, Config{})
	status, b := h.do(http.MethodGet, "/get_model_info", nil)
	var info map[string]any
	if status != http.StatusOK || json.Unmarshal(b, &info) != nil {
		t.Fatalf("get_model_info: %d %s", status, b)
	}
	if info[SimulatorKey] != true || info["model_path"] != modelName {
		t.Fatalf("get_model_info = %v", info)
	}
}

func FuzzDecodePlanRequest(f *testing.F) {
	f.Add([]byte(`{"input_ids":[256,117,10]}`))
	f.Add([]byte(`{"input_ids":[1,null]}`))
	f.Add([]byte(`{"input_ids":[]}`))
	f.Add([]byte(`{"input_ids":[[1]]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ids, err := decodePlanRequest(b, DefaultContextLength)
		if err != nil {
			if _, ok := err.(*fieldError); !ok {
				t.Fatalf("error %v is not a fieldError", err)
			}
			return
		}
		if len(ids) == 0 || slices.ContainsFunc(ids, func(id int32) bool { return id < 0 }) {
			t.Fatalf("accepted invalid input %v", ids)
		}
		s := New(Config{})
		p := s.planOf(ids)
		if p.Turn < 1 || p.TurnsTotal < 1 || p.RemainingTurns < 0 || p.RemainingTokens < p.RemainingTurns {
			t.Fatalf("plan %+v of %v", p, ids)
		}
	})
}

// A generation resumed after an abort (its input ends with the partial
// output) continues the same token stream with the same log-probs.
func TestResumeContinuesTheStream(t *testing.T) {
	s := New(Config{})
	tmpl := tokenize.NewByteChatML()
	var input []int32
	input = append(input, tmpl.Message("system", "sys")...)
	input = append(input, tmpl.Message("user", "resume task")...)
	input = append(input, tmpl.GenerationPrompt()...)
	req := func(in []int32) *genRequest {
		return &genRequest{InputIDs: in, MaxNewTokens: 4096, StopTokenIDs: []int32{tokenize.ImEnd}}
	}
	whole := s.makePlan(req(input))
	for _, cut := range []int{1, 7, len(whole.ids) - 1} {
		resumed := s.makePlan(req(append(slices.Clone(input), whole.ids[:cut]...)))
		if !slices.Equal(append(slices.Clone(whole.ids[:cut]), resumed.ids...), whole.ids) ||
			!slices.Equal(append(slices.Clone(whole.lps[:cut]), resumed.lps...), whole.lps) {
			t.Fatalf("cut at %d: resumed output differs from the uninterrupted one", cut)
		}
	}
}
