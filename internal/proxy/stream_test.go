package proxy

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/actloop/actloop/internal/agent"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/pkg/schema"
)

func sys(s string) schema.PromptMessage {
	return schema.PromptMessage{Role: schema.RoleSystem, Content: s}
}
func user(s string) schema.PromptMessage {
	return schema.PromptMessage{Role: schema.RoleUser, Content: s}
}
func tool(s string) schema.PromptMessage {
	return schema.PromptMessage{Role: schema.RoleTool, Content: s}
}

// turn is one call of a scripted agent: the messages it sends (after
// those it sent before and the replies it was given, unless rewrite
// replaces them) and the model's reply.
type turn struct {
	add     []schema.PromptMessage
	rewrite []schema.PromptMessage // the whole conversation, replacing history
	tools   []json.RawMessage
	reply   string
	// want
	newSegment bool
	reason     string
}

// runTurns plays turns on a fresh Conversation under tmpl, the agent
// sending each reply back as the assistant message it was given, and
// checks each step; it returns the conversation and the last messages.
func runTurns(t *testing.T, tmpl tokenize.ChatTemplate, turns []turn) (*Conversation, []schema.PromptMessage) {
	t.Helper()
	var conv Conversation
	var history []schema.PromptMessage
	for i, tu := range turns {
		msgs := append(slices.Clone(history), tu.add...)
		if tu.rewrite != nil {
			msgs = slices.Clone(tu.rewrite)
		}
		call := Call{Messages: msgs, Tools: tu.tools}
		step, err := conv.Next(call, tmpl)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if step.NewSegment != tu.newSegment || step.Reason != tu.reason {
			t.Fatalf("call %d: new segment %v (%q), want %v (%q)", i, step.NewSegment, step.Reason, tu.newSegment, tu.reason)
		}
		again, err := conv.Next(call, tmpl)
		if err != nil || !slices.Equal(again.Prompt, step.Prompt) {
			t.Fatalf("call %d: Next changed the conversation", i)
		}
		if !step.NewSegment && !slices.Equal(step.Prompt, concat(conv.Segment(), step.Append)) {
			t.Fatalf("call %d: prompt is not the segment with what it appends", i)
		}
		reply, err := ParseChatReply(tmpl, generate(tmpl, tu.reply), ParsersFor(tmpl))
		if err != nil {
			t.Fatal(err)
		}
		conv.Commit(step, call, reply)
		history = append(msgs, reply.Message())
	}
	return &conv, history
}

// A conversation of four calls, each adding a user message after the
// reply it was given, is one segment; under ChatML each prompt is also
// exactly the whole conversation rendered, since the replies' ids are the
// tokenizer's own.
func TestConversationContinues(t *testing.T) {
	tmpl := testkit.ChatTemplate(t, tokenize.TemplateChatML)
	turns := []turn{
		{add: []schema.PromptMessage{sys("You are terse."), user("Say hi.")}, reply: "hi", newSegment: true, reason: "first call"},
		{add: []schema.PromptMessage{user("Again.")}, reply: "hi again"},
		{add: []schema.PromptMessage{user("Count to 3."), sys("Be brief.")}, reply: "1 2 3"},
		{add: []schema.PromptMessage{user("Thanks.")}, reply: "You're welcome."},
	}
	conv, history := runTurns(t, tmpl, turns)
	if conv.Segments() != 1 {
		t.Fatalf("%d segments, want 1", conv.Segments())
	}
	// The whole conversation, rendered at once, is the segment up to the
	// last reply's generation prompt, and the segment ends with that reply.
	_, whole, err := agent.MessagesOpening(tmpl, history[:len(history)-1], nil)
	if err != nil {
		t.Fatal(err)
	}
	last := generate(tmpl, "You're welcome.").OutputIDs
	if want := concat(whole, last); !slices.Equal(conv.Segment(), want) {
		t.Fatalf("segment\n%q\nwant the whole rendering\n%q", tmpl.Tokenizer().Decode(conv.Segment()), tmpl.Tokenizer().Decode(want))
	}
}

// What a continuation appends is exactly the turn close, the new messages
// and the generation prompt.
func TestContinuationAppends(t *testing.T) {
	tmpl := testkit.ChatTemplate(t, tokenize.TemplateChatML)
	var conv Conversation
	call := Call{Messages: []schema.PromptMessage{user("q")}}
	step, err := conv.Next(call, tmpl)
	if err != nil {
		t.Fatal(err)
	}
	res := generate(tmpl, "a")
	res.OutputIDs = res.OutputIDs[:len(res.OutputIDs)-1] // cut at the length limit: no stop token
	reply, err := ParseChatReply(tmpl, res, Parsers{})
	if err != nil {
		t.Fatal(err)
	}
	conv.Commit(step, call, reply)
	next := Call{Messages: []schema.PromptMessage{user("q"), reply.Message(), user("more")}}
	step, err = conv.Next(next, tmpl)
	if err != nil {
		t.Fatal(err)
	}
	want := tmpl.CloseTurn(res.OutputIDs)
	want = append(want, tmpl.Message(schema.RoleUser, "more")...)
	want = append(want, tmpl.GenerationPrompt()...)
	if step.NewSegment || !slices.Equal(step.Append, want) {
		t.Fatalf("appended %q, want %q", tmpl.Tokenizer().Decode(step.Append), tmpl.Tokenizer().Decode(want))
	}
	if !strings.HasPrefix(tmpl.Tokenizer().Decode(step.Append), "<|im_end|>\n") {
		t.Fatalf("a reply cut at the length limit is not closed: %q", tmpl.Tokenizer().Decode(step.Append))
	}
}

// An agent that rewrites its history mid-way starts a new segment, which
// later calls continue.
func TestConversationRewrite(t *testing.T) {
	tmpl := testkit.ChatTemplate(t, tokenize.TemplateChatML)
	turns := []turn{
		{add: []schema.PromptMessage{sys("s"), user("task")}, reply: "step 1", newSegment: true, reason: "first call"},
		{add: []schema.PromptMessage{user("obs 1")}, reply: "step 2"},
		// Compaction: the agent replaces its history with a summary.
		{rewrite: []schema.PromptMessage{sys("s"), user("task (summary: did steps 1 and 2)")}, reply: "step 3",
			newSegment: true, reason: "message 1 differs"},
		{add: []schema.PromptMessage{user("obs 3")}, reply: "step 4"},
	}
	conv, _ := runTurns(t, tmpl, turns)
	if conv.Segments() != 2 {
		t.Fatalf("%d segments, want 2", conv.Segments())
	}
}

// The reasons a chat call starts a new segment.
func TestNewSegmentReasons(t *testing.T) {
	tmpl := testkit.ChatTemplate(t, tokenize.TemplateQwen3)
	base := []schema.PromptMessage{sys("s"), user("task")}
	reply := "<think>\nok\n</think>\n\ndone"
	edited := func(f func(m []schema.PromptMessage) []schema.PromptMessage) []turn {
		return []turn{
			{add: base, tools: agent.Tools, reply: reply, newSegment: true, reason: "first call"},
			{rewrite: f(append(slices.Clone(base), schema.PromptMessage{Role: schema.RoleAssistant, Content: "\n\ndone"}, user("next"))),
				tools: agent.Tools, reply: "x", newSegment: true},
		}
	}
	cases := []struct {
		name   string
		edit   func([]schema.PromptMessage) []schema.PromptMessage
		tools  []json.RawMessage
		reason string
	}{
		{"continues", func(m []schema.PromptMessage) []schema.PromptMessage { return m }, agent.Tools, ""},
		{"tools changed", func(m []schema.PromptMessage) []schema.PromptMessage { return m }, agent.Tools[:1], "tools changed"},
		{"same call again", func(m []schema.PromptMessage) []schema.PromptMessage { return m[:2] }, agent.Tools,
			"2 messages do not extend the previous call's 2 and its reply"},
		{"first message dropped", func(m []schema.PromptMessage) []schema.PromptMessage { return m[1:] }, agent.Tools,
			"message 0 differs"},
		{"edited", func(m []schema.PromptMessage) []schema.PromptMessage { m[0].Content = "S"; return m }, agent.Tools, "message 0 differs"},
		{"reply edited", func(m []schema.PromptMessage) []schema.PromptMessage { m[2].Content = "done"; return m }, agent.Tools,
			"message 2 is not the reply as returned"},
		{"reply with reasoning back in content", func(m []schema.PromptMessage) []schema.PromptMessage {
			m[2].Content = reply
			return m
		}, agent.Tools, "message 2 is not the reply as returned"},
		{"injected tool calls", func(m []schema.PromptMessage) []schema.PromptMessage {
			return append(m, schema.PromptMessage{Role: schema.RoleAssistant, ToolCalls: []schema.ToolCall{{Function: schema.FunctionCall{Name: "bash", Arguments: "{}"}}}}, tool("x"))
		}, agent.Tools, "message 4 is an assistant message with tool calls the model did not generate"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			turns := edited(c.edit)
			turns[1].tools = c.tools
			turns[1].reason = c.reason
			turns[1].newSegment = c.reason != ""
			runTurns(t, tmpl, turns)
		})
	}
}

// A tool-call round trip under Qwen3: the reply's tool calls, sent back by
// the agent as the assistant message (ids its own, arguments re-serialized
// compactly, content null) followed by one tool message per call,
// continue the stream, the results as one tool-response turn.
func TestToolCallRoundTrip(t *testing.T) {
	for _, name := range []string{tokenize.TemplateQwen3, tokenize.TemplateQwen3NoThink} {
		t.Run(name, func(t *testing.T) {
			tmpl := testkit.ChatTemplate(t, name)
			tt := tmpl.(tokenize.ToolTemplate)
			var conv Conversation
			call := Call{Messages: []schema.PromptMessage{sys("s"), user("list and show")}, Tools: agent.Tools}
			step, err := conv.Next(call, tmpl)
			if err != nil {
				t.Fatal(err)
			}
			_, opening, err := agent.MessagesOpening(tmpl, call.Messages, agent.Tools)
			if err != nil || !step.NewSegment || !slices.Equal(step.Prompt, opening) {
				t.Fatalf("first call: %v, new segment %v, prompt is the opening %v", err, step.NewSegment, slices.Equal(step.Prompt, opening))
			}
			text := "<think>\nTwo calls.\n</think>\n\n<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}\n</tool_call>\n" +
				"<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"cat a\"}}\n</tool_call>"
			res := generate(tmpl, text)
			reply, err := ParseChatReply(tmpl, res, ParsersFor(tmpl))
			if err != nil {
				t.Fatal(err)
			}
			if len(reply.Calls) != 2 || reply.FinishReason() != "tool_calls" {
				t.Fatalf("reply %+v", reply)
			}
			conv.Commit(step, call, reply)
			resp := reply.Chat(Meta{ID: "r1"}, len(step.Prompt), false)
			// The agent sends back the message it got, as OpenAI's Python
			// client would after a json round trip of the arguments.
			back := schema.PromptMessage{Role: schema.RoleAssistant}
			if c := resp.Choices[0].Message.Content; c != nil {
				back.Content = *c
			}
			for _, tc := range resp.Choices[0].Message.ToolCalls {
				var args any
				if err := json.Unmarshal([]byte(tc.Function.Arguments), &args); err != nil {
					t.Fatal(err)
				}
				compact, _ := json.Marshal(args)
				tc.ID = "agent-" + tc.ID
				tc.Function.Arguments = string(compact)
				back.ToolCalls = append(back.ToolCalls, tc)
			}
			next := Call{Messages: append(slices.Clone(call.Messages), back,
				schema.PromptMessage{Role: schema.RoleTool, Content: "a\nb", ToolCallID: "agent-call_r1_0"},
				schema.PromptMessage{Role: schema.RoleTool, Content: "hello", ToolCallID: "agent-call_r1_1"}), Tools: agent.Tools}
			step2, err := conv.Next(next, tmpl)
			if err != nil {
				t.Fatal(err)
			}
			want := append(tmpl.CloseTurn(res.OutputIDs), tt.ToolResults("a\nb", "hello")...)
			want = append(want, tmpl.GenerationPrompt()...)
			if step2.NewSegment || !slices.Equal(step2.Append, want) {
				t.Fatalf("new segment %v (%s); appended %q, want %q", step2.NewSegment, step2.Reason,
					tmpl.Tokenizer().Decode(step2.Append), tmpl.Tokenizer().Decode(want))
			}
			if !slices.Equal(step2.Prompt[:len(step.Prompt)+len(res.OutputIDs)], concat(step.Prompt, res.OutputIDs)) {
				t.Fatal("the generated ids are not kept as generated")
			}
		})
	}
}

// Tool messages under a template that renders no tools are an error, on a
// continuation as on a new segment.
func TestToolMessagesNeedToolTemplate(t *testing.T) {
	tmpl := testkit.ChatTemplate(t, tokenize.TemplateChatML)
	var conv Conversation
	call := Call{Messages: []schema.PromptMessage{user("q")}}
	step, err := conv.Next(call, tmpl)
	if err != nil {
		t.Fatal(err)
	}
	reply, _ := ParseChatReply(tmpl, generate(tmpl, "a"), Parsers{})
	conv.Commit(step, call, reply)
	next := Call{Messages: []schema.PromptMessage{user("q"), reply.Message(), tool("out")}}
	if _, err := conv.Next(next, tmpl); !errors.Is(err, agent.ErrMessagesNeedToolTemplate) {
		t.Fatalf("continuation: %v", err)
	}
	if _, err := (&Conversation{}).Next(Call{Messages: next.Messages, Tools: agent.Tools}, tmpl); !errors.Is(err, agent.ErrMessagesNeedToolTemplate) {
		t.Fatalf("new segment: %v", err)
	}
}

// Text completions continue a segment by token ids: the previous prompt
// and its generated ids, then more.
func TestNextIDs(t *testing.T) {
	tmpl := testkit.ChatTemplate(t, tokenize.TemplateChatML)
	tok := tmpl.Tokenizer()
	var conv Conversation
	prompt := "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n"
	step := conv.NextText(prompt, tmpl)
	if !step.NewSegment || step.Reason != "first call" || !slices.Equal(step.Prompt, tok.Encode(prompt)) {
		t.Fatalf("first: %+v", step)
	}
	res := generate(tmpl, "a")
	reply, err := ParseTextReply(tmpl, res)
	if err != nil {
		t.Fatal(err)
	}
	conv.Commit(step, Call{}, reply)

	more := tok.Encode("\n<|im_start|>user\nz<|im_end|>\n<|im_start|>assistant\n")
	ids := concat(concat(step.Prompt, res.OutputIDs), more)
	cont := conv.NextIDs(ids)
	if cont.NewSegment || !slices.Equal(cont.Append, more) || !slices.Equal(cont.Prompt, ids) {
		t.Fatalf("continuation: %+v", cont)
	}
	// The same conversation as text: "a<|im_end|>" re-encodes as generated.
	if s := conv.NextText(tok.Decode(ids), tmpl); s.NewSegment {
		t.Fatalf("text continuation: %s", s.Reason)
	}
	edited := slices.Clone(ids)
	edited[2]++
	if s := conv.NextIDs(edited); !s.NewSegment || s.Reason != "the prompt differs from the segment at token 2" {
		t.Fatalf("edited: %+v", s)
	}
	if s := conv.NextIDs(ids[:3]); !s.NewSegment || !strings.Contains(s.Reason, "fewer than the segment's") {
		t.Fatalf("short: %+v", s)
	}
	// A chat call after a text completion starts a new segment.
	conv.Commit(cont, Call{}, reply)
	if s, err := conv.Next(Call{Messages: []schema.PromptMessage{user("q")}}, tmpl); err != nil || s.Reason != "the previous call was a text completion" {
		t.Fatalf("chat after text: %+v, %v", s, err)
	}
}

// A long conversation (hundreds of turns, a ~100k-token stream) keeps
// continuing: the sizes agents run at.
func TestConversationLong(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	tmpl := testkit.ChatTemplate(t, tokenize.TemplateChatML)
	obs := strings.Repeat("line of tool output 0123456789\n", 40)
	turns := []turn{{add: []schema.PromptMessage{sys("s"), user("task")}, reply: "ok", newSegment: true, reason: "first call"}}
	for range 300 {
		turns = append(turns, turn{add: []schema.PromptMessage{user(obs)}, reply: "next command"})
	}
	conv, _ := runTurns(t, tmpl, turns)
	if conv.Segments() != 1 || len(conv.Segment()) < 100_000 {
		t.Fatalf("%d segments, %d tokens", conv.Segments(), len(conv.Segment()))
	}
}

// The whole round trip on the wire: the response's message, marshalled
// with content null and sent back in the next request's JSON with a tool
// message, decodes to a continuation.
func TestRoundTripThroughJSON(t *testing.T) {
	tmpl := testkit.ChatTemplate(t, tokenize.TemplateQwen3NoThink)
	tools := `[{"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]`
	first := `{"model": "m", "messages": [{"role": "developer", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "go"}]}], "tools": ` + tools + `}`
	req, err := DecodeChatRequest([]byte(first))
	if err != nil {
		t.Fatal(err)
	}
	var conv Conversation
	step, err := conv.Next(req.Call(), tmpl)
	if err != nil {
		t.Fatal(err)
	}
	reply, err := ParseChatReply(tmpl, generate(tmpl, "<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}\n</tool_call>"),
		ParsersFor(tmpl).ForRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	conv.Commit(step, req.Call(), reply)
	resp := reply.Chat(Meta{ID: "x"}, len(step.Prompt), false)
	if resp.Choices[0].Message.Content != nil {
		t.Fatalf("content %q, want null", *resp.Choices[0].Message.Content)
	}
	msg, err := json.Marshal(resp.Choices[0].Message)
	if err != nil {
		t.Fatal(err)
	}
	second := strings.TrimSuffix(first, `], "tools": `+tools+`}`) + `, ` + string(msg) +
		`, {"role": "tool", "tool_call_id": "call_x_0", "content": "a b"}], "tools": ` + tools + `}`
	req2, err := DecodeChatRequest([]byte(second))
	if err != nil {
		t.Fatal(err)
	}
	step2, err := conv.Next(req2.Call(), tmpl)
	if err != nil || step2.NewSegment {
		t.Fatalf("%v; new segment: %s", err, step2.Reason)
	}
}
