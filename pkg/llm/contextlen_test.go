package llm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

// A vLLM /v1/models answer (ModelList of vllm/entrypoints/openai/models/
// serving.py): the served model with its max_model_len, then a LoRA
// adapter, whose card has none.
const vllmModels = `{"object":"list","data":[{"id":"Qwen/Qwen3-8B","object":"model","created":1735000000,"owned_by":"vllm",
"root":"/models/Qwen3-8B","parent":null,"max_model_len":40960,"permission":[{"id":"modelperm-1","object":"model_permission",
"created":1735000000,"allow_create_engine":false,"allow_sampling":true,"allow_logprobs":true,"allow_search_indices":false,
"allow_view":true,"allow_fine_tuning":false,"organization":"*","group":null,"is_blocking":false}]},
{"id":"sql-lora","object":"model","created":1735000000,"owned_by":"vllm","root":"/loras/sql","parent":"Qwen/Qwen3-8B",
"max_model_len":null,"permission":[]}]}`

// An SGLang /v1/models answer (http_server.py, available_models).
const sglangModels = `{"object":"list","data":[{"id":"Qwen/Qwen3-8B","object":"model","created":1735000000,"owned_by":"sglang",
"root":"Qwen/Qwen3-8B","max_model_len":131072}]}`

// The start of an SGLang /get_server_info answer: its server arguments
// (context_length null unless --context-length was given), the
// scheduler's info, internal_states and version.
const sglangServerInfo = `{"model_path":"Qwen/Qwen3-8B","tokenizer_path":"Qwen/Qwen3-8B","context_length":%s,
"max_running_requests":null,"chunked_prefill_size":8192,"max_total_num_tokens":412000,"max_req_input_len":131066,
"internal_states":[{"pp_max_micro_batch_size":null}],"version":"0.5.6.post2"}`

func TestDecodeModelsContextLength(t *testing.T) {
	tests := []struct {
		name, body, model string
		want              int
		wantErr           error
	}{
		{"vllm: the served model's", vllmModels, "", 40960, nil},
		{"vllm: the named model's", vllmModels, "Qwen/Qwen3-8B", 40960, nil},
		{"vllm: an adapter has none", vllmModels, "sql-lora", 0, nil},
		{"vllm: a model not served", vllmModels, "other", 0, nil},
		{"sglang", sglangModels, "", 131072, nil},
		{"the first that has one", `{"data":[{"id":"a"},{"id":"b","max_model_len":8192}]}`, "", 8192, nil},
		{"written as a float", `{"data":[{"id":"a","max_model_len":32768.0}]}`, "", 32768, nil},
		{"no models", `{"object":"list","data":[]}`, "", 0, nil},
		{"no data", `{}`, "", 0, nil},
		{"zero", `{"data":[{"id":"a","max_model_len":0}]}`, "", 0, ErrBadResponse},
		{"negative", `{"data":[{"id":"a","max_model_len":-5}]}`, "", 0, ErrBadResponse},
		{"fractional", `{"data":[{"id":"a","max_model_len":1.5}]}`, "", 0, ErrBadResponse},
		{"a string", `{"data":[{"id":"a","max_model_len":"4096"}]}`, "", 0, ErrBadResponse},
		{"huge", `{"data":[{"id":"a","max_model_len":1e300}]}`, "", 0, ErrBadResponse},
		{"not a list", `{"data":{"id":"a"}}`, "", 0, ErrBadResponse},
		{"not JSON", `<html>`, "", 0, ErrBadResponse},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeModelsContextLength([]byte(tt.body), tt.model)
			if got != tt.want || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("= %d, %v; want %d, %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestDecodeServerInfoContextLength(t *testing.T) {
	tests := []struct {
		name, body string
		want       int
		wantErr    error
	}{
		{"--context-length given", fmt.Sprintf(sglangServerInfo, "32768"), 32768, nil},
		{"not given", fmt.Sprintf(sglangServerInfo, "null"), 0, nil},
		{"absent", `{"model_path":"m"}`, 0, nil},
		{"negative", fmt.Sprintf(sglangServerInfo, "-1"), 0, ErrBadResponse},
		{"a string", fmt.Sprintf(sglangServerInfo, `"32k"`), 0, ErrBadResponse},
		{"not an object", `[1]`, 0, ErrBadResponse},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeServerInfoContextLength([]byte(tt.body))
			if got != tt.want || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("= %d, %v; want %d, %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// ContextLength asks SGLang's /v1/models and, when it names none,
// /get_server_info; vLLM's /v1/models for the client's model. A server
// without the endpoints does not say (0); one that fails says so.
func TestContextLength(t *testing.T) {
	serve := func(models, info string, status int) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body := map[string]string{"/v1/models": models, "/get_server_info": info}[r.URL.Path]
			switch {
			case status != 0:
				w.WriteHeader(status)
			case body == "":
				http.NotFound(w, r)
			default:
				_, _ = w.Write([]byte(body))
			}
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	tests := []struct {
		name    string
		reader  func(url string) ContextLengthReader
		srv     *httptest.Server
		want    int
		wantErr error
	}{
		{"sglang /v1/models", sglangReader, serve(sglangModels, fmt.Sprintf(sglangServerInfo, "4096"), 0), 131072, nil},
		{"sglang /get_server_info", sglangReader, serve(`{"data":[]}`, fmt.Sprintf(sglangServerInfo, "4096"), 0), 4096, nil},
		{"sglang without /v1/models", sglangReader, serve("", fmt.Sprintf(sglangServerInfo, "4096"), 0), 4096, nil},
		{"sglang says none", sglangReader, serve("", fmt.Sprintf(sglangServerInfo, "null"), 0), 0, nil},
		{"sglang serves neither", sglangReader, serve("", "", 0), 0, nil},
		{"sglang failing", sglangReader, serve("", "", http.StatusServiceUnavailable), 0, errHTTP},
		{"vllm", openAIReader(""), serve(vllmModels, "", 0), 40960, nil},
		{"vllm, the client's model", openAIReader("sql-lora"), serve(vllmModels, "", 0), 0, nil},
		{"vllm bad list", openAIReader(""), serve(`{"data":[{"max_model_len":-1}]}`, "", 0), 0, ErrBadResponse},
		{"vllm without /v1/models", openAIReader(""), serve("", "", 0), 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.reader(tt.srv.URL).ContextLength(context.Background())
			var he *HTTPError
			if tt.wantErr == errHTTP {
				if !errors.As(err, &he) || !Temporary(err) {
					t.Fatalf("= %d, %v; want a temporary *HTTPError", got, err)
				}
				return
			}
			if got != tt.want || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("= %d, %v; want %d, %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// errHTTP stands for any *HTTPError in TestContextLength.
var errHTTP = errors.New("an HTTP error")

func sglangReader(url string) ContextLengthReader { return NewSGLang(url, SGLangOptions{}) }

func openAIReader(model string) func(string) ContextLengthReader {
	return func(url string) ContextLengthReader { return NewOpenAI(url, OpenAIOptions{Model: model}) }
}

// ErrContextLength matches a 400 that says, in SGLang's or vLLM's words,
// that the request does not fit the context, and nothing else.
func TestErrContextLength(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		want   bool
	}{
		{"sglang: input and max_new_tokens", 400, `{"error":{"message":"Requested token count exceeds the model's maximum context length of 131072 tokens. You requested a total of 1050914 tokens: 10914 tokens from the input messages and 1040000 tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit."}}`, true},
		{"sglang: input alone", 400, `{"error":{"message":"The input (140000 tokens) is longer than the model's context length (131072 tokens)."}}`, true},
		{"vllm: max_tokens", 400, `{"error":{"message":"'max_tokens' or 'max_completion_tokens' is too large: 1040000. This model's maximum context length is 40960 tokens and your request has 10914 input tokens (1040000 > 40960 - 10914).","type":"BadRequestError","param":"max_tokens","code":400}}`, true},
		{"vllm: older wording", 400, `{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 4172 tokens (2124 in the messages, 2048 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}`, true},
		{"vllm: prompt alone", 400, `{"error":{"message":"The decoder prompt (length 41000) is longer than the maximum model length of 40960. Make sure that max_model_len is no smaller than the number of text tokens."}}`, true},
		{"another 400", 400, `{"error":{"message":"Duplicate request ID detected: 0123"}}`, false},
		{"not a 400", 500, `{"error":{"message":"This model's maximum context length is 4096 tokens."}}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := fmt.Errorf("generate x: %w", &HTTPError{Status: tt.status, Body: tt.body})
			if got := errors.Is(err, ErrContextLength); got != tt.want {
				t.Fatalf("errors.Is(%v, ErrContextLength) = %v, want %v", err, got, tt.want)
			}
			if Temporary(err) && tt.want {
				t.Fatal("a context-length refusal is temporary")
			}
		})
	}
	if errors.Is(&HTTPError{Status: 400, Body: "maximum context length"}, ErrBadResponse) {
		t.Fatal("an HTTPError matches another sentinel")
	}
}

func FuzzDecodeModelsContextLength(f *testing.F) {
	f.Add([]byte(vllmModels), "")
	f.Add([]byte(vllmModels), "sql-lora")
	f.Add([]byte(sglangModels), "Qwen/Qwen3-8B")
	f.Add([]byte(`{"data":[{"id":"a","max_model_len":32768.0},{"max_model_len":-1}]}`), "")
	f.Add([]byte(`{"data":[{"max_model_len":1e400}]}`), "")
	f.Add([]byte(`null`), "")
	f.Fuzz(func(t *testing.T, b []byte, model string) {
		n, err := decodeModelsContextLength(b, model)
		if err != nil && !errors.Is(err, ErrBadResponse) {
			t.Fatalf("error %v is not ErrBadResponse", err)
		}
		if n < 0 || n > maxContextLength || (err != nil && n != 0) {
			t.Fatalf("= %d, %v", n, err)
		}
	})
}

func FuzzDecodeServerInfoContextLength(f *testing.F) {
	f.Add([]byte(fmt.Sprintf(sglangServerInfo, "32768")))
	f.Add([]byte(fmt.Sprintf(sglangServerInfo, "null")))
	f.Add([]byte(`{"context_length":"x"}`))
	f.Add([]byte(`{"context_length":4096.5}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := decodeServerInfoContextLength(b)
		if err != nil && !errors.Is(err, ErrBadResponse) {
			t.Fatalf("error %v is not ErrBadResponse", err)
		}
		if n < 0 || n > maxContextLength || (err != nil && n != 0) {
			t.Fatalf("= %d, %v", n, err)
		}
	})
}
