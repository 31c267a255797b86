package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/tokenize"
)

func TestMain(m *testing.M) { testkit.VerifyNoLeaks(m) }

var chat = tokenize.NewByteChatML()

// harness is a Server behind an httptest server.
type harness struct {
	t   *testing.T
	s   *Server
	url string
	hc  *http.Client
	wg  sync.WaitGroup
	ctx context.Context // ended at cleanup: requests still waiting give up
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	s := New(cfg)
	ts := httptest.NewServer(s)
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{t: t, s: s, url: ts.URL, hc: ts.Client(), ctx: ctx}
	// End the requests still waiting first (a test that failed may leave
	// one the server holds, paused): the server's Close waits for its
	// handlers, and the goroutines of async for their answers.
	t.Cleanup(func() { cancel(); ts.Close(); h.wg.Wait() })
	return h
}

// genResponse is a /generate answer as the tests read it.
type genResponse struct {
	Text      string         `json:"text"`
	OutputIDs *[]int32       `json:"output_ids"`
	MetaInfo  map[string]any `json:"meta_info"`
	Logprobs  []float32      `json:"-"` // from meta_info.output_token_logprobs
	Finish    map[string]any `json:"-"` // meta_info.finish_reason
	rawMeta   map[string]json.RawMessage
	status    int
	errorBody string
}

func (r *genResponse) ids() []int32 {
	if r.OutputIDs == nil {
		return nil
	}
	return *r.OutputIDs
}

// do sends a request and returns the status and body.
func (h *harness) do(method, path string, body any) (int, []byte) {
	h.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewReader([]byte(b))
	default:
		enc, err := json.Marshal(b)
		if err != nil {
			h.t.Fatal(err)
		}
		rd = bytes.NewReader(enc)
	}
	req, err := http.NewRequestWithContext(h.ctx, method, h.url+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	resp, err := h.hc.Do(req)
	if err != nil {
		if h.ctx.Err() == nil {
			h.t.Errorf("%s %s: %v", method, path, err)
		}
		return 0, nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Errorf("%s %s: read: %v", method, path, err)
	}
	return resp.StatusCode, b
}

// generate posts body to /generate and decodes a 200 answer.
func (h *harness) generate(body any) *genResponse {
	h.t.Helper()
	status, b := h.do(http.MethodPost, "/generate", body)
	r := &genResponse{status: status}
	if status != http.StatusOK {
		r.errorBody = string(b)
		return r
	}
	if err := json.Unmarshal(b, r); err != nil {
		h.t.Errorf("decode %s: %v", b, err)
		return r
	}
	var raw struct {
		MetaInfo map[string]json.RawMessage `json:"meta_info"`
	}
	_ = json.Unmarshal(b, &raw)
	r.rawMeta = raw.MetaInfo
	r.Finish, _ = r.MetaInfo["finish_reason"].(map[string]any)
	if lps, ok := r.MetaInfo["output_token_logprobs"].([]any); ok {
		r.Logprobs = []float32{}
		for i, e := range lps {
			entry := e.([]any)
			if id := int32(entry[1].(float64)); r.OutputIDs == nil || (*r.OutputIDs)[i] != id {
				h.t.Errorf("output_token_logprobs[%d] id %d disagrees with output_ids", i, id)
			}
			r.Logprobs = append(r.Logprobs, float32(entry[0].(float64)))
		}
	}
	return r
}

// mustGenerate is generate that requires a 200.
func (h *harness) mustGenerate(body any) *genResponse {
	h.t.Helper()
	r := h.generate(body)
	if r.status != http.StatusOK {
		h.t.Fatalf("generate: status %d: %s", r.status, r.errorBody)
	}
	return r
}

// async runs generate on a goroutine; the channel yields its answer.
func (h *harness) async(body any) <-chan *genResponse {
	ch := make(chan *genResponse, 1)
	h.wg.Go(func() { ch <- h.generate(body) })
	return ch
}

// genBody is a /generate body.
func genBody(rid string, input []int32, sp map[string]any) map[string]any {
	return map[string]any{"rid": rid, "input_ids": input, "sampling_params": sp, "return_logprob": true}
}

// scripted is sampling params scripting reply, stopping at <|im_end|>.
func scripted(reply string, maxNew int) map[string]any {
	return map[string]any{
		"max_new_tokens": maxNew,
		"stop_token_ids": []int32{tokenize.ImEnd},
		"custom_params":  map[string]any{replyParam: reply},
	}
}

func prompt(task string) []int32 {
	return slices.Concat(chat.Message("system", "You are a helpful assistant."), chat.Message("user", task), chat.GenerationPrompt())
}

func rid(c byte) string { return string(bytes.Repeat([]byte{c}, 32)) }

// waitUntil polls cond until it holds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(200 * time.Microsecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// waitDecoding waits until rid has generated at least one token and
// returns how many.
func (h *harness) waitDecoding(rid string) int {
	h.t.Helper()
	var n int
	waitUntil(h.t, rid+" decoding", func() bool {
		info, ok := h.s.Request(rid)
		n = info.Generated
		return ok && info.Phase == PhaseDecode && n >= 1
	})
	return n
}

func (h *harness) waitPhase(rid string, p Phase) {
	h.t.Helper()
	waitUntil(h.t, rid+" "+p.String(), func() bool {
		info, ok := h.s.Request(rid)
		return ok && info.Phase == p
	})
}

func replyIDs(reply string) []int32 { return append(tokenize.Bytes{}.Encode(reply), tokenize.ImEnd) }
