package proxy

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/actloop/actloop/internal/chattemplate"
	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/pkg/llm"
	"github.com/actloop/actloop/pkg/schema"
)

var chatSeeds = []string{
	`{"messages": [{"role": "user", "content": "hi"}]}`,
	`{"model": "m", "messages": [{"role": "developer", "content": [{"type": "text", "text": "a"}]}, {"role": "user", "content": null}]}`,
	`{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", ` +
		`"function": {"name": "bash", "arguments": "{\"command\": \"ls\"}"}}]}, {"role": "tool", "tool_call_id": "c1", "content": "out"}], ` +
		`"tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}], "tool_choice": "auto"}`,
	`{"messages": [{"role": "user", "content": "q"}], "temperature": 0.7, "top_p": 0.9, "top_k": -1, "min_p": 0.05, "max_tokens": 10, ` +
		`"max_completion_tokens": 20, "stop": ["###"], "seed": 7, "n": 1, "stream": true, "stream_options": {"include_usage": true}, ` +
		`"logprobs": true, "top_logprobs": 0, "response_format": {"type": "text"}}`,
	`{"messages": [{"role": "user", "content": "q"}], "tool_choice": {"type": "function", "function": {"name": "f"}}}`,
	`{"messages": [{"role": 1}]}`, `[]`, `{`, `null`, `{"messages": {}}`,
}

// FuzzDecodeChatRequest: any body decodes or is a *RequestError, and what
// decodes opens a conversation (or is refused by the template by name).
func FuzzDecodeChatRequest(f *testing.F) {
	for _, s := range chatSeeds {
		f.Add([]byte(s))
	}
	tmpl, err := tokenize.NewQwen3(tokenize.Bytes{}, true)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := DecodeChatRequest(body)
		if err != nil {
			var re *RequestError
			if !errors.As(err, &re) || !errors.Is(err, ErrInvalidRequest) || re.Message == "" {
				t.Fatalf("error %v is not a *RequestError", err)
			}
			return
		}
		n := len(r.Messages)
		if n == 0 || n > MaxMessages || r.Messages[n-1].Role == schema.RoleAssistant || len(r.Tools) > MaxTools {
			t.Fatalf("decoded %d messages, %d tools", n, len(r.Tools))
		}
		for _, m := range r.Messages {
			switch m.Role {
			case schema.RoleSystem, schema.RoleUser, schema.RoleAssistant, schema.RoleTool:
			default:
				t.Fatalf("role %q", m.Role)
			}
		}
		if r.ToolChoice != "" && r.ToolChoice != "auto" && r.ToolChoice != "none" {
			t.Fatalf("tool_choice %q", r.ToolChoice)
		}
		if _, err := r.Sampling(llm.SamplingParams{}, 100); err != nil {
			t.Fatalf("sampling of a decoded request: %v", err)
		}
		var conv Conversation
		step, err := conv.Next(r.Call(), tmpl)
		if err == nil && (!step.NewSegment || len(step.Prompt) == 0) {
			t.Fatalf("first step %+v", step)
		}
	})
}

// FuzzDecodeCompletionRequest: any body decodes to one prompt or is a
// *RequestError.
func FuzzDecodeCompletionRequest(f *testing.F) {
	for _, s := range []string{`{"prompt": "Once", "max_tokens": 5, "logprobs": 0, "stream": true, "stream_options": {"include_usage": true}}`,
		`{"prompt": [1, 2, 151645]}`, `{"prompt": [[1]]}`, `{"prompt": ["a"]}`, `{"prompt": [1e3]}`, `{"prompt": [ 1 , 2 ]}`, `{"prompt": 5}`, `{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := DecodeCompletionRequest(body)
		if err != nil {
			var re *RequestError
			if !errors.As(err, &re) {
				t.Fatalf("error %v is not a *RequestError", err)
			}
			return
		}
		if (r.Prompt == "") == (r.PromptIDs == nil) || (r.PromptIDs != nil && len(r.PromptIDs) == 0) {
			t.Fatalf("prompt %q ids %v", r.Prompt, r.PromptIDs)
		}
		for _, id := range r.PromptIDs {
			if id < 0 {
				t.Fatalf("id %d", id)
			}
		}
		if r.Logprobs != nil && *r.Logprobs != 0 {
			t.Fatalf("logprobs %d", *r.Logprobs)
		}
	})
}

// FuzzHermes: the parser finds calls whose arguments are JSON equal to
// what the model wrote, and content that is the text before the first
// call; or no calls, and the text as content.
func FuzzHermes(f *testing.F) {
	for _, s := range []string{"just text", "<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}\n</tool_call>",
		"pre<tool_call>{\"name\":\"f\",\"arguments\":{\"a\":[1,2.50,1e3,-0,1E400,true,null],\"é\":\"ü\\n\\u0001\"}}</tool_call><tool_call>{\"name\": \"g\", \"arguments\": 1}",
		"<tool_call>{\"name\": \"a\", </tool_call>", "<tool_call></tool_call>", "<tool_call>{\"name\": \"a\", \"arguments\": {\"k\": 1, \"k\": 2}}</tool_call>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		content, calls, ok := Hermes{}.ParseToolCalls(text)
		if !ok {
			if content == nil || *content != text || calls != nil {
				t.Fatalf("no calls, but content %v calls %v", deref(content), calls)
			}
			return
		}
		before, _, _ := strings.Cut(text, "<tool_call>")
		if len(calls) == 0 || !reflect.DeepEqual(content, nonEmpty(before)) {
			t.Fatalf("content %v, want %q; %d calls", deref(content), before, len(calls))
		}
		for _, c := range calls {
			// A number past float64 is Python's inf, which json.dumps writes
			// as Infinity, not JSON; vLLM answers so, and so does Hermes.
			if strings.Contains(c.Arguments, "Infinity") {
				continue
			}
			if !json.Valid([]byte(c.Arguments)) {
				t.Fatalf("arguments %q are not JSON", c.Arguments)
			}
			again, err := chattemplate.PyDumps([]byte(c.Arguments))
			if err != nil || again != c.Arguments {
				t.Fatalf("arguments %q do not round-trip: %q, %v", c.Arguments, again, err)
			}
		}
	})
}

// FuzzThink: reasoning and content, rejoined, are the text without its
// think tags.
func FuzzThink(f *testing.F) {
	for _, s := range []string{"<think>\nplan\n</think>\n\nanswer", "plan</think>x", "<think>a", "x", "", "</think></think>"} {
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, text string, thinking bool) {
		r, c := Think{Thinking: thinking}.SplitReasoning(text)
		if r == nil && c == nil && text != "" && !strings.Contains(text, "think>") {
			t.Fatalf("%q lost", text)
		}
		got := ""
		if r != nil {
			got += *r
		}
		if c != nil {
			got += *c
		}
		want := text
		if _, after, ok := strings.Cut(want, "<think>"); ok {
			want = after
		}
		want = strings.Replace(want, "</think>", "", 1)
		if got != want {
			t.Fatalf("rejoined %q, want %q", got, want)
		}
	})
}
