package sim

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/actloop/actloop/internal/tokenize"
)

// A request whose rid is live already is refused as SGLang's
// TokenizerManager refuses it (400, "Duplicate request ID detected: <rid>")
// and the live one goes on; once that has answered, finished or aborted,
// the rid serves again. On the plain cost model and the server model alike.
func TestDuplicateRIDIsRefused(t *testing.T) {
	for name, cfg := range map[string]Config{"plain": slow, "model": modelCfg()} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, cfg)
			in := prompt("write")
			first := h.async(genBody(rid('1'), in, scripted(longReply, 1<<16)))
			seen := h.waitDecoding(rid('1'))

			dup := h.generate(genBody(rid('1'), in, scripted("ls", 100)))
			var body struct {
				Error struct{ Message string } `json:"error"`
			}
			if err := json.Unmarshal([]byte(dup.errorBody), &body); dup.status != http.StatusBadRequest || err != nil ||
				body.Error.Message != "Duplicate request ID detected: "+rid('1') {
				t.Fatalf("a second request under a live rid: status %d, body %s", dup.status, dup.errorBody)
			}
			if _, ok := h.s.Request(rid('1')); !ok {
				t.Fatal("the live request ended when its rid came again")
			}
			if st := h.s.Stats(); st.Requests != 1 || st.Duplicates != 1 {
				t.Fatalf("Stats = %+v, want 1 request and 1 duplicate", st)
			}
			h.abort(`{"rid":"` + rid('1') + `"}`)
			checkPartial(t, <-first, replyIDs(longReply), seen)

			// Aborted, then finished: the rid serves again each time.
			for range 2 {
				if r := h.mustGenerate(genBody(rid('1'), in, scripted("ls", 100))); r.Finish["type"] != "stop" {
					t.Fatalf("the rid again: finish_reason %v", r.Finish)
				}
			}
		})
	}
}

// The OpenAI-compatible endpoint refuses a live request id as vLLM does:
// a 400, or an error event when streaming.
func TestDuplicateRequestIDCompletion(t *testing.T) {
	h := newHarness(t, slow)
	in := prompt("write")
	first := h.async(genBody(rid('1'), in, scripted(longReply, 1<<16)))
	h.waitDecoding(rid('1'))
	want := "Request id cmpl-" + rid('1') + "-0 already running."
	body := map[string]any{"prompt": in, "max_tokens": 100, "stop_token_ids": []int32{tokenize.ImEnd}, "request_id": rid('1'),
		"vllm_xargs": map[string]string{replyParam: "ls"}}
	status, b := h.do(http.MethodPost, "/v1/completions", body)
	if status != http.StatusBadRequest || !strings.Contains(string(b), want) {
		t.Fatalf("not streamed: status %d: %s", status, b)
	}
	body["stream"] = true
	status, b = h.do(http.MethodPost, "/v1/completions", body)
	if status != http.StatusOK || !strings.Contains(string(b), want) || !strings.Contains(string(b), `"code":400`) ||
		!strings.HasSuffix(string(b), "data: [DONE]\n\n") {
		t.Fatalf("streamed: status %d: %s", status, b)
	}
	if _, ok := h.s.Request(rid('1')); !ok {
		t.Fatal("the live request ended when its id came again")
	}
	h.abort(`{"rid":"` + rid('1') + `"}`)
	<-first
}
