package proxy

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/pkg/llm"
	"github.com/actloop/actloop/pkg/schema"
)

func strp(s string) *string { return &s }

func TestThink(t *testing.T) {
	cases := []struct {
		name               string
		thinking           bool
		text               string
		reasoning, content *string
	}{
		{"block", true, "<think>\nplan\n</think>\n\nanswer", strp("\nplan\n"), strp("\n\nanswer")},
		{"opened in the prompt", true, "plan</think>answer", strp("plan"), strp("answer")},
		{"ends after thinking", true, "<think>plan</think>", strp("plan"), nil},
		{"cut short while thinking", true, "<think>plan and pl", strp("plan and pl"), nil},
		{"no think block, thinking", true, "answer", strp("answer"), nil},
		{"no think block, not thinking", false, "answer", nil, strp("answer")},
		{"empty block, not thinking", false, "<think>\n\n</think>\n\nanswer", strp("\n\n"), strp("\n\nanswer")},
		{"first </think> ends it", true, "a</think>b</think>c", strp("a"), strp("b</think>c")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, ct := Think{Thinking: c.thinking}.SplitReasoning(c.text)
			if !reflect.DeepEqual(r, c.reasoning) || !reflect.DeepEqual(ct, c.content) {
				t.Fatalf("got (%v, %v), want (%v, %v)", deref(r), deref(ct), deref(c.reasoning), deref(c.content))
			}
		})
	}
}

func deref(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}

func TestHermes(t *testing.T) {
	cases := []struct {
		name    string
		text    string
		content *string
		calls   []schema.FunctionCall
		ok      bool
	}{
		{"no call", "just text", strp("just text"), nil, false},
		{"one call", "<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}\n</tool_call>", nil,
			[]schema.FunctionCall{{Name: "bash", Arguments: `{"command": "ls"}`}}, true},
		{"text before, compact JSON re-serialized as Python writes it", "Let me look.\n<tool_call>{\"name\":\"f\",\"arguments\":{\"a\":[1,2.50,1e3,true,null],\"é\":\"ü\\n\"}}</tool_call>",
			strp("Let me look.\n"), []schema.FunctionCall{{Name: "f", Arguments: `{"a": [1, 2.5, 1000.0, true, null], "é": "ü\n"}`}}, true},
		{"two calls and an unclosed third", "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n<tool_call>{\"name\": \"b\", \"arguments\": \"x\"}</tool_call><tool_call>{\"name\": \"c\", \"arguments\": null}",
			nil, []schema.FunctionCall{{Name: "a", Arguments: `{}`}, {Name: "b", Arguments: `"x"`}, {Name: "c", Arguments: `null`}}, true},
		{"malformed JSON is all content", "<tool_call>{\"name\": \"a\", </tool_call>", strp("<tool_call>{\"name\": \"a\", </tool_call>"), nil, false},
		{"no arguments is all content", "x<tool_call>{\"name\": \"a\"}</tool_call>", strp("x<tool_call>{\"name\": \"a\"}</tool_call>"), nil, false},
		{"name not a string is all content", "<tool_call>{\"name\": 1, \"arguments\": {}}</tool_call>", strp("<tool_call>{\"name\": 1, \"arguments\": {}}</tool_call>"), nil, false},
		{"null name is all content", "<tool_call>{\"name\": null, \"arguments\": {}}</tool_call>", strp("<tool_call>{\"name\": null, \"arguments\": {}}</tool_call>"), nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			content, calls, ok := Hermes{}.ParseToolCalls(c.text)
			if ok != c.ok || !reflect.DeepEqual(content, c.content) || !reflect.DeepEqual(calls, c.calls) {
				t.Fatalf("got (%v, %+v, %v), want (%v, %+v, %v)", deref(content), calls, ok, deref(c.content), c.calls, c.ok)
			}
		})
	}
}

func TestParsersFor(t *testing.T) {
	if p := ParsersFor(testkit.ChatTemplate(t, tokenize.TemplateQwen3)); p.Reasoning != (Think{Thinking: true}) || p.Tools != (Hermes{}) {
		t.Fatalf("qwen3: %+v", p)
	}
	if p := ParsersFor(testkit.ChatTemplate(t, tokenize.TemplateQwen3NoThink)); p.Reasoning != (Think{}) || p.Tools != (Hermes{}) {
		t.Fatalf("qwen3-nothink: %+v", p)
	}
	if p := ParsersFor(testkit.ChatTemplate(t, tokenize.TemplateChatML)); p.Reasoning != nil || p.Tools != nil {
		t.Fatalf("chatml: %+v", p)
	}
	req := &ChatRequest{}
	if p := ParsersFor(testkit.ChatTemplate(t, tokenize.TemplateQwen3)).ForRequest(req); p.Tools != nil {
		t.Fatal("tools parsed for a request without tools")
	}
}

func TestParseChatReply(t *testing.T) {
	q3 := testkit.ChatTemplate(t, tokenize.TemplateQwen3)
	tok := q3.Tokenizer()
	imEnd := q3.StopTokenIDs()[0]
	call := "<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}\n</tool_call>"
	cases := []struct {
		name      string
		res       llm.Result
		p         Parsers
		text      string
		reasoning *string
		content   *string
		calls     int
		finish    string
	}{
		{"stop token dropped", generate(q3, "<think>\nx\n</think>\n\nhello"), ParsersFor(q3),
			"<think>\nx\n</think>\n\nhello", strp("\nx\n"), strp("\n\nhello"), 0, "stop"},
		{"tool calls", generate(q3, "<think>\nx\n</think>\n\n"+call), ParsersFor(q3),
			"<think>\nx\n</think>\n\n" + call, strp("\nx\n"), strp("\n\n"), 1, "tool_calls"},
		{"tool calls not parsed without tools", generate(q3, "<think>x</think>"+call), Parsers{Reasoning: Think{Thinking: true}},
			"<think>x</think>" + call, strp("x"), strp(call), 0, "stop"},
		{"length", llm.Result{OutputIDs: tok.Encode("<think>long"), Finish: llm.Finish{Type: llm.FinishLength, Length: 3}}, ParsersFor(q3),
			"<think>long", strp("long"), nil, 0, "length"},
		{"stop string cut", llm.Result{OutputIDs: tok.Encode("abc STOP x"), Finish: llm.Finish{Type: llm.FinishStop, Matched: -1, MatchedText: "STOP"}}, Parsers{},
			"abc ", nil, strp("abc "), 0, "stop"},
		{"empty reply", llm.Result{OutputIDs: []int32{imEnd}, Finish: llm.Finish{Type: llm.FinishStop, Matched: imEnd}}, Parsers{},
			"", nil, nil, 0, "stop"},
		{"server's other stop token", llm.Result{OutputIDs: append(tok.Encode("hi"), 151643), Finish: llm.Finish{Type: llm.FinishStop, Matched: 151643}}, Parsers{},
			"hi", nil, strp("hi"), 0, "stop"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := ParseChatReply(q3, c.res, c.p)
			if err != nil {
				t.Fatal(err)
			}
			if r.Text != c.text || !reflect.DeepEqual(r.Reasoning, c.reasoning) || !reflect.DeepEqual(r.Content, c.content) ||
				len(r.Calls) != c.calls || r.FinishReason() != c.finish {
				t.Fatalf("got text %q reasoning %v content %v calls %d finish %s", r.Text, deref(r.Reasoning), deref(r.Content), len(r.Calls), r.FinishReason())
			}
		})
	}
	if _, err := ParseChatReply(q3, llm.Result{Finish: llm.Finish{Type: llm.FinishAbort}}, Parsers{}); !errors.Is(err, ErrAborted) {
		t.Fatalf("abort: %v", err)
	}
}

// byteQwen3 is Qwen3's template over the byte tokenizer: every byte one
// token, so golden files show each token.
func byteQwen3(t testing.TB) tokenize.ChatTemplate {
	t.Helper()
	tmpl, err := tokenize.NewQwen3(tokenize.Bytes{}, true)
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

func TestChatCompletionGolden(t *testing.T) {
	tmpl := byteQwen3(t)
	meta := Meta{ID: "0123abcd", Created: 1765094400, Model: "Qwen/Qwen3-8B"}
	text := "<think>\nList first.\n</think>\n\nLet me look.\n<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls -la\"}}\n</tool_call>"
	r, err := ParseChatReply(tmpl, generate(tmpl, text), ParsersFor(tmpl))
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "chat_tool_calls.json", indentJSON(t, r.Chat(meta, 120, false)))

	r, err = ParseChatReply(tmpl, generate(tmpl, "<think>ok</think>Hé"), ParsersFor(tmpl))
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "chat_logprobs.json", indentJSON(t, r.Chat(meta, 7, true)))

	res := llm.Result{OutputIDs: tokenize.Bytes{}.Encode("Once upon"), Logprobs: []float32{-1, -0.5, 0, 0, 0, 0, 0, 0, -2},
		Finish: llm.Finish{Type: llm.FinishLength, Length: 9}}
	tr, err := ParseTextReply(tmpl, res)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "completion_length.json", indentJSON(t, tr.Completion(meta, 3, false)))
	golden(t, "completion_logprobs.json", indentJSON(t, tr.Completion(meta, 3, true)))
}

func TestStreamGolden(t *testing.T) {
	tmpl := byteQwen3(t)
	meta := Meta{ID: "0123abcd", Created: 1765094400, Model: "m"}
	text := "<think>\nTwo.\n</think>\n\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>"
	r, err := ParseChatReply(tmpl, generate(tmpl, text), ParsersFor(tmpl))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteChatStream(&b, r.Chat(meta, 50, false), true); err != nil {
		t.Fatal(err)
	}
	golden(t, "chat_stream_usage.sse", b.Bytes())

	r, err = ParseChatReply(tmpl, generate(tmpl, "hi"), Parsers{})
	if err != nil {
		t.Fatal(err)
	}
	b.Reset()
	if err := WriteChatStream(&b, r.Chat(meta, 5, true), false); err != nil {
		t.Fatal(err)
	}
	golden(t, "chat_stream_logprobs.sse", b.Bytes())

	tr, err := ParseTextReply(tmpl, generate(tmpl, "Once"))
	if err != nil {
		t.Fatal(err)
	}
	b.Reset()
	if err := WriteCompletionStream(&b, tr.Completion(meta, 2, false), true); err != nil {
		t.Fatal(err)
	}
	golden(t, "completion_stream_usage.sse", b.Bytes())
	if err := WriteChatStream(&b, ChatCompletion{}, false); err == nil {
		t.Fatal("a response without choices streamed")
	}
}
