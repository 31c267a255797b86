package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/actloop/actloop/internal/tokenize"
)

func qwenChat(t *testing.T) tokenize.ChatML {
	t.Helper()
	tok, err := tokenize.Qwen()
	if err != nil {
		t.Fatal(err)
	}
	c, err := tokenize.NewChatML(tok)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// converse plays a trajectory on h with template c until the submission and
// returns each turn's output ids (its <|im_end|> included).
func converse(t *testing.T, h *harness, c tokenize.ChatTemplate, task string) [][]int32 {
	t.Helper()
	in := slices.Concat(c.Begin(), c.Message("system", "You are a helpful assistant."), c.Message("user", task), c.GenerationPrompt())
	var outs [][]int32
	for k := 1; k <= 20; k++ {
		r := h.mustGenerate(genBody(fmt.Sprintf("%032x", k), in, map[string]any{
			"max_new_tokens": 4096, "stop_token_ids": c.StopTokenIDs()}))
		out := r.ids()
		if len(out) == 0 || out[len(out)-1] != c.StopTokenIDs()[0] {
			t.Fatalf("turn %d does not end with the stop token: %v", k, out)
		}
		outs = append(outs, out)
		text := c.Tokenizer().Decode(out[:len(out)-1])
		if r.Text != text {
			t.Fatalf("turn %d: text %q, ids decode to %q", k, r.Text, text)
		}
		if strings.Contains(text, Submission) {
			return outs
		}
		in = slices.Concat(in, out, c.CloseTurn(out), c.Message("user", "<output>\nok\n</output>"), c.GenerationPrompt())
	}
	t.Fatal("no submission after 20 turns")
	return nil
}

func TestQwenTokenizer(t *testing.T) {
	c := qwenChat(t)
	tok := c.Tokenizer()
	h := newHarness(t, Config{Tokenizer: tok, Seed: 3, MaxTurns: 6})

	t.Run("scripted reply", func(t *testing.T) {
		reply := "THOUGHT: 先看看 the file.\n\n```bash\ncat -n main.go\n```"
		in := slices.Concat(c.Message("user", "fix it"), c.GenerationPrompt())
		r := h.mustGenerate(genBody(rid('q'), in, map[string]any{"max_new_tokens": 100,
			"stop_token_ids": c.StopTokenIDs(), "custom_params": map[string]any{replyParam: reply}}))
		if want := append(tok.Encode(reply), c.ImEnd); !slices.Equal(r.ids(), want) {
			t.Fatalf("ids %v, want %v", r.ids(), want)
		}
		if r.Text != reply {
			t.Fatalf("text %q", r.Text)
		}
	})
	t.Run("directive token counts", func(t *testing.T) {
		d := Directive{Tokens: []int{40, 25, 300}, Exec: []float64{0.5, 1}}
		outs := converse(t, h, c, "Solve it. "+d.String())
		if len(outs) != len(d.Tokens) {
			t.Fatalf("%d turns, want %d", len(outs), len(d.Tokens))
		}
		for k, out := range outs {
			if len(out)-1 != d.Tokens[k] {
				t.Errorf("turn %d: %d tokens, want %d", k+1, len(out)-1, d.Tokens[k])
			}
		}
	})
	t.Run("unscripted plan", func(t *testing.T) {
		task := "An unscripted task."
		in := slices.Concat(c.Message("system", "You are a helpful assistant."), c.Message("user", task), c.GenerationPrompt())
		p := h.planAt(in)
		outs := converse(t, h, c, task)
		total := 0
		for _, o := range outs {
			total += len(o)
		}
		if p.TurnsTotal != len(outs) || p.RemainingTokens != total {
			t.Fatalf("plan %+v; played %d turns, %d tokens", p, len(outs), total)
		}
	})
	t.Run("text prompt", func(t *testing.T) {
		text := c.Render([]tokenize.Msg{{Role: "user", Content: "hello"}}, true)
		r := h.mustGenerate(map[string]any{"rid": rid('t'), "text": text, "sampling_params": map[string]any{
			"max_new_tokens": 2, "custom_params": map[string]any{replyParam: "hi there"}}})
		if got, want := r.MetaInfo["prompt_tokens"], float64(len(tok.Encode(text))); got != want {
			t.Fatalf("prompt_tokens %v, want %v", got, want)
		}
		// The OpenAI-compatible API's text prompt too.
		code, body := h.do(http.MethodPost, "/v1/completions", map[string]any{"prompt": text, "max_tokens": 2,
			"vllm_xargs": map[string]string{replyParam: "hi there"}})
		var comp struct {
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(body, &comp); code != http.StatusOK || err != nil || comp.Usage.PromptTokens != len(tok.Encode(text)) {
			t.Fatalf("/v1/completions: %d %s, want %d prompt tokens", code, body, len(tok.Encode(text)))
		}
	})
	t.Run("detokenize", func(t *testing.T) {
		ids := slices.Concat(tok.Encode("héllo wörld"), []int32{c.ImEnd})
		code, body := h.do(http.MethodPost, "/detokenize", map[string]any{"tokens": ids, "skip_special_tokens": true})
		if code != http.StatusOK || !strings.Contains(string(body), `"text":"héllo wörld"`) {
			t.Fatalf("/detokenize: %d %s", code, body)
		}
		if code, body := h.do(http.MethodPost, "/detokenize", map[string]any{"tokens": []int64{1 << 30}}); code != http.StatusBadRequest {
			t.Fatalf("/detokenize out of the vocabulary: %d %s", code, body)
		}
	})
}

// plainBytes is a tokenizer without special tokens.
type plainBytes struct{}

func (plainBytes) Encode(s string) []int32 {
	ids := make([]int32, len(s))
	for i := range len(s) {
		ids[i] = int32(s[i])
	}
	return ids
}

func (plainBytes) Decode(ids []int32) string { return tokenize.Bytes{}.Decode(ids) }

func TestTokenizerWithoutChatML(t *testing.T) {
	if err := CheckTokenizer(plainBytes{}); err == nil || !strings.Contains(err.Error(), "<|im_start|>") {
		t.Fatalf("CheckTokenizer = %v", err)
	}
	if err := CheckTokenizer(tokenize.Bytes{}); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, Config{Tokenizer: plainBytes{}})
	code, body := h.do(http.MethodPost, "/generate", genBody(rid('x'), []int32{1, 2}, map[string]any{"max_new_tokens": 1}))
	if code != http.StatusInternalServerError || !strings.Contains(string(body), "im_start") {
		t.Fatalf("/generate: %d %s", code, body)
	}
}
