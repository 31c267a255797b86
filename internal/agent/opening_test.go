package agent

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/pkg/schema"
)

// A sample's messages open the conversation as the chat template renders
// them whole with the generation prompt, which for plain messages is also
// the template's message-by-message ids; the agent's templates are not
// applied, and the result's messages are the given ones.
func TestSampleOpeningMessages(t *testing.T) {
	given := []schema.PromptMessage{
		{Role: schema.RoleSystem, Content: "You are a careful engineer."},
		{Role: schema.RoleUser, Content: "Fix the failing test in pkg/x."},
	}
	s := &schema.Sample{Messages: given}
	for _, name := range []string{tokenize.TemplateChatML, tokenize.TemplateQwen3, tokenize.TemplateQwen3NoThink} {
		t.Run(name, func(t *testing.T) {
			tmpl := testkit.ChatTemplate(t, name)
			ag, err := Agents{}.For(schema.FlowBash)
			if err != nil {
				t.Fatal(err)
			}
			msgs, ids, err := ag.SampleOpening(tmpl, s)
			if err != nil {
				t.Fatal(err)
			}
			whole := tmpl.Tokenizer().Encode(tmpl.Render([]tokenize.Msg{
				{Role: given[0].Role, Content: given[0].Content}, {Role: given[1].Role, Content: given[1].Content}}, true))
			if !slices.Equal(ids, whole) {
				t.Errorf("ids are not the template's rendering:\n got %q\nwant %q", tmpl.Tokenizer().Decode(ids), tmpl.Tokenizer().Decode(whole))
			}
			turns := tmpl.Begin()
			for _, m := range given {
				turns = append(turns, tmpl.Message(m.Role, m.Content)...)
			}
			turns = append(turns, tmpl.GenerationPrompt()...)
			if !slices.Equal(ids, turns) {
				t.Errorf("ids are not the template's turns:\n got %q\nwant %q", tmpl.Tokenizer().Decode(ids), tmpl.Tokenizer().Decode(turns))
			}
			want := []schema.Message{{Role: schema.RoleSystem, Content: given[0].Content}, {Role: schema.RoleUser, Content: given[1].Content}}
			if !slices.Equal(msgs, want) {
				t.Errorf("messages = %+v, want %+v", msgs, want)
			}
		})
	}
}

// Tools and tool calls render through the template's tools rendering;
// under the tool_call flow messages without tools get the flow's.
func TestSampleOpeningMessagesWithTools(t *testing.T) {
	tmpl := testkit.ChatTemplate(t, tokenize.TemplateQwen3)
	tt := tmpl.(tokenize.ToolTemplate)
	tool := json.RawMessage(`{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}`)
	given := []schema.PromptMessage{
		{Role: schema.RoleUser, Content: "What is in a.txt?"},
		{Role: schema.RoleAssistant, ToolCalls: []schema.ToolCall{{ID: "c1", Type: "function",
			Function: schema.FunctionCall{Name: "read", Arguments: `{"path": "a.txt"}`}}}},
		{Role: schema.RoleTool, ToolCallID: "c1", Content: "hello"},
	}
	msgs := []tokenize.Msg{
		{Role: "user", Content: "What is in a.txt?"},
		{Role: "assistant", ToolCalls: []tokenize.ToolCall{{Name: "read", Arguments: `{"path": "a.txt"}`}}},
		{Role: "tool", Content: "hello"},
	}
	for _, tc := range []struct {
		flow  string
		tools []json.RawMessage
		want  []json.RawMessage
	}{
		{schema.FlowBash, []json.RawMessage{tool}, []json.RawMessage{tool}},
		{schema.FlowToolCall, []json.RawMessage{tool}, []json.RawMessage{tool}},
		{schema.FlowToolCall, nil, Tools},
	} {
		ag, err := Agents{}.For(tc.flow)
		if err != nil {
			t.Fatal(err)
		}
		_, ids, err := ag.SampleOpening(tmpl, &schema.Sample{Messages: given, Tools: tc.tools})
		if err != nil {
			t.Fatal(err)
		}
		text, err := tt.RenderTools(msgs, tc.want, true)
		if err != nil {
			t.Fatal(err)
		}
		if got := tmpl.Tokenizer().Decode(ids); got != text {
			t.Errorf("%s with %d tools:\n got %q\nwant %q", tc.flow, len(tc.tools), got, text)
		}
	}

	// A template without tools refuses them, by name.
	ag, _ := Agents{}.For(schema.FlowBash)
	if _, _, err := ag.SampleOpening(testkit.ChatTemplate(t, tokenize.TemplateChatML), &schema.Sample{Messages: given}); !errors.Is(err, ErrMessagesNeedToolTemplate) {
		t.Errorf("chatml with tool calls: %v, want ErrMessagesNeedToolTemplate", err)
	}
	// The model must answer the last message.
	if _, _, err := MessagesOpening(tmpl, given[:2], nil); err == nil {
		t.Error("messages ending with the assistant's were rendered")
	}
}

// A sample's prompt_ids are the opening's ids exactly, whatever the
// template would make of their text; the message holds their decoding.
func TestSampleOpeningPromptIDs(t *testing.T) {
	tmpl := testkit.ChatTemplate(t, tokenize.TemplateQwen3)
	// Not what the template writes: ids the tokenizer would not produce
	// for this text (the characters one by one), and an id past the
	// vocabulary.
	var given []int32
	for _, r := range "<|im_start|>user\nhi<|im_end|>\n" {
		given = append(given, tmpl.Tokenizer().Encode(string(r))...)
	}
	given = append(given, 151644, 77091, 198, 999_999)
	for _, flow := range BuiltinFlows {
		ag, err := Agents{}.For(flow)
		if err != nil {
			t.Fatal(err)
		}
		s := &schema.Sample{PromptIDs: given}
		msgs, ids, err := ag.SampleOpening(tmpl, s)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids, given) {
			t.Fatalf("%s: ids = %v, want the sample's %v", flow, ids, given)
		}
		ids[0] = -1
		if s.PromptIDs[0] == -1 {
			t.Fatal("the opening's ids alias the sample's")
		}
		want := tmpl.Tokenizer().Decode(given)
		if len(msgs) != 1 || msgs[0].Role != schema.RoleUser || msgs[0].Content != want {
			t.Errorf("%s: messages = %+v, want one user message %q", flow, msgs, want)
		}
	}
}

// A sample's task still opens with the flow's own messages.
func TestSampleOpeningTask(t *testing.T) {
	tmpl := testkit.ChatTemplate(t, tokenize.TemplateQwen3)
	for _, flow := range BuiltinFlows {
		ag, err := Agents{}.For(flow)
		if err != nil {
			t.Fatal(err)
		}
		wantMsgs, wantIDs, err := ag.Opening(ag.Config, tmpl, "fix it")
		if err != nil {
			t.Fatal(err)
		}
		msgs, ids, err := ag.SampleOpening(tmpl, &schema.Sample{Task: "fix it"})
		if err != nil || !slices.Equal(msgs, wantMsgs) || !slices.Equal(ids, wantIDs) {
			t.Errorf("%s: SampleOpening differs from Opening (%v)", flow, err)
		}
	}
}
