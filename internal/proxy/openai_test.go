package proxy

import (
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/actloop/actloop/pkg/llm"
	"github.com/actloop/actloop/pkg/schema"
)

func TestDecodeChatRequest(t *testing.T) {
	tools := `[{"type": "function", "function": {"name": "bash", "description": "Run.", "parameters": {"type": "object"}}}]`
	cases := []struct {
		name string
		body string
		want func(r *ChatRequest) bool
	}{
		{"minimal", `{"messages": [{"role": "user", "content": "hi"}]}`, func(r *ChatRequest) bool {
			return reflect.DeepEqual(r.Messages, []schema.PromptMessage{{Role: "user", Content: "hi"}}) && !r.Stream && r.ToolChoice == ""
		}},
		{"content parts joined with newlines, developer as system, null content", `{"model": "m", "messages": [
			{"role": "developer", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
			{"role": "user", "content": null, "name": "bob"}]}`, func(r *ChatRequest) bool {
			return r.Model == "m" && reflect.DeepEqual(r.Messages, []schema.PromptMessage{{Role: "system", Content: "a\nb"}, {Role: "user", Name: "bob"}})
		}},
		{"tool loop", `{"messages": [{"role": "user", "content": "q"},
			{"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"ls\"}"}}]},
			{"role": "tool", "tool_call_id": "c1", "content": "out"}], "tools": ` + tools + `, "tool_choice": "auto"}`, func(r *ChatRequest) bool {
			return len(r.Tools) == 1 && r.ToolChoice == "auto" && r.ParseTools() &&
				reflect.DeepEqual(r.Messages[1].ToolCalls, []schema.ToolCall{{ID: "c1", Type: "function", Function: schema.FunctionCall{Name: "bash", Arguments: `{"command": "ls"}`}}}) &&
				r.Messages[2].ToolCallID == "c1"
		}},
		{"tool_choice none reads no calls", `{"messages": [{"role": "user", "content": "q"}], "tools": ` + tools + `, "tool_choice": "none"}`,
			func(r *ChatRequest) bool { return !r.ParseTools() }},
		{"sampling", `{"messages": [{"role": "user", "content": "q"}], "temperature": 0.7, "top_p": 0.9, "top_k": -1, "min_p": 0.05,
			"max_tokens": 10, "max_completion_tokens": 20, "stop": "###", "seed": 7, "n": 1, "presence_penalty": 0, "frequency_penalty": 0.0,
			"stream": true, "stream_options": {"include_usage": true}, "logprobs": true, "top_logprobs": 0, "response_format": {"type": "text"},
			"chat_template_kwargs": {"enable_thinking": false}, "unknown": [1, 2]}`, func(r *ChatRequest) bool {
			return *r.Temperature == 0.7 && *r.TopP == 0.9 && *r.TopK == -1 && *r.MinP == 0.05 && *r.MaxTokens == 20 &&
				reflect.DeepEqual(r.Stop, []string{"###"}) && *r.Seed == 7 && r.Stream && r.IncludeUsage && r.Logprobs
		}},
		{"stop list", `{"messages": [{"role": "user", "content": "q"}], "stop": ["a", "b"]}`, func(r *ChatRequest) bool {
			return reflect.DeepEqual(r.Stop, []string{"a", "b"})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := DecodeChatRequest([]byte(c.body))
			if err != nil {
				t.Fatal(err)
			}
			if !c.want(r) {
				t.Fatalf("decoded %+v", r)
			}
		})
	}
}

func TestDecodeChatRequestErrors(t *testing.T) {
	msgs := `"messages": [{"role": "user", "content": "q"}]`
	cases := []struct {
		name, body, param, code, says string
	}{
		{"not an object", `[1]`, "", CodeInvalid, "JSON object"},
		{"bad JSON", `{"messages": [}`, "", CodeInvalid, "not valid JSON"},
		{"no messages", `{}`, "messages", CodeInvalid, "missing"},
		{"empty messages", `{"messages": []}`, "messages", CodeInvalid, "at least one"},
		{"unknown role", `{"messages": [{"role": "function", "content": "x"}]}`, "messages[0].role", CodeInvalid, "unknown role"},
		{"role type", `{"messages": [{"role": 3}]}`, "messages[0].role", CodeInvalid, "must be a string"},
		{"image part", `{"messages": [{"role": "user", "content": "q"}, {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x"}}]}]}`,
			"messages[1].content[1].type", CodeUnsupported, "only text parts"},
		{"part without text", `{"messages": [{"role": "user", "content": [{"type": "text"}]}]}`, "messages[0].content[0].text", CodeInvalid, "missing"},
		{"content number", `{"messages": [{"role": "user", "content": 5}]}`, "messages[0].content", CodeInvalid, "must be a string"},
		{"last assistant", `{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}`, "messages[1].role", CodeUnsupported, "continuing it"},
		{"user tool calls", `{"messages": [{"role": "user", "content": "q", "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}]}`,
			"messages[0].tool_calls", CodeInvalid, "only an assistant"},
		{"tool call without name", `{"messages": [{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}, {"role": "tool", "content": "x"}]}`,
			"messages[0].tool_calls[0].function.name", CodeInvalid, "missing"},
		{"tool call arguments not a string", `{"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {}}}]}, {"role": "tool", "content": "x"}]}`,
			"messages[0].tool_calls[0].function.arguments", CodeInvalid, "must be a string"},
		{"too many messages", `{"messages": [` + strings.Repeat(`{"role": "user", "content": ""},`, MaxMessages) + `{"role": "user", "content": ""}]}`,
			"messages", CodeInvalid, "limit of 4096 (MaxMessages)"},
		{"too many tools", `{` + msgs + `, "tools": [` + strings.Repeat(`{"type": "function", "function": {"name": "f"}},`, MaxTools) + `{"type": "function", "function": {"name": "f"}}]}`,
			"tools", CodeInvalid, "limit of 128 (MaxTools)"},
		{"tool without name", `{` + msgs + `, "tools": [{"type": "function", "function": {}}]}`, "tools[0].function.name", CodeInvalid, "missing"},
		{"tool of another type", `{` + msgs + `, "tools": [{"type": "web_search"}]}`, "tools[0].type", CodeUnsupported, "not supported"},
		{"tool_choice required", `{` + msgs + `, "tool_choice": "required"}`, "tool_choice", CodeUnsupported, `"required" is not supported`},
		{"tool_choice named", `{` + msgs + `, "tool_choice": {"type": "function", "function": {"name": "f"}}}`, "tool_choice", CodeUnsupported, "named function"},
		{"tool_choice unknown", `{` + msgs + `, "tool_choice": "any"}`, "tool_choice", CodeInvalid, "unknown value"},
		{"n", `{` + msgs + `, "n": 2}`, "n", CodeUnsupported, "one choice"},
		{"presence penalty", `{` + msgs + `, "presence_penalty": 0.5}`, "presence_penalty", CodeUnsupported, "only 0"},
		{"frequency penalty", `{` + msgs + `, "frequency_penalty": -1}`, "frequency_penalty", CodeUnsupported, "only 0"},
		{"top_logprobs", `{` + msgs + `, "logprobs": true, "top_logprobs": 5}`, "top_logprobs", CodeUnsupported, "not supported"},
		{"response_format json", `{` + msgs + `, "response_format": {"type": "json_object"}}`, "response_format.type", CodeUnsupported, "only \"text\""},
		{"stream_options without stream", `{` + msgs + `, "stream_options": {"include_usage": true}}`, "stream_options", CodeInvalid, "stream=True"},
		{"temperature", `{` + msgs + `, "temperature": -1}`, "temperature", CodeInvalid, "must be in [0, 100]"},
		{"temperature type", `{` + msgs + `, "temperature": "hot"}`, "temperature", CodeInvalid, "must be a number"},
		{"top_p zero", `{` + msgs + `, "top_p": 0}`, "top_p", CodeInvalid, "(0, 1]"},
		{"top_k", `{` + msgs + `, "top_k": -2}`, "top_k", CodeInvalid, "must be -1 or 0"},
		{"max_tokens", `{` + msgs + `, "max_tokens": 0}`, "max_tokens", CodeInvalid, "at least 1"},
		{"max_completion_tokens", `{` + msgs + `, "max_completion_tokens": -5}`, "max_completion_tokens", CodeInvalid, "at least 1"},
		{"stop empty", `{` + msgs + `, "stop": ["a", ""]}`, "stop[1]", CodeInvalid, "must not be empty"},
		{"stop type", `{` + msgs + `, "stop": 5}`, "stop", CodeInvalid, "a string or a list"},
		{"seed overflow", `{` + msgs + `, "seed": 1e30}`, "seed", CodeInvalid, "must be an integer"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeChatRequest([]byte(c.body))
			var re *RequestError
			if !errors.As(err, &re) || !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("error %v is not a *RequestError", err)
			}
			if re.Param != c.param || re.Code != c.code || !strings.Contains(re.Message, c.says) {
				t.Fatalf("error {%q %q %q}, want param %q, code %q, saying %q", re.Param, re.Code, re.Message, c.param, c.code, c.says)
			}
		})
	}
}

func TestDecodeBodyLimit(t *testing.T) {
	body := []byte(`{"messages": [{"role": "user", "content": "` + strings.Repeat("x", MaxBodyBytes) + `"}]}`)
	_, err := DecodeChatRequest(body)
	if err == nil || !strings.Contains(err.Error(), "MaxBodyBytes") {
		t.Fatalf("error %v does not name the limit", err)
	}
}

func TestDecodeCompletionRequest(t *testing.T) {
	cases := []struct {
		name, body string
		want       func(r *CompletionRequest) bool
	}{
		{"text", `{"model": "m", "prompt": "Once", "max_tokens": 5, "logprobs": 0, "stream": true, "stream_options": {"include_usage": true}}`,
			func(r *CompletionRequest) bool {
				return r.Prompt == "Once" && r.PromptIDs == nil && *r.MaxTokens == 5 && *r.Logprobs == 0 && r.Stream && r.IncludeUsage
			}},
		{"ids", `{"prompt": [1, 2, 151645], "echo": false, "best_of": 1, "suffix": ""}`, func(r *CompletionRequest) bool {
			return reflect.DeepEqual(r.PromptIDs, []int32{1, 2, 151645}) && r.Logprobs == nil
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := DecodeCompletionRequest([]byte(c.body))
			if err != nil {
				t.Fatal(err)
			}
			if !c.want(r) {
				t.Fatalf("decoded %+v", r)
			}
		})
	}
	errs := []struct{ name, body, param, code string }{
		{"no prompt", `{}`, "prompt", CodeInvalid},
		{"empty prompt", `{"prompt": ""}`, "prompt", CodeInvalid},
		{"empty ids", `{"prompt": []}`, "prompt", CodeInvalid},
		{"prompts", `{"prompt": ["a", "b"]}`, "prompt", CodeUnsupported},
		{"batched ids", `{"prompt": [[1, 2]]}`, "prompt", CodeUnsupported},
		{"negative id", `{"prompt": [1, -2]}`, "prompt[1]", CodeInvalid},
		{"float id", `{"prompt": [1.5]}`, "prompt[0]", CodeInvalid},
		{"huge id", `{"prompt": [4294967296]}`, "prompt[0]", CodeInvalid},
		{"prompt object", `{"prompt": {}}`, "prompt", CodeInvalid},
		{"logprobs", `{"prompt": "a", "logprobs": 5}`, "logprobs", CodeUnsupported},
		{"echo", `{"prompt": "a", "echo": true}`, "echo", CodeUnsupported},
		{"suffix", `{"prompt": "a", "suffix": "z"}`, "suffix", CodeUnsupported},
		{"best_of", `{"prompt": "a", "best_of": 3}`, "best_of", CodeUnsupported},
		{"n", `{"prompt": "a", "n": 3}`, "n", CodeUnsupported},
		{"max_tokens", `{"prompt": "a", "max_tokens": 0}`, "max_tokens", CodeInvalid},
	}
	for _, c := range errs {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeCompletionRequest([]byte(c.body))
			var re *RequestError
			if !errors.As(err, &re) || re.Param != c.param || re.Code != c.code {
				t.Fatalf("error %#v, want param %q code %q", err, c.param, c.code)
			}
		})
	}
}

func TestSampling(t *testing.T) {
	base := llm.SamplingParams{MaxNewTokens: 512, Temperature: 1, TopP: 0.95, Stop: []string{"END"}, StopTokenIDs: []int32{7}}
	cases := []struct {
		name    string
		body    string
		room    int
		want    llm.SamplingParams
		wantErr error
	}{
		{"absent fields keep the trajectory's", `{"messages": [{"role": "user", "content": "q"}]}`, 4096,
			llm.SamplingParams{MaxNewTokens: 512, Temperature: 1, TopP: 0.95, Stop: []string{"END"}, StopTokenIDs: []int32{7}}, nil},
		{"set fields replace them", `{"messages": [{"role": "user", "content": "q"}], "temperature": 0, "top_p": 0.5, "top_k": 20, "min_p": 0.1, "max_tokens": 100, "stop": ["x"]}`, 4096,
			llm.SamplingParams{MaxNewTokens: 100, Temperature: 0, TopP: 0.5, TopK: 20, MinP: 0.1, Stop: []string{"x"}, StopTokenIDs: []int32{7}}, nil},
		{"top_k -1 is the whole vocabulary", `{"messages": [{"role": "user", "content": "q"}], "top_k": -1}`, 4096,
			llm.SamplingParams{MaxNewTokens: 512, Temperature: 1, TopP: 0.95, Stop: []string{"END"}, StopTokenIDs: []int32{7}}, nil},
		{"capped by room", `{"messages": [{"role": "user", "content": "q"}], "max_completion_tokens": 100000}`, 300,
			llm.SamplingParams{MaxNewTokens: 300, Temperature: 1, TopP: 0.95, Stop: []string{"END"}, StopTokenIDs: []int32{7}}, nil},
		{"no room", `{"messages": [{"role": "user", "content": "q"}]}`, 0, llm.SamplingParams{}, ErrNoRoom},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := DecodeChatRequest([]byte(c.body))
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.Sampling(base, c.room)
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("error %v, want %v", err, c.wantErr)
			}
			if err == nil && !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %+v\nwant %+v", got, c.want)
			}
		})
	}
	// Without a base max, the room is the default.
	r, _ := DecodeCompletionRequest([]byte(`{"prompt": "a"}`))
	if got, _ := r.Sampling(llm.SamplingParams{}, 77); got.MaxNewTokens != 77 {
		t.Fatalf("max new tokens %d, want the room 77", got.MaxNewTokens)
	}
}

func TestErrorFor(t *testing.T) {
	_, err := DecodeChatRequest([]byte(`{"messages": [{"role": "user", "content": "q"}], "tool_choice": "required"}`))
	status, body := ErrorFor(err)
	b, _ := json.Marshal(body)
	want := `{"error":{"message":"tool_choice: \"required\" is not supported: use \"auto\" or \"none\"","type":"invalid_request_error","param":"tool_choice","code":"unsupported_value"}}`
	if status != http.StatusBadRequest || string(b) != want {
		t.Fatalf("%d %s\nwant 400 %s", status, b, want)
	}
	status, body = ErrorFor(errors.New("boom"))
	b, _ = json.Marshal(body)
	if status != http.StatusInternalServerError || string(b) != `{"error":{"message":"boom","type":"server_error","param":null,"code":null}}` {
		t.Fatalf("%d %s", status, b)
	}
	_, err = DecodeChatRequest([]byte(`[]`))
	_, body = ErrorFor(err)
	if body.Error.Param != nil {
		t.Fatalf("param %q for the body as a whole, want null", *body.Error.Param)
	}
}
