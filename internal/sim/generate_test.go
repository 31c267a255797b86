package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/actloop/actloop/internal/tokenize"
)

func TestFinishes(t *testing.T) {
	h := newHarness(t, Config{})
	in := prompt("say hello")
	tests := []struct {
		name       string
		sp         map[string]any
		wantIDs    []int32
		wantFinish map[string]any
		wantText   string
	}{
		{
			name:       "stop token",
			sp:         scripted("hello", 100),
			wantIDs:    replyIDs("hello"),
			wantFinish: map[string]any{"type": "stop", "matched": float64(tokenize.ImEnd)},
			wantText:   "hello",
		},
		{
			name:       "length",
			sp:         scripted("hello", 3),
			wantIDs:    tokenize.Bytes{}.Encode("hel"),
			wantFinish: map[string]any{"type": "length", "length": float64(3)},
			wantText:   "hel",
		},
		{
			name:       "no stop ids: the stream goes on with <|endoftext|>",
			sp:         map[string]any{"max_new_tokens": 5, "custom_params": map[string]any{replyParam: "hi"}},
			wantIDs:    []int32{'h', 'i', tokenize.ImEnd, tokenize.EndOfText, tokenize.EndOfText},
			wantFinish: map[string]any{"type": "length", "length": float64(5)},
			wantText:   "hi",
		},
		{
			name:       "stop string",
			sp:         map[string]any{"max_new_tokens": 50, "stop": []string{"zz", "\n\n"}, "custom_params": map[string]any{replyParam: "abc\n\ndef"}},
			wantIDs:    tokenize.Bytes{}.Encode("abc\n\n"),
			wantFinish: map[string]any{"type": "stop", "matched": "\n\n"},
			wantText:   "abc",
		},
		{
			name: "no_stop_trim and special tokens kept",
			sp: map[string]any{"max_new_tokens": 50, "stop_token_ids": []int32{tokenize.ImEnd},
				"no_stop_trim": true, "skip_special_tokens": false, "custom_params": map[string]any{replyParam: "ok"}},
			wantIDs:    replyIDs("ok"),
			wantFinish: map[string]any{"type": "stop", "matched": float64(tokenize.ImEnd)},
			wantText:   "ok<|im_end|>",
		},
		{
			name:       "max_new_tokens 0",
			sp:         scripted("hello", 0),
			wantIDs:    []int32{},
			wantFinish: map[string]any{"type": "length", "length": float64(0)},
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.mustGenerate(genBody(fmt.Sprintf("%032x", i), in, tt.sp))
			if !slices.Equal(r.ids(), tt.wantIDs) {
				t.Errorf("output_ids = %q, want %q", tokenize.Bytes{}.Decode(r.ids()), tokenize.Bytes{}.Decode(tt.wantIDs))
			}
			if !reflect.DeepEqual(r.Finish, tt.wantFinish) {
				t.Errorf("finish_reason = %v, want %v", r.Finish, tt.wantFinish)
			}
			if r.Text != tt.wantText {
				t.Errorf("text = %q, want %q", r.Text, tt.wantText)
			}
			if len(r.Logprobs) != len(r.ids()) {
				t.Fatalf("%d logprobs for %d ids", len(r.Logprobs), len(r.ids()))
			}
			for _, lp := range r.Logprobs {
				if lp > 0 || lp < -5 {
					t.Fatalf("logprob %v outside [-5, 0]", lp)
				}
			}
			m := r.MetaInfo
			if m["id"] != fmt.Sprintf("%032x", i) || m["prompt_tokens"] != float64(len(in)) ||
				m["completion_tokens"] != float64(len(tt.wantIDs)) || m["weight_version"] != "0" {
				t.Errorf("meta_info = %v", m)
			}
			if _, ok := m["cached_tokens"].(float64); !ok {
				t.Errorf("meta_info.cached_tokens missing: %v", m)
			}
		})
	}
}

func TestTextInputAndGeneratedRID(t *testing.T) {
	h := newHarness(t, Config{})
	r := h.mustGenerate(map[string]any{"text": "<|im_start|>user\nhi<|im_end|>\n", "sampling_params": scripted("yo", 10), "return_logprob": true})
	if !slices.Equal(r.ids(), replyIDs("yo")) {
		t.Fatalf("output_ids = %v", r.ids())
	}
	if id, _ := r.MetaInfo["id"].(string); len(id) != 32 {
		t.Fatalf("generated rid %q", id)
	}
	if r.MetaInfo["prompt_tokens"] != float64(len(tokenize.Bytes{}.Encode("<|im_start|>user\nhi<|im_end|>\n"))) {
		t.Fatalf("prompt_tokens = %v", r.MetaInfo["prompt_tokens"])
	}
	if _, ok := r.MetaInfo["output_token_logprobs"]; !ok {
		t.Fatal("no output_token_logprobs with return_logprob")
	}
	r = h.mustGenerate(map[string]any{"input_ids": []int32{1, 2}, "sampling_params": scripted("yo", 10)})
	if _, ok := r.MetaInfo["output_token_logprobs"]; ok {
		t.Fatal("output_token_logprobs without return_logprob")
	}
}

// trajectory plays an unscripted trajectory to its submission and returns
// the assistant turns.
func trajectory(t *testing.T, h *harness, task string) []string {
	t.Helper()
	in := slices.Concat(chat.Message("system", "You are a helpful assistant."), chat.Message("user", task))
	var turns []string
	for k := 1; ; k++ {
		in = append(in, chat.GenerationPrompt()...)
		r := h.mustGenerate(genBody(fmt.Sprintf("%032x", k), in, map[string]any{
			"max_new_tokens": 4096, "stop_token_ids": chat.StopTokenIDs(), "temperature": 0,
		}))
		out := r.ids()
		if len(out) == 0 || out[len(out)-1] != tokenize.ImEnd {
			t.Fatalf("turn %d does not end with <|im_end|>: %q", k, tokenize.Bytes{}.Decode(out))
		}
		text := tokenize.Bytes{}.Decode(out[:len(out)-1])
		turns = append(turns, text)
		if strings.Contains(text, Submission) {
			return turns
		}
		if want := fmt.Sprintf("```bash\necho step %d\n```", k); !strings.HasSuffix(text, want) || !strings.HasPrefix(text, "THOUGHT: ") {
			t.Fatalf("turn %d = %q, want a thought and %q", k, text, want)
		}
		if k > h.s.cfg.MaxTurns {
			t.Fatalf("no submission after %d turns", k)
		}
		in = slices.Concat(in, out, chat.CloseTurn(out), chat.Message("user", "<returncode>0</returncode>\n<output>\nstep\n</output>"))
	}
}

func TestUnscriptedTrajectories(t *testing.T) {
	cfg := Config{Seed: 42, MaxTurns: 6}
	h := newHarness(t, cfg)
	lengths := map[int]bool{}
	for i := range 20 {
		task := fmt.Sprintf("Fix issue #%d in the repository.", i)
		turns := trajectory(t, h, task)
		if n := len(turns); n < 1 || n > cfg.MaxTurns {
			t.Fatalf("%d turns, want 1..%d", n, cfg.MaxTurns)
		}
		if last := turns[len(turns)-1]; last != "```bash\n"+Submission+"\n```" {
			t.Fatalf("last turn = %q", last)
		}
		lengths[len(turns)] = true
		// Same seed, another server: the same trajectory.
		if again := trajectory(t, newHarness(t, cfg), task); !slices.Equal(again, turns) {
			t.Fatalf("trajectory differs on a second server:\n%q\n%q", turns, again)
		}
	}
	if len(lengths) < 2 {
		t.Fatalf("every trajectory has the same length: %v", lengths)
	}
}

func TestDeterminism(t *testing.T) {
	in := prompt("Refactor the parser.")
	body := genBody(rid('a'), in, map[string]any{"max_new_tokens": 300})
	a := newHarness(t, Config{Seed: 1}).mustGenerate(body)
	b := newHarness(t, Config{Seed: 1, TimeScale: 0.001, MaxRunning: 1, CacheTokens: -1}).mustGenerate(body)
	c := newHarness(t, Config{Seed: 2}).mustGenerate(body)
	if !slices.Equal(a.ids(), b.ids()) || !slices.Equal(a.Logprobs, b.Logprobs) || !reflect.DeepEqual(a.Finish, b.Finish) {
		t.Fatalf("same seed, different output:\n%q\n%q", tokenize.Bytes{}.Decode(a.ids()), tokenize.Bytes{}.Decode(b.ids()))
	}
	if slices.Equal(a.ids(), c.ids()) {
		t.Fatalf("seeds 1 and 2 gave the same output %q", tokenize.Bytes{}.Decode(a.ids()))
	}
}

func TestPrefixCacheHit(t *testing.T) {
	h := newHarness(t, Config{})
	in := prompt(strings.Repeat("a long task description ", 4)) // > 100 tokens
	sp := scripted("ok", 10)
	first := h.mustGenerate(genBody(rid('1'), in, sp))
	if first.MetaInfo["cached_tokens"] != float64(0) {
		t.Fatalf("first cached_tokens = %v, want 0", first.MetaInfo["cached_tokens"])
	}
	second := h.mustGenerate(genBody(rid('2'), in, sp))
	want := (len(in) - 1) / blockSize * blockSize
	if second.MetaInfo["cached_tokens"] != float64(want) {
		t.Fatalf("second cached_tokens = %v, want %d", second.MetaInfo["cached_tokens"], want)
	}
	// A continuation of the first conversation hits its prompt and output.
	cont := slices.Concat(in, first.ids(), chat.CloseTurn(first.ids()), chat.Message("user", "next"), chat.GenerationPrompt())
	third := h.mustGenerate(genBody(rid('3'), cont, sp))
	if got := int(third.MetaInfo["cached_tokens"].(float64)); got < want {
		t.Fatalf("continuation cached_tokens = %d, want >= %d", got, want)
	}
	if st := h.s.Stats(); st.CachedTokens != int64(want)+int64(third.MetaInfo["cached_tokens"].(float64)) ||
		st.PromptTokens != int64(2*len(in)+len(cont)) || st.Requests != 3 {
		t.Fatalf("Stats = %+v", st)
	}
}

func TestPrefixCacheEviction(t *testing.T) {
	h := newHarness(t, Config{CacheTokens: 4 * blockSize})
	// No shared system message: the two prompts differ in their first block.
	a := slices.Concat(chat.Message("user", strings.Repeat("alpha ", 12)), chat.GenerationPrompt())
	b := slices.Concat(chat.Message("user", strings.Repeat("bravo ", 12)), chat.GenerationPrompt())
	sp := scripted("ok", 10)
	cached := func(r *genResponse) int { return int(r.MetaInfo["cached_tokens"].(float64)) }

	h.mustGenerate(genBody(rid('1'), a, sp))
	if got := cached(h.mustGenerate(genBody(rid('2'), a, sp))); got != 4*blockSize {
		t.Fatalf("a again: cached %d, want %d (the whole capacity)", got, 4*blockSize)
	}
	h.mustGenerate(genBody(rid('3'), b, sp)) // fills the cache with b
	if got := cached(h.mustGenerate(genBody(rid('4'), a, sp))); got != 0 {
		t.Fatalf("a after b: cached %d, want 0 (evicted)", got)
	}
	if got := cached(h.mustGenerate(genBody(rid('5'), b, sp))); got != 0 {
		t.Fatalf("b after a: cached %d, want 0 (evicted)", got)
	}
}

func TestUnknownFieldsIgnored(t *testing.T) {
	h := newHarness(t, Config{})
	r := h.mustGenerate(`{"rid":"` + rid('x') + `","input_ids":[1,2,3],"lora_path":null,"logprob_start_len":-1,
		"return_text_in_logprobs":false,"stream":false,"sampling_params":{"max_new_tokens":4,"frequency_penalty":0.5,
		"ignore_eos":true,"top_k":null,"temperature":null,"stop":null,"custom_params":{"other":[1,2]}}}`)
	if len(r.ids()) != 4 {
		t.Fatalf("output_ids = %v", r.ids())
	}
}

func TestMalformedRequests(t *testing.T) {
	h := newHarness(t, Config{})
	ok := func(extra string) string {
		return `{"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":4` + extra + `}}`
	}
	tests := []struct {
		name, path, body, wantField string
	}{
		{"not JSON", "/generate", `{"input_ids":[1,`, "malformed JSON"},
		{"no input", "/generate", `{"sampling_params":{}}`, "input_ids"},
		{"empty input_ids", "/generate", `{"input_ids":[]}`, "input_ids"},
		{"batch input_ids", "/generate", `{"input_ids":[[1,2],[3]]}`, "input_ids"},
		{"string input_ids", "/generate", `{"input_ids":"abc"}`, "input_ids"},
		{"null token id", "/generate", `{"input_ids":[1,null]}`, "input_ids[1]"},
		{"negative token id", "/generate", `{"input_ids":[1,-2]}`, "input_ids[1]"},
		{"token id too big", "/generate", `{"input_ids":[1,4294967296]}`, "input_ids"},
		{"batch rid", "/generate", `{"rid":["a","b"],"input_ids":[1]}`, "rid"},
		{"stream", "/generate", `{"input_ids":[1],"stream":true}`, "stream"},
		{"return_logprob type", "/generate", `{"input_ids":[1],"return_logprob":"yes"}`, "return_logprob"},
		{"sampling_params type", "/generate", `{"input_ids":[1],"sampling_params":[1]}`, "sampling_params"},
		{"max_new_tokens negative", "/generate", ok(`,"max_new_tokens":-1`), "sampling_params.max_new_tokens"},
		{"max_new_tokens type", "/generate", `{"input_ids":[1],"sampling_params":{"max_new_tokens":"4"}}`, "sampling_params.max_new_tokens"},
		{"max_new_tokens beyond context", "/generate", ok(`,"max_new_tokens":2000000`), "sampling_params.max_new_tokens"},
		{"temperature", "/generate", ok(`,"temperature":-0.5`), "sampling_params.temperature"},
		{"top_p zero", "/generate", ok(`,"top_p":0`), "sampling_params.top_p"},
		{"top_p above one", "/generate", ok(`,"top_p":1.5`), "sampling_params.top_p"},
		{"top_k zero", "/generate", ok(`,"top_k":0`), "sampling_params.top_k"},
		{"min_p", "/generate", ok(`,"min_p":2`), "sampling_params.min_p"},
		{"stop type", "/generate", ok(`,"stop":5`), "sampling_params.stop"},
		{"stop list type", "/generate", ok(`,"stop":["a",1]`), "sampling_params.stop"},
		{"stop_token_ids type", "/generate", ok(`,"stop_token_ids":["a"]`), "sampling_params.stop_token_ids"},
		{"stop_token_ids negative", "/generate", ok(`,"stop_token_ids":[-1]`), "sampling_params.stop_token_ids[0]"},
		{"custom_params type", "/generate", ok(`,"custom_params":"x"`), "sampling_params.custom_params"},
		{"reply type", "/generate", ok(`,"custom_params":{"actloop_reply":5}`), "sampling_params.custom_params.actloop_reply"},
		{"abort not JSON", "/abort_request", `{"rid":`, "malformed JSON"},
		{"abort rid type", "/abort_request", `{"rid":5}`, "rid"},
		{"abort_all type", "/abort_request", `{"abort_all":"yes"}`, "abort_all"},
		{"pause mode", "/pause_generation", `{"mode":"stop"}`, "mode"},
		{"pause mode type", "/pause_generation", `{"mode":1}`, "mode"},
		{"continue not JSON", "/continue_generation", `[`, "malformed JSON"},
		{"weight version missing", "/update_weight_version", `{"abort_all_requests":false}`, "new_version"},
		{"weight version type", "/update_weight_version", `{"new_version":3}`, "new_version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, b := h.do(http.MethodPost, tt.path, tt.body)
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
	if st := h.s.Stats(); st.Requests != 0 {
		t.Fatalf("Stats.Requests = %d after only bad requests", st.Requests)
	}
}

func TestMethodsAndPaths(t *testing.T) {
	h := newHarness(t, Config{})
	if status, _ := h.do(http.MethodGet, "/generate", nil); status != http.StatusMethodNotAllowed {
		t.Errorf("GET /generate: %d", status)
	}
	if status, _ := h.do(http.MethodGet, "/nope", nil); status != http.StatusNotFound {
		t.Errorf("GET /nope: %d", status)
	}
	if status, _ := h.do(http.MethodGet, "/health", nil); status != http.StatusOK {
		t.Errorf("GET /health: %d", status)
	}
}

// The context length (Config.ContextLength) is what /v1/models,
// /get_server_info and /tokenize report, and what /generate and
// /v1/completions hold a request to, refusing it with a 400 in SGLang's and
// vLLM's words: an input of the context length or more, or an input and
// max_new_tokens of more together.
func TestContextLength(t *testing.T) {
	const n = 100
	h := newHarness(t, Config{ContextLength: n})
	var models struct {
		Data []struct {
			MaxModelLen int `json:"max_model_len"`
		} `json:"data"`
	}
	if status, b := h.do(http.MethodGet, "/v1/models", nil); status != 200 || json.Unmarshal(b, &models) != nil ||
		len(models.Data) != 1 || models.Data[0].MaxModelLen != n {
		t.Fatalf("/v1/models: %d %s", status, b)
	}
	var info struct {
		ContextLength int `json:"context_length"`
	}
	if status, b := h.do(http.MethodGet, "/get_server_info", nil); status != 200 || json.Unmarshal(b, &info) != nil ||
		info.ContextLength != n {
		t.Fatalf("/get_server_info: %d %s", status, b)
	}
	ids := func(k int) []int32 { return slices.Repeat([]int32{'a'}, k) }
	tests := []struct {
		name, path  string
		body        map[string]any
		wantMessage string // "" for a 200
	}{
		{"generate fits", "/generate", map[string]any{"input_ids": ids(60), "sampling_params": map[string]any{"max_new_tokens": 40}}, ""},
		{"generate one over", "/generate", map[string]any{"input_ids": ids(60), "sampling_params": map[string]any{"max_new_tokens": 41}},
			"Requested token count exceeds the model's maximum context length of 100 tokens. You requested a total of 101 tokens: 60 tokens from the input messages and 41 tokens for the completion."},
		{"generate input fills it", "/generate", map[string]any{"input_ids": ids(100), "sampling_params": map[string]any{"max_new_tokens": 0}},
			"The input (100 tokens) is longer than the model's context length (100 tokens)."},
		{"completions fit", "/v1/completions", map[string]any{"prompt": ids(60), "max_tokens": 40}, ""},
		{"completions one over", "/v1/completions", map[string]any{"prompt": ids(60), "max_tokens": 41},
			"'max_tokens' or 'max_completion_tokens' is too large: 41. This model's maximum context length is 100 tokens and your request has 60 input tokens (41 > 100 - 60)."},
		{"completions prompt fills it", "/v1/completions", map[string]any{"prompt": ids(100), "max_tokens": 1},
			"This model's maximum context length is 100 tokens. However, your request has 100 input tokens."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, b := h.do(http.MethodPost, tt.path, tt.body)
			if tt.wantMessage == "" {
				if status != 200 {
					t.Fatalf("status %d: %s", status, b)
				}
				return
			}
			var e struct {
				Error struct{ Message string } `json:"error"`
			}
			if status != 400 || json.Unmarshal(b, &e) != nil || !strings.Contains(e.Error.Message, tt.wantMessage) {
				t.Fatalf("status %d: %s; want 400 with %q", status, b, tt.wantMessage)
			}
		})
	}
}
