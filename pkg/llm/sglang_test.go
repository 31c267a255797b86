package llm

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyNoLeaks(m) }

// recorder is an httptest server that records what it is sent and answers
// with a fixed status and body.
type recorder struct {
	srv    *httptest.Server
	mu     sync.Mutex
	calls  []recordedCall
	status int
	body   string
}

type recordedCall struct {
	method, path, contentType string
	body                      []byte
}

func newRecorder(t *testing.T, status int, body string) *recorder {
	rec := &recorder{status: status, body: body}
	rec.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.calls = append(rec.calls, recordedCall{r.Method, r.URL.Path, r.Header.Get("Content-Type"), b})
		status, body := rec.status, rec.body
		rec.mu.Unlock()
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(rec.srv.Close)
	return rec
}

func (rec *recorder) client(opts SGLangOptions) *SGLang {
	opts.HTTPClient = rec.srv.Client()
	if opts.Backoff == 0 {
		opts.Backoff = time.Millisecond
	}
	return NewSGLang(rec.srv.URL+"/", opts)
}

func (rec *recorder) recorded() []recordedCall {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return slices.Clone(rec.calls)
}

const testRID = "0123456789abcdef0123456789abcdef"

// capturedResponse has the shape of a real SGLang /generate answer for a
// request with return_logprob (tokenizer_manager.py _handle_batch_output),
// including fields actloop ignores.
const capturedResponse = `{
  "text": "ls -la",
  "output_ids": [108, 115, 32, 45, 108, 97, 257],
  "meta_info": {
    "id": "0123456789abcdef0123456789abcdef",
    "finish_reason": {"type": "stop", "matched": 257},
    "prompt_tokens": 42,
    "weight_version": "step-7",
    "num_retractions": 0,
    "input_token_logprobs": [[null, 256, null]],
    "output_token_logprobs": [[-0.0012, 108, null], [-0.25, 115, null], [-1e-05, 32, null],
      [-3.5, 45, null], [0, 108, null], [-0.5, 97, null], [-0.0001, 257, null]],
    "output_token_logprobs_length": 7,
    "reasoning_tokens": 0,
    "completion_tokens": 7,
    "cached_tokens": 32,
    "weight_versions": [{"version": "step-7", "start": 0, "end": 7}],
    "e2e_latency": 0.531
  }
}`

func TestGenerateSendsSGLangFields(t *testing.T) {
	skip := false
	tests := []struct {
		name string
		req  Request
		want string // the exact JSON body
	}{
		{
			name: "everything set",
			req: Request{
				RID:      testRID,
				InputIDs: []int32{256, 117, 10},
				Sampling: SamplingParams{
					MaxNewTokens: 512, Temperature: 0.7, TopP: 0.9, TopK: 20, MinP: 0.05,
					Stop: []string{"</s>"}, StopTokenIDs: []int32{257}, SkipSpecialTokens: &skip, NoStopTrim: true,
				},
				Reply: "ls -la",
			},
			want: `{"rid":"0123456789abcdef0123456789abcdef","input_ids":[256,117,10],
				"sampling_params":{"max_new_tokens":512,"temperature":0.7,"top_p":0.9,"top_k":20,"min_p":0.05,
				"stop":["</s>"],"stop_token_ids":[257],"skip_special_tokens":false,"no_stop_trim":true,
				"custom_params":{"actloop_reply":"ls -la"}},
				"return_logprob":true,"stream":false}`,
		},
		{
			name: "zero values",
			req:  Request{RID: testRID, InputIDs: []int32{1}, Sampling: SamplingParams{MaxNewTokens: 1}},
			want: `{"rid":"0123456789abcdef0123456789abcdef","input_ids":[1],
				"sampling_params":{"max_new_tokens":1,"temperature":0,"top_p":1,"top_k":-1,"min_p":0,"no_stop_trim":false},
				"return_logprob":true,"stream":false}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder(t, http.StatusOK, capturedResponse)
			if _, err := rec.client(SGLangOptions{}).Generate(context.Background(), tt.req); err != nil {
				t.Fatal(err)
			}
			calls := rec.recorded()
			if len(calls) != 1 {
				t.Fatalf("%d calls, want 1", len(calls))
			}
			c := calls[0]
			if c.method != http.MethodPost || c.path != "/generate" || c.contentType != "application/json" {
				t.Fatalf("sent %s %s (%s)", c.method, c.path, c.contentType)
			}
			assertJSONEqual(t, c.body, tt.want)
		})
	}
}

func assertJSONEqual(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("sent invalid JSON %s: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want: %v", err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("sent\n%s\nwant\n%s", got, want)
	}
}

func TestGenerateDecodesCapturedResponse(t *testing.T) {
	rec := newRecorder(t, http.StatusOK, capturedResponse)
	res, err := rec.client(SGLangOptions{}).Generate(context.Background(),
		Request{RID: testRID, InputIDs: []int32{1}, Sampling: SamplingParams{MaxNewTokens: 10}})
	if err != nil {
		t.Fatal(err)
	}
	want := Result{
		OutputIDs:        []int32{108, 115, 32, 45, 108, 97, 257},
		Logprobs:         []float32{-0.0012, -0.25, -1e-05, -3.5, 0, -0.5, -0.0001},
		Finish:           Finish{Type: FinishStop, Matched: 257},
		PromptTokens:     42,
		CompletionTokens: 7,
		CachedTokens:     32,
		WeightVersion:    "step-7",
	}
	if !reflect.DeepEqual(res, want) {
		t.Fatalf("got %+v\nwant %+v", res, want)
	}
}

func TestGenerateRejectsForeignID(t *testing.T) {
	body := strings.Replace(capturedResponse, testRID, "ffffffffffffffffffffffffffffffff", 1)
	rec := newRecorder(t, http.StatusOK, body)
	_, err := rec.client(SGLangOptions{}).Generate(context.Background(),
		Request{RID: testRID, InputIDs: []int32{1}, Sampling: SamplingParams{MaxNewTokens: 10}})
	if !errors.Is(err, ErrBadResponse) || !strings.Contains(err.Error(), "meta_info.id") {
		t.Fatalf("err = %v, want ErrBadResponse naming meta_info.id", err)
	}
}

func TestDecodeGenerateResponse(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		want    Result
		wantErr string // substring of the error; "" means success
	}{
		{
			name: "stop string",
			body: `{"output_ids":[1,2],"meta_info":{"finish_reason":{"type":"stop","matched":"\n\n"},
				"output_token_logprobs":[[-1,1,"a"],[-2,2,"b"]],"prompt_tokens":3,"completion_tokens":2,"cached_tokens":0}}`,
			want: Result{OutputIDs: []int32{1, 2}, Logprobs: []float32{-1, -2},
				Finish: Finish{Type: FinishStop, Matched: -1, MatchedText: "\n\n"}, PromptTokens: 3, CompletionTokens: 2},
		},
		{
			name: "stop matched list and null",
			body: `{"output_ids":[9],"meta_info":{"finish_reason":{"type":"stop","matched":[4,9]},
				"output_token_logprobs":[[-1,9,null]]}}`,
			want: Result{OutputIDs: []int32{9}, Logprobs: []float32{-1},
				Finish: Finish{Type: FinishStop, Matched: 9}, CompletionTokens: 1},
		},
		{
			name: "length",
			body: `{"output_ids":[5,6],"meta_info":{"finish_reason":{"type":"length","length":2},
				"output_token_logprobs":[[-1,5,null],[-1,6,null]],"completion_tokens":2}}`,
			want: Result{OutputIDs: []int32{5, 6}, Logprobs: []float32{-1, -1},
				Finish: Finish{Type: FinishLength, Matched: -1, Length: 2}, CompletionTokens: 2},
		},
		{
			name: "abort before prefill",
			body: `{"text":"","meta_info":{"id":"x","finish_reason":{"type":"abort","message":"Abort before prefill"},
				"prompt_tokens":0,"completion_tokens":0}}`,
			want: Result{Finish: Finish{Type: FinishAbort, Matched: -1, Message: "Abort before prefill"}},
		},
		{
			name: "abort in waiting queue",
			body: `{"text":"","output_ids":[],"meta_info":{"id":"x","finish_reason":{"type":"abort","message":"Abort in waiting queue"},
				"weight_version":"3","e2e_latency":0.1,"output_token_logprobs":[],"completion_tokens":0}}`,
			want: Result{OutputIDs: []int32{}, Logprobs: []float32{},
				Finish: Finish{Type: FinishAbort, Matched: -1, Message: "Abort in waiting queue"}, WeightVersion: "3"},
		},
		{
			name: "running abort with partial output",
			body: `{"output_ids":[7,8],"meta_info":{"finish_reason":{"type":"abort","message":"Aborted","status_code":null,"err_type":null},
				"output_token_logprobs":[[-0.5,7,null],[-0.25,8,null]],"prompt_tokens":4,"completion_tokens":2,"cached_tokens":0}}`,
			want: Result{OutputIDs: []int32{7, 8}, Logprobs: []float32{-0.5, -0.25},
				Finish: Finish{Type: FinishAbort, Matched: -1, Message: "Aborted"}, PromptTokens: 4, CompletionTokens: 2},
		},
		{
			name: "abort with log-probs but no output_ids",
			body: `{"meta_info":{"finish_reason":{"type":"abort","message":null},"output_token_logprobs":[[-0.5,7,null]]}}`,
			want: Result{OutputIDs: []int32{7}, Logprobs: []float32{-0.5},
				Finish: Finish{Type: FinishAbort, Matched: -1}, CompletionTokens: 1},
		},
		{name: "not JSON", body: `{"output_ids":`, wantErr: "response"},
		{name: "no meta_info", body: `{"output_ids":[]}`, wantErr: "meta_info: missing"},
		{name: "unfinished", body: `{"output_ids":[],"meta_info":{"finish_reason":null}}`, wantErr: "meta_info.finish_reason: null"},
		{name: "no finish_reason", body: `{"output_ids":[],"meta_info":{}}`, wantErr: "meta_info.finish_reason: missing"},
		{name: "unknown finish type", body: `{"meta_info":{"finish_reason":{"type":"error"}}}`, wantErr: "meta_info.finish_reason.type"},
		{name: "finish without type", body: `{"meta_info":{"finish_reason":{}}}`, wantErr: "meta_info.finish_reason.type"},
		{name: "matched of wrong type", body: `{"meta_info":{"finish_reason":{"type":"stop","matched":true}}}`,
			wantErr: "meta_info.finish_reason.matched"},
		{name: "count of wrong type", body: `{"meta_info":{"finish_reason":{"type":"length"},"prompt_tokens":"7"}}`,
			wantErr: "meta_info.prompt_tokens"},
		{name: "negative count", body: `{"meta_info":{"finish_reason":{"type":"length"},"cached_tokens":-1}}`,
			wantErr: "meta_info.cached_tokens"},
		{name: "ids without log-probs", body: `{"output_ids":[1],"meta_info":{"finish_reason":{"type":"length","length":1}}}`,
			wantErr: "meta_info.output_token_logprobs: missing"},
		{name: "log-probs without ids", body: `{"meta_info":{"finish_reason":{"type":"length","length":1},"output_token_logprobs":[[-1,1,null]]}}`,
			wantErr: "output_ids: missing"},
		{name: "count mismatch", body: `{"output_ids":[1,2],"meta_info":{"finish_reason":{"type":"length"},"output_token_logprobs":[[-1,1,null]]}}`,
			wantErr: "1 entries for 2 output_ids"},
		{name: "id mismatch", body: `{"output_ids":[1,2],"meta_info":{"finish_reason":{"type":"length"},"output_token_logprobs":[[-1,1,null],[-1,3,null]]}}`,
			wantErr: "meta_info.output_token_logprobs[1]: token id 3, but output_ids[1] is 2"},
		{name: "null logprob", body: `{"output_ids":[1],"meta_info":{"finish_reason":{"type":"length"},"output_token_logprobs":[[null,1,null]]}}`,
			wantErr: "meta_info.output_token_logprobs[0][0]: null logprob"},
		{name: "short entry", body: `{"output_ids":[1],"meta_info":{"finish_reason":{"type":"length"},"output_token_logprobs":[[-1]]}}`,
			wantErr: "meta_info.output_token_logprobs[0]: 1 elements"},
		{name: "entry not a list", body: `{"output_ids":[1],"meta_info":{"finish_reason":{"type":"length"},"output_token_logprobs":[{"a":1}]}}`,
			wantErr: "meta_info.output_token_logprobs[0]"},
		{name: "token id out of range", body: `{"output_ids":[1],"meta_info":{"finish_reason":{"type":"length"},"output_token_logprobs":[[-1,99999999999,null]]}}`,
			wantErr: "meta_info.output_token_logprobs[0][1]"},
		{name: "output_ids of wrong type", body: `{"output_ids":"abc","meta_info":{"finish_reason":{"type":"length"}}}`,
			wantErr: "output_ids"},
		{name: "batch answer", body: `[{"output_ids":[]}]`, wantErr: "response"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeGenerateResponse([]byte(tt.body))
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, ErrBadResponse) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want ErrBadResponse containing %q", err, tt.wantErr)
				}
				if Temporary(err) {
					t.Fatalf("bad response reported temporary")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// flaky answers status for the first n calls, then the captured response.
func flaky(t *testing.T, n int, status int) (*httptest.Server, *atomic.Int32) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= int32(n) {
			http.Error(w, `{"error":{"message":"overloaded"}}`, status)
			return
		}
		_, _ = io.WriteString(w, capturedResponse)
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

func TestGenerateRetries(t *testing.T) {
	req := Request{RID: testRID, InputIDs: []int32{1}, Sampling: SamplingParams{MaxNewTokens: 10}}
	tests := []struct {
		name          string
		failures      int
		status        int
		retries       int
		wantCalls     int32
		wantStatus    int // 0: success
		wantTemporary bool
	}{
		{name: "5xx then success", failures: 2, status: 503, retries: 3, wantCalls: 3},
		{name: "5xx exhausts retries", failures: 10, status: 500, retries: 2, wantCalls: 3, wantStatus: 500, wantTemporary: true},
		{name: "no retries", failures: 10, status: 502, retries: -1, wantCalls: 1, wantStatus: 502, wantTemporary: true},
		{name: "4xx not retried", failures: 10, status: 400, retries: 3, wantCalls: 1, wantStatus: 400},
		{name: "429 not retried", failures: 10, status: 429, retries: 3, wantCalls: 1, wantStatus: 429},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, calls := flaky(t, tt.failures, tt.status)
			c := NewSGLang(srv.URL, SGLangOptions{HTTPClient: srv.Client(), Retries: tt.retries, Backoff: time.Millisecond})
			res, err := c.Generate(context.Background(), req)
			if got := calls.Load(); got != tt.wantCalls {
				t.Errorf("%d calls, want %d", got, tt.wantCalls)
			}
			if tt.wantStatus == 0 {
				if err != nil || len(res.OutputIDs) != 7 {
					t.Fatalf("Generate = %+v, %v", res, err)
				}
				return
			}
			var he *HTTPError
			if !errors.As(err, &he) || he.Status != tt.wantStatus || !strings.Contains(he.Body, "overloaded") {
				t.Fatalf("err = %v, want HTTPError %d", err, tt.wantStatus)
			}
			if Temporary(err) != tt.wantTemporary {
				t.Fatalf("Temporary(%v) = %v", err, !tt.wantTemporary)
			}
		})
	}
}

func TestConnectionErrorIsTemporary(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	c := NewSGLang(url, SGLangOptions{Retries: 1, Backoff: time.Millisecond})
	_, err := c.Generate(context.Background(), Request{RID: testRID, InputIDs: []int32{1}, Sampling: SamplingParams{MaxNewTokens: 1}})
	if err == nil || !Temporary(err) {
		t.Fatalf("err = %v, want a temporary error", err)
	}
	if err := c.Abort(context.Background(), testRID); err == nil || !Temporary(err) {
		t.Fatalf("Abort err = %v, want a temporary error", err)
	}
	if err := c.Health(context.Background()); err == nil || !Temporary(err) {
		t.Fatalf("Health err = %v, want a temporary error", err)
	}
}

func TestContextErrors(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // hang until the client gives up
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	c := NewSGLang(srv.URL, SGLangOptions{HTTPClient: srv.Client(), Backoff: time.Millisecond})
	req := Request{RID: testRID, InputIDs: []int32{1}, Sampling: SamplingParams{MaxNewTokens: 1}}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := c.Generate(ctx, req)
	if !errors.Is(err, context.DeadlineExceeded) || !Temporary(err) {
		t.Fatalf("deadline: err = %v, want DeadlineExceeded and temporary", err)
	}

	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	_, err = c.Generate(ctx, req)
	if !errors.Is(err, context.Canceled) || Temporary(err) {
		t.Fatalf("cancelled: err = %v, want Canceled and not temporary", err)
	}
}

func TestAbortAndHealth(t *testing.T) {
	rec := newRecorder(t, http.StatusOK, "")
	c := rec.client(SGLangOptions{})
	if err := c.Abort(context.Background(), testRID); err != nil {
		t.Fatal(err)
	}
	if err := c.Health(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c.SetWeightVersion(context.Background(), "7"); err != nil {
		t.Fatal(err)
	}
	if err := c.AbortPrefix(context.Background(), testRID[:RIDPrefixLen]); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "0123", testRID, "0123456G"} {
		if err := c.AbortPrefix(context.Background(), bad); !errors.Is(err, ErrInvalidRequest) {
			t.Fatalf("AbortPrefix(%q) = %v", bad, err)
		}
	}
	calls := rec.recorded()
	if len(calls) != 4 {
		t.Fatalf("%d calls, want 4", len(calls))
	}
	assertJSONEqual(t, calls[3].body, `{"rid":"`+testRID[:RIDPrefixLen]+`"}`)
	if c := calls[2]; c.method != http.MethodPost || c.path != "/update_weight_version" {
		t.Fatalf("set weight version sent %s %s", c.method, c.path)
	}
	// abort_all_requests defaults to true in SGLang: it must be sent false.
	assertJSONEqual(t, calls[2].body, `{"new_version":"7","abort_all_requests":false}`)
	if c := calls[0]; c.method != http.MethodPost || c.path != "/abort_request" {
		t.Fatalf("abort sent %s %s", c.method, c.path)
	}
	assertJSONEqual(t, calls[0].body, `{"rid":"`+testRID+`"}`)
	if c := calls[1]; c.method != http.MethodGet || c.path != "/health" {
		t.Fatalf("health sent %s %s", c.method, c.path)
	}

	rec.mu.Lock()
	rec.status = http.StatusServiceUnavailable
	rec.mu.Unlock()
	var he *HTTPError
	if err := c.Health(context.Background()); !errors.As(err, &he) || he.Status != 503 {
		t.Fatalf("Health on 503 = %v", err)
	}
}

func TestInvalidRequestsAreNotSent(t *testing.T) {
	rec := newRecorder(t, http.StatusOK, capturedResponse)
	c := rec.client(SGLangOptions{})
	ok := Request{RID: testRID, InputIDs: []int32{1}, Sampling: SamplingParams{MaxNewTokens: 1}}
	tests := []struct {
		name   string
		mutate func(*Request)
	}{
		{"empty rid", func(r *Request) { r.RID = "" }},
		{"short rid", func(r *Request) { r.RID = "abc" }},
		{"upper-case rid", func(r *Request) { r.RID = strings.ToUpper(testRID) }},
		{"no input", func(r *Request) { r.InputIDs = nil }},
		{"zero max_new_tokens", func(r *Request) { r.Sampling.MaxNewTokens = 0 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := ok
			tt.mutate(&req)
			if _, err := c.Generate(context.Background(), req); !errors.Is(err, ErrInvalidRequest) || Temporary(err) {
				t.Fatalf("err = %v, want ErrInvalidRequest", err)
			}
		})
	}
	for _, rid := range []string{"", "0123"} {
		if err := c.Abort(context.Background(), rid); !errors.Is(err, ErrInvalidRequest) {
			t.Fatalf("Abort(%q) = %v, want ErrInvalidRequest", rid, err)
		}
	}
	if n := len(rec.recorded()); n != 0 {
		t.Fatalf("%d requests sent", n)
	}
}

func TestRIDs(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		rid := NewRID()
		if !ValidRID(rid) || seen[rid] {
			t.Fatalf("NewRID() = %q: invalid or repeated", rid)
		}
		seen[rid] = true
	}
	for _, rid := range []string{"", testRID[:31], testRID + "0", "g123456789abcdef0123456789abcdef", strings.ToUpper(testRID)} {
		if ValidRID(rid) {
			t.Errorf("ValidRID(%q) = true", rid)
		}
	}
	p := NewRIDPrefix()
	if len(p) != RIDPrefixLen {
		t.Fatalf("NewRIDPrefix() = %q", p)
	}
	if rid := NewRIDWithPrefix(p); !ValidRID(rid) || !strings.HasPrefix(rid, p) || rid == NewRIDWithPrefix(p) {
		t.Fatalf("NewRIDWithPrefix(%q) = %q", p, rid)
	}
}

func TestFinishTypeString(t *testing.T) {
	for ft, want := range map[FinishType]string{FinishStop: "stop", FinishLength: "length", FinishAbort: "abort", 0: "FinishType(0)"} {
		if got := ft.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(ft), got, want)
		}
	}
}
