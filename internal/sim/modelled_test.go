package sim

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/actloop/actloop/internal/batching"
)

// modelCfg is a simulator on the server model, at a time scale that
// catches a request decoding: about 1 ms of wall time per decode step.
func modelCfg() Config {
	m := batching.DefaultConfig()
	return Config{Model: &m, TimeScale: 0.1}
}

// The server model changes when tokens come, never which: the same
// requests get the same answers, and a conversation's next turn finds its
// prompt and output in the model's cache.
func TestModelAnswersAsTheSimulatorDoes(t *testing.T) {
	plain, modelled := newHarness(t, Config{}), newHarness(t, Config{Model: modelCfg().Model})
	in := prompt(strings.Repeat("a long task description ", 8))
	sp := scripted("THOUGHT: look.\n\n```bash\nls\n```", 100)
	a, b := plain.mustGenerate(genBody(rid('1'), in, sp)), modelled.mustGenerate(genBody(rid('1'), in, sp))
	if !slices.Equal(a.ids(), b.ids()) || !slices.Equal(a.Logprobs, b.Logprobs) || a.Finish["type"] != b.Finish["type"] {
		t.Fatalf("with the model: %v %v; without: %v %v", b.ids(), b.Finish, a.ids(), a.Finish)
	}
	cont := slices.Concat(in, b.ids(), chat.CloseTurn(b.ids()), chat.Message("user", "next"), chat.GenerationPrompt())
	next := modelled.mustGenerate(genBody(rid('2'), cont, sp))
	if got, least := int(next.MetaInfo["cached_tokens"].(float64)), (len(in)+len(b.ids())-1)/blockSize*blockSize; got < least {
		t.Fatalf("next turn: cached_tokens %d, want at least %d (prompt and output, in whole blocks)", got, least)
	}
	if st := modelled.s.Stats(); st.Running != 0 || st.Waiting != 0 || st.Requests != 2 {
		t.Fatalf("Stats = %+v", st)
	}
	// /v1/loads reports the model's pool.
	core := modelled.s.loadCore()
	if core["max_total_num_tokens"] != batching.DefaultConfig().MaxTotalTokens || core["num_running_reqs"] != 0 {
		t.Fatalf("loads core = %v", core)
	}
}

// Aborts and the three pause modes work on the model as on the plain
// simulator.
func TestModelAbortAndPause(t *testing.T) {
	h := newHarness(t, modelCfg())
	in := prompt("write")
	reply := longReply[:1500]

	// An abort mid-decode answers with the tokens so far.
	res := h.async(genBody(rid('1'), in, scripted(reply, 1<<16)))
	h.waitDecoding(rid('1'))
	h.abort(`{"rid":"` + rid('1') + `"}`)
	checkPartial(t, <-res, replyIDs(reply), 1)

	for _, mode := range []string{pauseAbort, pauseInPlace, pauseRetract} {
		res := h.async(genBody(rid('2'), in, scripted(reply, 1<<16)))
		h.waitDecoding(rid('2'))
		h.post("/pause_generation", `{"mode":"`+mode+`"}`)
		if mode == pauseAbort {
			checkPartial(t, <-res, replyIDs(reply), 1)
			h.post("/continue_generation", "")
			continue
		}
		info, ok := h.s.Request(rid('2'))
		if !ok || info.Generated < 1 {
			t.Fatalf("%s: the request is gone during the pause: %+v", mode, info)
		}
		if mode == pauseRetract {
			h.waitPhase(rid('2'), PhaseWaiting)
		}
		h.post("/continue_generation", "")
		if r := <-res; !slices.Equal(r.ids(), replyIDs(reply)) || r.Finish["type"] != "stop" {
			t.Fatalf("%s: after continue: %d ids, finish %v", mode, len(r.ids()), r.Finish)
		}
	}
	if st := h.s.Stats(); st.Running != 0 || st.Waiting != 0 {
		t.Fatalf("Stats = %+v", st)
	}
}

// An input the pool cannot hold is refused with 400, naming the limit.
func TestModelRefusesAnInputLargerThanThePool(t *testing.T) {
	m := batching.DefaultConfig()
	m.MaxTotalTokens = 50
	h := newHarness(t, Config{Model: &m})
	r := h.generate(genBody(rid('1'), prompt(strings.Repeat("long ", 40)), scripted("ok", 10)))
	if r.status != 400 || !strings.Contains(r.errorBody, "max_total_num_tokens") {
		t.Fatalf("status %d: %s", r.status, r.errorBody)
	}
}

// /get_server_info reports the pool and the scheduler's settings under
// SGLang's names.
func TestServerInfo(t *testing.T) {
	m := batching.DefaultConfig()
	h := newHarness(t, Config{Model: &m})
	status, b := h.do("GET", "/get_server_info", nil)
	var info map[string]any
	if status != 200 || json.Unmarshal(b, &info) != nil {
		t.Fatalf("status %d: %s", status, b)
	}
	if info["max_total_num_tokens"] != float64(m.MaxTotalTokens) || info["max_running_requests"] != float64(m.MaxRunning) ||
		info["chunked_prefill_size"] != float64(m.ChunkedPrefill) || info["schedule_policy"] != m.Policy {
		t.Fatalf("server info = %v", info)
	}
}
