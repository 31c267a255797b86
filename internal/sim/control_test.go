package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// slow is a config whose decoding takes long enough to catch a request
// running: 2000 tokens per second of wall time.
var slow = Config{DecodeTokensPerSec: 2000, TimeScale: 1}

// longReply takes about 10 s to decode under slow.
var longReply = strings.Repeat("0123456789", 2000)

func (h *harness) abort(body string) {
	h.t.Helper()
	if status, b := h.do(http.MethodPost, "/abort_request", body); status != http.StatusOK || len(b) != 0 {
		h.t.Fatalf("abort_request %s: status %d, body %q", body, status, b)
	}
}

func (h *harness) post(path, body string) map[string]any {
	h.t.Helper()
	status, b := h.do(http.MethodPost, path, body)
	if status != http.StatusOK {
		h.t.Fatalf("%s: status %d: %s", path, status, b)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		h.t.Fatalf("%s: %s: %v", path, b, err)
	}
	return v
}

// checkPartial asserts r is a running abort with a prefix of want, at least
// minLen long.
func checkPartial(t *testing.T, r *genResponse, want []int32, minLen int) {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.errorBody)
	}
	if r.Finish["type"] != "abort" || r.Finish["message"] != "Aborted" {
		t.Fatalf("finish_reason = %v, want a running abort", r.Finish)
	}
	ids := r.ids()
	if len(ids) < minLen || len(ids) >= len(want) || !slices.Equal(ids, want[:len(ids)]) {
		t.Fatalf("%d output ids, want a proper prefix of the reply of at least %d", len(ids), minLen)
	}
	if len(r.Logprobs) != len(ids) || r.MetaInfo["completion_tokens"] != float64(len(ids)) {
		t.Fatalf("%d logprobs, completion_tokens %v for %d ids", len(r.Logprobs), r.MetaInfo["completion_tokens"], len(ids))
	}
}

func TestAbortByPrefix(t *testing.T) {
	h := newHarness(t, slow)
	in := prompt("write")
	rids := []string{"aaaa" + rid('1')[4:], "aaaa" + rid('2')[4:], rid('b')}
	var results []<-chan *genResponse
	for _, r := range rids {
		results = append(results, h.async(genBody(r, in, scripted(longReply, 1<<16))))
	}
	seen := make([]int, len(rids))
	for i, r := range rids {
		seen[i] = h.waitDecoding(r)
	}

	h.abort(`{"rid":"aaaa"}`)
	for i := range 2 {
		checkPartial(t, <-results[i], replyIDs(longReply), seen[i])
	}
	if _, ok := h.s.Request(rids[2]); !ok {
		t.Fatal("the request without the prefix was aborted too")
	}
	h.abort(`{"rid":""}`) // an empty rid matches nothing
	h.abort(`{"rid":"` + rid('c') + `"}`)
	if _, ok := h.s.Request(rids[2]); !ok {
		t.Fatal("an empty or unknown rid aborted a request")
	}
	h.abort(`{"rid":"` + rids[2] + `"}`)
	checkPartial(t, <-results[2], replyIDs(longReply), seen[2])

	if st := h.s.Stats(); st.Aborted != 3 || st.Running != 0 || st.Waiting != 0 || st.Requests != 3 {
		t.Fatalf("Stats = %+v", st)
	}
}

func TestAbortInWaitingQueue(t *testing.T) {
	cfg := slow
	cfg.MaxRunning = 1
	h := newHarness(t, cfg)
	in := prompt("write")
	running := h.async(genBody(rid('1'), in, scripted(longReply, 1<<16)))
	h.waitDecoding(rid('1'))
	waiting := h.async(genBody(rid('2'), in, scripted("short", 100)))
	h.waitPhase(rid('2'), PhaseWaiting)
	if st := h.s.Stats(); st.Running != 1 || st.Waiting != 1 {
		t.Fatalf("Stats = %+v, want 1 running, 1 waiting", st)
	}

	h.abort(`{"rid":"` + rid('2') + `"}`)
	r := <-waiting
	if r.Finish["type"] != "abort" || r.Finish["message"] != "Abort in waiting queue" {
		t.Fatalf("finish_reason = %v", r.Finish)
	}
	if r.OutputIDs == nil || len(*r.OutputIDs) != 0 {
		t.Fatalf("output_ids = %v, want []", r.OutputIDs)
	}
	if _, ok := r.MetaInfo["prompt_tokens"]; ok {
		t.Fatalf("meta_info = %v: SGLang sends no prompt_tokens for a waiting-queue abort", r.MetaInfo)
	}

	h.abort(`{"abort_all":true}`)
	checkPartial(t, <-running, replyIDs(longReply), 1)
}

func TestAbortBeforePrefill(t *testing.T) {
	h := newHarness(t, Config{PrefillTokensPerSec: 1, TimeScale: 1}) // a minute of prefill
	res := h.async(genBody(rid('1'), prompt("write"), scripted("ok", 10)))
	h.waitPhase(rid('1'), PhasePrefill)
	h.abort(`{"rid":"` + rid('1') + `"}`)
	r := <-res
	if r.Finish["type"] != "abort" || r.Finish["message"] != "Abort before prefill" {
		t.Fatalf("finish_reason = %v", r.Finish)
	}
	if r.OutputIDs != nil {
		t.Fatalf("output_ids = %v, want none", *r.OutputIDs)
	}
	if _, ok := r.rawMeta["output_token_logprobs"]; ok {
		t.Fatal("output_token_logprobs present")
	}
	if r.MetaInfo["prompt_tokens"] != float64(0) || r.MetaInfo["completion_tokens"] != float64(0) {
		t.Fatalf("meta_info = %v", r.MetaInfo)
	}
}

func TestPauseAbortMode(t *testing.T) {
	h := newHarness(t, slow)
	in := prompt("write")
	running := h.async(genBody(rid('1'), in, scripted(longReply, 1<<16)))
	h.waitDecoding(rid('1'))

	if v := h.post("/pause_generation", `{"mode":"abort"}`); v["status"] != "ok" {
		t.Fatalf("pause: %v", v)
	}
	checkPartial(t, <-running, replyIDs(longReply), 1)

	// A request that arrives while paused waits until generation continues.
	later := h.async(genBody(rid('2'), in, scripted("after the pause", 100)))
	h.waitPhase(rid('2'), PhaseWaiting)
	if st := h.s.Stats(); st.Waiting != 1 || st.Running != 0 {
		t.Fatalf("Stats = %+v, want 1 waiting", st)
	}
	if v := h.post("/continue_generation", ""); v["status"] != "ok" {
		t.Fatalf("continue: %v", v)
	}
	if r := <-later; !slices.Equal(r.ids(), replyIDs("after the pause")) || r.Finish["type"] != "stop" {
		t.Fatalf("after continue: %v %v", r.ids(), r.Finish)
	}
}

func TestPauseInPlaceAndRetract(t *testing.T) {
	for _, mode := range []string{pauseInPlace, pauseRetract} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, slow)
			in := prompt("write")
			reply := longReply[:1000] // 0.5 s of decoding: the pause comes long before its end
			res := h.async(genBody(rid('1'), in, scripted(reply, 1<<16)))
			h.waitDecoding(rid('1'))

			h.post("/pause_generation", `{"mode":"`+mode+`"}`)
			info, ok := h.s.Request(rid('1'))
			if !ok {
				t.Fatal("the request ended during a pause")
			}
			st := h.s.Stats()
			switch mode {
			case pauseInPlace:
				if info.Phase != PhaseDecode || st.Running != 1 {
					t.Fatalf("in place: %+v, %+v", info, st)
				}
			case pauseRetract:
				h.waitPhase(rid('1'), PhaseWaiting)
				if st := h.s.Stats(); st.Running != 0 || st.Waiting != 1 {
					t.Fatalf("retract: %+v", st)
				}
			}
			h.post("/continue_generation", `{"torch_empty_cache":true}`)
			r := <-res
			if !slices.Equal(r.ids(), replyIDs(reply)) || r.Finish["type"] != "stop" {
				t.Fatalf("after continue: %d ids, finish %v", len(r.ids()), r.Finish)
			}
			st = h.s.Stats()
			if mode == pauseRetract && st.PromptTokens <= int64(len(in)) {
				t.Fatalf("a retracted request was not prefilled again: %+v", st)
			}
			if mode == pauseInPlace && st.PromptTokens != int64(len(in)) {
				t.Fatalf("an in-place pause prefilled again: %+v", st)
			}
		})
	}
}

func TestUpdateWeightVersion(t *testing.T) {
	h := newHarness(t, slow)
	in := prompt("write")
	running := h.async(genBody(rid('1'), in, scripted(longReply, 1<<16)))
	h.waitDecoding(rid('1'))

	v := h.post("/update_weight_version", `{"new_version":"v2","abort_all_requests":false}`)
	if v["success"] != true || v["new_version"] != "v2" {
		t.Fatalf("update_weight_version: %v", v)
	}
	if _, ok := h.s.Request(rid('1')); !ok {
		t.Fatal("abort_all_requests=false aborted the request")
	}
	h.post("/update_weight_version", `{"new_version":"v3"}`) // aborts by default
	r := <-running
	checkPartial(t, r, replyIDs(longReply), 1)
	if r.MetaInfo["weight_version"] != "v3" {
		t.Fatalf("weight_version = %v", r.MetaInfo["weight_version"])
	}
	if mi := h.getJSON("/get_model_info"); mi["weight_version"] != "v3" || mi["is_generation"] != true {
		t.Fatalf("get_model_info = %v", mi)
	}
}

func (h *harness) getJSON(path string) map[string]any {
	h.t.Helper()
	status, b := h.do(http.MethodGet, path, nil)
	if status != http.StatusOK {
		h.t.Fatalf("GET %s: %d %s", path, status, b)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		h.t.Fatalf("GET %s: %s: %v", path, b, err)
	}
	return v
}

func TestLoads(t *testing.T) {
	cfg := slow
	cfg.MaxRunning = 1
	h := newHarness(t, cfg)
	in := prompt("write")
	a := h.async(genBody(rid('1'), in, scripted(longReply, 1<<16)))
	h.waitDecoding(rid('1'))
	b := h.async(genBody(rid('2'), in, scripted("x", 10)))
	h.waitPhase(rid('2'), PhaseWaiting)

	v := h.getJSON("/v1/loads?include=core")
	loads, _ := v["loads"].([]any)
	if len(loads) != 1 {
		t.Fatalf("/v1/loads = %v", v)
	}
	l := loads[0].(map[string]any)
	if l["num_running_reqs"] != float64(1) || l["num_waiting_reqs"] != float64(1) || l["dp_rank"] != float64(0) ||
		l["max_running_requests"] != float64(1) {
		t.Fatalf("load = %v", l)
	}
	if _, ok := v["timestamp"].(string); !ok {
		t.Fatalf("/v1/loads = %v", v)
	}
	if status, _ := h.do(http.MethodGet, "/v1/loads?include=bogus", nil); status != http.StatusBadRequest {
		t.Fatalf("include=bogus: %d", status)
	}
	status, body := h.do(http.MethodGet, "/get_load", nil)
	var gl []map[string]any
	if err := json.Unmarshal(body, &gl); status != http.StatusOK || err != nil || len(gl) != 1 ||
		gl[0]["num_reqs"] != float64(2) || gl[0]["num_waiting_reqs"] != float64(1) {
		t.Fatalf("/get_load: %d %s", status, body)
	}
	if status, _ := h.do(http.MethodPost, "/flush_cache", nil); status != http.StatusBadRequest {
		t.Fatalf("flush_cache while busy: %d", status)
	}
	h.abort(`{"abort_all":true}`)
	<-a
	<-b
	if status, _ := h.do(http.MethodPost, "/flush_cache", nil); status != http.StatusOK {
		t.Fatalf("flush_cache when idle: %d", status)
	}
}

func TestMaxRunning(t *testing.T) {
	h := newHarness(t, Config{DecodeTokensPerSec: 5000, TimeScale: 1, MaxRunning: 2})
	in := prompt("write")
	var results []<-chan *genResponse
	for i := range 6 {
		results = append(results, h.async(genBody(rid(byte('a'+i)), in, scripted(longReply[:200], 1000))))
	}
	done := 0
	for done < len(results) {
		if st := h.s.Stats(); st.Running > 2 {
			t.Fatalf("Stats = %+v: more than MaxRunning", st)
		}
		select {
		case r := <-results[done]:
			if !slices.Equal(r.ids(), replyIDs(longReply[:200])) {
				t.Fatalf("request %d: %v", done, r.Finish)
			}
			done++
		default:
		}
	}
	if st := h.s.Stats(); st.Running != 0 || st.Waiting != 0 || st.Requests != 6 || st.GeneratedTokens != 6*201 {
		t.Fatalf("Stats = %+v", st)
	}
}

func TestClientGoneFreesSlot(t *testing.T) {
	cfg := slow
	cfg.MaxRunning = 1
	h := newHarness(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body, _ := json.Marshal(genBody(rid('1'), prompt("write"), scripted(longReply, 1<<16)))
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.url+"/generate", bytes.NewReader(body))
	errc := make(chan error, 1)
	go func() {
		resp, err := h.hc.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	h.waitDecoding(rid('1'))
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the cancelled request succeeded")
	}
	waitUntil(t, "the slot to be freed", func() bool { return h.s.Stats().Running == 0 })
	if r := h.mustGenerate(genBody(rid('2'), prompt("write"), scripted("ok", 10))); !slices.Equal(r.ids(), replyIDs("ok")) {
		t.Fatalf("after a client went away: %v", r.ids())
	}
	if st := h.s.Stats(); st.Aborted != 1 {
		t.Fatalf("Stats = %+v", st)
	}
}
