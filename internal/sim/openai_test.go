package sim

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/actloop/actloop/internal/tokenize"
)

func TestCompletionNotStreamed(t *testing.T) {
	h := newHarness(t, Config{})
	reply := "ls"
	status, b := h.do(http.MethodPost, "/v1/completions", map[string]any{
		"prompt": prompt("List."), "max_tokens": 100, "logprobs": 0, "return_tokens_as_token_ids": true,
		"stop_token_ids": []int32{tokenize.ImEnd}, "request_id": rid('a'), "vllm_xargs": map[string]string{replyParam: reply},
	})
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, b)
	}
	var resp struct {
		ID      string `json:"id"`
		Choices []struct {
			Logprobs struct {
				Tokens        []string  `json:"tokens"`
				TokenLogprobs []float64 `json:"token_logprobs"`
			} `json:"logprobs"`
			FinishReason string `json:"finish_reason"`
			StopReason   int32  `json:"stop_reason"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &resp); err != nil {
		t.Fatal(err)
	}
	ch := resp.Choices[0]
	want := []string{"token_id:108", "token_id:115", "token_id:257"}
	if resp.ID != "cmpl-"+rid('a') || strings.Join(ch.Logprobs.Tokens, ",") != strings.Join(want, ",") ||
		ch.FinishReason != "stop" || ch.StopReason != tokenize.ImEnd || resp.Usage.CompletionTokens != 3 ||
		resp.Usage.PromptTokens != len(prompt("List.")) {
		t.Fatalf("answer %s", b)
	}
}

// TestCompletionAbortedOnServer aborts a streamed completion with
// /abort_request: the stream carries the tokens so far, then an error event,
// as vLLM ends a request aborted under it.
func TestCompletionAbortedOnServer(t *testing.T) {
	h := newHarness(t, Config{DecodeTokensPerSec: 2000, TimeScale: 1})
	id := rid('b')
	ch := make(chan []byte, 1)
	h.wg.Go(func() {
		_, b := h.do(http.MethodPost, "/v1/completions", map[string]any{
			"prompt": prompt("Essay."), "max_tokens": 100000, "logprobs": 0, "stream": true, "request_id": id,
			"vllm_xargs": map[string]string{replyParam: strings.Repeat("word ", 10000)},
		})
		ch <- b
	})
	h.waitDecoding(id)
	if status, b := h.do(http.MethodPost, "/abort_request", map[string]string{"rid": id}); status != http.StatusOK {
		t.Fatalf("abort: %d %s", status, b)
	}
	body := string(<-ch)
	if !strings.Contains(body, `"token_logprobs"`) || !strings.Contains(body, `data: {"error":`) || !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Fatalf("stream %q", body)
	}
}

func TestCompletionRejects(t *testing.T) {
	h := newHarness(t, Config{})
	for _, body := range []string{
		`{"max_tokens":1}`, `{"prompt":[[1]]}`, `{"prompt":[1],"n":2}`, `{"prompt":[1],"logprobs":-1}`,
		`{"prompt":[1],"stream_options":{"include_usage":true}}`, `{"prompt":[1],"top_p":0}`, `{"prompt":[-1]}`,
		`{"prompt":[1],"vllm_xargs":{"actloop_reply":3}}`, `{"prompt":[1],"max_tokens":0}`,
	} {
		if status, b := h.do(http.MethodPost, "/v1/completions", body); status != http.StatusBadRequest {
			t.Errorf("%s: status %d: %s", body, status, b)
		}
	}
	if status, b := h.do(http.MethodPost, "/detokenize", `{"tokens":[999]}`); status != http.StatusBadRequest {
		t.Errorf("detokenize out of vocabulary: %d %s", status, b)
	}
	status, b := h.do(http.MethodPost, "/detokenize", `{"tokens":[104,257],"skip_special_tokens":true}`)
	if status != http.StatusOK || !strings.Contains(string(b), `"text":"h"`) {
		t.Errorf("detokenize skipping specials: %d %s", status, b)
	}
}

func FuzzDecodeCompletionRequest(f *testing.F) {
	f.Add([]byte(`{"prompt":[256,117,10],"max_tokens":512,"temperature":0.7,"top_p":0.9,"top_k":20,"min_p":0.05,
		"stop":["</s>"],"stop_token_ids":[257],"skip_special_tokens":false,"include_stop_str_in_output":true,"logprobs":0,
		"return_tokens_as_token_ids":true,"stream":true,"stream_options":{"include_usage":true},
		"request_id":"0123456789abcdef0123456789abcdef","vllm_xargs":{"actloop_reply":"ls -la"}}`))
	f.Add([]byte(`{"prompt":"hi","stop":"x","top_k":0}`))
	f.Add([]byte(`{"prompt":[1],"max_tokens":1048576}`))
	f.Add([]byte(`{"prompt":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		req, _, err := decodeCompletionRequest(b, "", DefaultContextLength)
		if err != nil {
			var fe *fieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a fieldError", err)
			}
			return
		}
		if req.RID == "" || len(req.InputIDs) == 0 || req.MaxNewTokens < 1 || len(req.InputIDs) >= DefaultContextLength ||
			len(req.InputIDs)+req.MaxNewTokens > DefaultContextLength {
			t.Fatalf("accepted invalid request %+v", req)
		}
		for _, id := range req.InputIDs {
			if id < 0 {
				t.Fatalf("negative input id in %+v", req)
			}
		}
	})
}
