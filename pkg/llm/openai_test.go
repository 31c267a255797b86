package llm

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/testkit"
)

// capturedStream has the shape of vLLM's streamed /v1/completions answer for
// a request with logprobs 0, return_tokens_as_token_ids and include_usage
// (completion_stream_generator in serving_completion.py), fields actloop
// ignores included.
const capturedStream = `data: {"id":"cmpl-0123456789abcdef0123456789abcdef","object":"text_completion","created":1750000000,"model":"Qwen/Qwen3-8B","choices":[{"index":0,"text":"ls","logprobs":{"text_offset":[0],"token_logprobs":[-0.0012],"tokens":["token_id:4730"],"top_logprobs":[{"token_id:4730":-0.0012}]},"finish_reason":null,"stop_reason":null}],"usage":null}

data: {"id":"cmpl-0123456789abcdef0123456789abcdef","object":"text_completion","created":1750000000,"model":"Qwen/Qwen3-8B","choices":[{"index":0,"text":" -la","logprobs":{"text_offset":[14,28],"token_logprobs":[-0.25,-3.5],"tokens":["token_id:481","token_id:4260"],"top_logprobs":[{"token_id:481":-0.25},{"token_id:4260":-3.5}]},"finish_reason":null,"stop_reason":null}],"usage":null}

data: {"id":"cmpl-0123456789abcdef0123456789abcdef","object":"text_completion","created":1750000000,"model":"Qwen/Qwen3-8B","choices":[{"index":0,"text":"","logprobs":{"text_offset":[41],"token_logprobs":[-0.0001],"tokens":["token_id:151645"],"top_logprobs":[{"token_id:151645":-0.0001}]},"finish_reason":"stop","stop_reason":151645}],"usage":null}

data: {"id":"cmpl-0123456789abcdef0123456789abcdef","object":"text_completion","created":1750000000,"model":"Qwen/Qwen3-8B","choices":[],"usage":{"prompt_tokens":42,"total_tokens":46,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":32}}}

data: [DONE]

`

var capturedResult = Result{
	OutputIDs:        []int32{4730, 481, 4260, 151645},
	Logprobs:         []float32{-0.0012, -0.25, -3.5, -0.0001},
	Finish:           Finish{Type: FinishStop, Matched: 151645},
	PromptTokens:     42,
	CompletionTokens: 4,
	CachedTokens:     32,
}

// sseRecorder is a recording server for the OpenAI client: it records what
// it is sent and answers with a fixed status, content type and body.
type sseRecorder struct {
	srv   *httptest.Server
	mu    sync.Mutex
	calls []recordedCall
	ids   []string // X-Request-Id of each call
	body  string
}

func newSSERecorder(t *testing.T, body string) *sseRecorder {
	rec := &sseRecorder{body: body}
	rec.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.calls = append(rec.calls, recordedCall{r.Method, r.URL.Path, r.Header.Get("Content-Type"), b})
		rec.ids = append(rec.ids, r.Header.Get("X-Request-Id"))
		body := rec.body
		rec.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(rec.srv.Close)
	return rec
}

func (rec *sseRecorder) client(opts OpenAIOptions) *OpenAI {
	opts.HTTPClient = rec.srv.Client()
	if opts.Backoff == 0 {
		opts.Backoff = time.Millisecond
	}
	return NewOpenAI(rec.srv.URL+"/", opts)
}

func TestCompletionSendsVLLMFields(t *testing.T) {
	skip := false
	tests := []struct {
		name  string
		model string
		req   Request
		want  string // the exact JSON body
	}{
		{
			name:  "everything set",
			model: "Qwen/Qwen3-8B",
			req: Request{
				RID:      testRID,
				InputIDs: []int32{151644, 872, 198},
				Sampling: SamplingParams{
					MaxNewTokens: 512, Temperature: 0.7, TopP: 0.9, TopK: 20, MinP: 0.05,
					Stop: []string{"</s>"}, StopTokenIDs: []int32{151645}, SkipSpecialTokens: &skip, NoStopTrim: true,
				},
				Reply: "ls -la",
			},
			want: `{"model":"Qwen/Qwen3-8B","prompt":[151644,872,198],"max_tokens":512,"temperature":0.7,"top_p":0.9,
				"top_k":20,"min_p":0.05,"stop":["</s>"],"stop_token_ids":[151645],"skip_special_tokens":false,
				"include_stop_str_in_output":true,"logprobs":0,"return_tokens_as_token_ids":true,"stream":true,
				"stream_options":{"include_usage":true},"request_id":"0123456789abcdef0123456789abcdef",
				"vllm_xargs":{"actloop_reply":"ls -la"}}`,
		},
		{
			name: "zero values",
			req:  Request{RID: testRID, InputIDs: []int32{1}, Sampling: SamplingParams{MaxNewTokens: 1}},
			want: `{"prompt":[1],"max_tokens":1,"temperature":0,"top_p":1,"top_k":-1,"min_p":0,
				"include_stop_str_in_output":false,"logprobs":0,"return_tokens_as_token_ids":true,"stream":true,
				"stream_options":{"include_usage":true},"request_id":"0123456789abcdef0123456789abcdef"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newSSERecorder(t, capturedStream)
			res, err := rec.client(OpenAIOptions{Model: tt.model}).Generate(context.Background(), tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(res, capturedResult) {
				t.Fatalf("got %+v\nwant %+v", res, capturedResult)
			}
			if len(rec.calls) != 1 {
				t.Fatalf("%d calls, want 1", len(rec.calls))
			}
			c := rec.calls[0]
			if c.method != http.MethodPost || c.path != "/v1/completions" || c.contentType != "application/json" {
				t.Fatalf("sent %s %s (%s)", c.method, c.path, c.contentType)
			}
			if rec.ids[0] != testRID {
				t.Fatalf("X-Request-Id = %q, want the rid", rec.ids[0])
			}
			assertJSONEqual(t, c.body, tt.want)
		})
	}
}

func TestCompletionAnswers(t *testing.T) {
	chunk := func(choice string) string {
		return `data: {"id":"cmpl-x","object":"text_completion","created":1,"model":"m","choices":[` + choice + `]}` + "\n\n"
	}
	tok := func(ids, lps string) string {
		return `{"index":0,"text":"x","logprobs":{"text_offset":[0],"token_logprobs":[` + lps + `],"tokens":[` + ids + `]},"finish_reason":null,"stop_reason":null}`
	}
	fin := func(ids, lps, reason, stop string) string {
		return `{"index":0,"text":"","logprobs":{"text_offset":[],"token_logprobs":[` + lps + `],"tokens":[` + ids + `]},"finish_reason":"` + reason + `","stop_reason":` + stop + `}`
	}
	const done = "data: [DONE]\n\n"
	tests := []struct {
		name    string
		body    string
		want    Result
		wantErr string // substring; "" means success
		status  int    // of a wanted *HTTPError
	}{
		{
			name: "length, no usage",
			body: chunk(tok(`"token_id:5"`, `-1`)) + chunk(fin(`"token_id:6"`, `-2`, "length", "null")) + done,
			want: Result{OutputIDs: []int32{5, 6}, Logprobs: []float32{-1, -2}, CompletionTokens: 2,
				Finish: Finish{Type: FinishLength, Matched: -1, Length: 2}},
		},
		{
			name: "stop string",
			body: chunk(fin(`"token_id:9"`, `-0.5`, "stop", `"\n\n"`)) + done,
			want: Result{OutputIDs: []int32{9}, Logprobs: []float32{-0.5}, CompletionTokens: 1,
				Finish: Finish{Type: FinishStop, Matched: -1, MatchedText: "\n\n"}},
		},
		{
			name: "eos (stop_reason null)",
			body: chunk(fin(`"token_id:2"`, `0`, "stop", "null")) + done,
			want: Result{OutputIDs: []int32{2}, Logprobs: []float32{0}, CompletionTokens: 1,
				Finish: Finish{Type: FinishStop, Matched: -1}},
		},
		{
			name: "abort passed on",
			body: chunk(tok(`"token_id:5"`, `-1`)) + chunk(fin(``, ``, "abort", `"aborted by pause"`)) + done,
			want: Result{OutputIDs: []int32{5}, Logprobs: []float32{-1}, CompletionTokens: 1,
				Finish: Finish{Type: FinishAbort, Matched: -1, Message: "aborted by pause"}},
		},
		{
			name: "CRLF line ends and comments",
			body: ": keep-alive\r\n\r\n" + strings.ReplaceAll(chunk(fin(`"token_id:7"`, `-1`, "length", "null")), "\n", "\r\n") + "data: [DONE]\r\n\r\n",
			want: Result{OutputIDs: []int32{7}, Logprobs: []float32{-1}, CompletionTokens: 1,
				Finish: Finish{Type: FinishLength, Matched: -1, Length: 1}},
		},
		{
			name:    "error event",
			body:    chunk(tok(`"token_id:5"`, `-1`)) + `data: {"error":{"message":"engine dead","type":"InternalServerError","param":null,"code":500}}` + "\n\n" + done,
			wantErr: "engine dead", status: 500,
		},
		{
			name:    "old flat error event",
			body:    `data: {"object":"error","message":"bad","type":"BadRequestError","code":400}` + "\n\n" + done,
			wantErr: "bad", status: 400,
		},
		{name: "token text instead of id", body: chunk(tok(`"ls"`, `-1`)) + done, wantErr: "return_tokens_as_token_ids"},
		{name: "no finish before DONE", body: chunk(tok(`"token_id:5"`, `-1`)) + done, wantErr: "[DONE] before a finish_reason"},
		{name: "cut short", body: chunk(tok(`"token_id:5"`, `-1`)), wantErr: "unexpected EOF"},
		{name: "unknown finish", body: chunk(fin(`"token_id:5"`, `-1`, "content_filter", "null")) + done, wantErr: "finish_reason"},
		{name: "null logprob", body: chunk(fin(`"token_id:5"`, `null`, "length", "null")) + done, wantErr: "token_logprobs[0]: null"},
		{name: "tokens after finish", body: chunk(fin(`"token_id:5"`, `-1`, "length", "null")) + chunk(tok(`"token_id:6"`, `-1`)) + done,
			wantErr: "tokens after finish_reason"},
		{name: "two choices", body: chunk(tok(`"token_id:5"`, `-1`)+","+tok(`"token_id:5"`, `-1`)) + done, wantErr: "choices: 2 entries"},
		{name: "no logprobs", body: chunk(`{"index":0,"text":"x","logprobs":null,"finish_reason":null}`) + done, wantErr: "choices[0].logprobs: missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newSSERecorder(t, tt.body)
			res, err := rec.client(OpenAIOptions{Retries: -1}).Generate(context.Background(),
				Request{RID: testRID, InputIDs: []int32{1}, Sampling: SamplingParams{MaxNewTokens: 10}})
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(res, tt.want) {
					t.Fatalf("got  %+v\nwant %+v", res, tt.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
			}
			var he *HTTPError
			if tt.status != 0 && (!errors.As(err, &he) || he.Status != tt.status) {
				t.Fatalf("err = %v, want an HTTPError %d", err, tt.status)
			}
		})
	}
}

func TestCompletionNonStreamedAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"cmpl-x","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"a",
			"logprobs":{"text_offset":[0],"token_logprobs":[-1],"tokens":["token_id:97"],"top_logprobs":[{"token_id:97":-1}]},
			"finish_reason":"length","stop_reason":null,"prompt_logprobs":null}],"usage":{"prompt_tokens":3,"total_tokens":4,"completion_tokens":1}}`)
	}))
	t.Cleanup(srv.Close)
	res, err := NewOpenAI(srv.URL, OpenAIOptions{HTTPClient: srv.Client()}).Generate(context.Background(),
		Request{RID: testRID, InputIDs: []int32{1, 2, 3}, Sampling: SamplingParams{MaxNewTokens: 1}})
	want := Result{OutputIDs: []int32{97}, Logprobs: []float32{-1}, PromptTokens: 3, CompletionTokens: 1,
		Finish: Finish{Type: FinishLength, Matched: -1, Length: 1}}
	if err != nil || !reflect.DeepEqual(res, want) {
		t.Fatalf("Generate = %+v, %v", res, err)
	}
}

func TestCompletionRetries(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			http.Error(w, `{"error":{"message":"overloaded"}}`, http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, capturedStream)
	}))
	t.Cleanup(srv.Close)
	c := NewOpenAI(srv.URL, OpenAIOptions{HTTPClient: srv.Client(), Backoff: time.Millisecond})
	res, err := c.Generate(context.Background(), Request{RID: testRID, InputIDs: []int32{1}, Sampling: SamplingParams{MaxNewTokens: 9}})
	if err != nil || !reflect.DeepEqual(res, capturedResult) || calls.Load() != 3 {
		t.Fatalf("Generate = %+v, %v after %d calls", res, err, calls.Load())
	}
	c = NewOpenAI(srv.URL, OpenAIOptions{HTTPClient: srv.Client(), Retries: -1})
	calls.Store(0)
	_, err = c.Generate(context.Background(), Request{RID: testRID, InputIDs: []int32{1}, Sampling: SamplingParams{MaxNewTokens: 9}})
	if var503 := (*HTTPError)(nil); !errors.As(err, &var503) || var503.Status != 503 || !Temporary(err) {
		t.Fatalf("err = %v, want a temporary 503", err)
	}
}

// TestCompletionAbortKeepsStreamedTokens aborts a call whose server has
// streamed two tokens and then hangs: the call returns them as an abort,
// and the server sees its client go away.
func TestCompletionAbortKeepsStreamedTokens(t *testing.T) {
	gone := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"choices":[{"index":0,"text":"ab","logprobs":{"tokens":["token_id:97","token_id:98"],"token_logprobs":[-1,-2]},"finish_reason":null}]}`+"\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(gone)
	}))
	t.Cleanup(srv.Close)
	c := NewOpenAI(srv.URL, OpenAIOptions{HTTPClient: srv.Client()})
	type out struct {
		res Result
		err error
	}
	ch := make(chan out, 1)
	go func() {
		res, err := c.Generate(context.Background(), Request{RID: testRID, InputIDs: []int32{1}, Sampling: SamplingParams{MaxNewTokens: 9}})
		ch <- out{res, err}
	}()
	testkit.Eventually(t, 10*time.Second, "the streamed tokens arrived", func() bool {
		n, _ := c.Received(testRID)
		return n >= 2
	})
	if err := c.AbortPrefix(context.Background(), "ffffffff"); err != nil { // another prefix: no effect
		t.Fatal(err)
	}
	if err := c.Abort(context.Background(), testRID); err != nil {
		t.Fatal(err)
	}
	o := <-ch
	want := Result{OutputIDs: []int32{97, 98}, Logprobs: []float32{-1, -2}, CompletionTokens: 2,
		Finish: Finish{Type: FinishAbort, Matched: -1, Message: errAbort.Error()}}
	if o.err != nil || !reflect.DeepEqual(o.res, want) {
		t.Fatalf("Generate = %+v, %v", o.res, o.err)
	}
	<-gone
	if _, ok := c.Received(testRID); ok {
		t.Fatal("the call is still tracked after it returned")
	}
	for _, bad := range []string{"", "0123"} {
		if err := c.Abort(context.Background(), bad); !errors.Is(err, ErrInvalidRequest) {
			t.Fatalf("Abort(%q) = %v", bad, err)
		}
		if err := c.AbortPrefix(context.Background(), bad); !errors.Is(err, ErrInvalidRequest) {
			t.Fatalf("AbortPrefix(%q) = %v", bad, err)
		}
	}
}

func TestParseTokenID(t *testing.T) {
	for s, want := range map[string]int32{"token_id:0": 0, "token_id:151645": 151645, "token_id:2147483647": 2147483647} {
		if got, err := parseTokenID(s); err != nil || got != want {
			t.Errorf("parseTokenID(%q) = %d, %v", s, got, err)
		}
	}
	for _, s := range []string{"", "token_id:", "token_id:-1", "token_id:+1", "token_id:01", "token_id:2147483648",
		"token_id:1 ", "Token_id:1", "ls", "token_id:1e3"} {
		if _, err := parseTokenID(s); err == nil {
			t.Errorf("parseTokenID(%q) succeeded", s)
		}
	}
}

func TestReadSSE(t *testing.T) {
	var got []string
	err := readSSE(strings.NewReader("event: x\ndata: a\ndata:b\n\n: comment\n\nid: 3\n\ndata: c\r\n\r\ndata: [DONE]\n\ndata: after\n\n"),
		func(d []byte) error { got = append(got, string(d)); return nil })
	if err != nil || !reflect.DeepEqual(got, []string{"a\nb", "c"}) {
		t.Fatalf("readSSE = %q, %v", got, err)
	}
	if err := readSSE(strings.NewReader("data: a\n\n"), func([]byte) error { return nil }); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("no [DONE]: %v", err)
	}
	stop := errors.New("stop")
	if err := readSSE(strings.NewReader("data: a\n\ndata: [DONE]\n\n"), func([]byte) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("fn's error: %v", err)
	}
}
