package devstack_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/actloop/actloop/internal/agent"
	"github.com/actloop/actloop/internal/demo"
	"github.com/actloop/actloop/internal/devstack"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/pkg/schema"
)

// toolCall is a reply of the tool_call flow: the call as Qwen3 writes it.
func toolCall(thought, name string, args any) string {
	var a strings.Builder
	enc := json.NewEncoder(&a)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(args)
	return fmt.Sprintf("%s\n<tool_call>\n{\"name\": %q, \"arguments\": %s}\n</tool_call>", thought, name,
		strings.TrimSpace(a.String()))
}

// A tool-calling trajectory end to end on the dev stack under Qwen3's
// template: the tools in the system message, one call per reply (a reply
// without one is a format error; a call inside the reasoning is not one),
// each result back as a tool message, and submit hands in the diff, which
// the eval scores and which is the submit call's result. Its stored ids
// are exactly the conversation as Qwen3's chat template renders it with
// the flow's tools (the Go rendering that the Jinja2 goldens of
// internal/tokenize check), the reasoning of the turns after the last user
// message kept, each reply's ids the simulator's.
func TestToolCallFlowEndToEnd(t *testing.T) {
	e := newEnvWith(t, 1, func(o *devstack.Options) { o.ChatTemplate = tokenize.TemplateQwen3 })
	startOneOfEach(t, e, e.stack.CoordinatorConfig(), nil)
	s := demo.Samples(1, e.ws, "tools")[0] // the "add" task
	s.Flow = schema.FlowToolCall
	s.GroupID, s.GroupSize = "", 0
	s.Script = []string{
		toolCall("Let me read the script first.", "bash", map[string]string{"command": "cat add.sh"}),
		"I think it subtracts; let me fix it.", // no call: a format error
		toolCall("<think>\nThe script subtracts; a <tool_call> here is only a thought.\n</think>\n\nFix the operator and run the check.", "bash",
			map[string]string{"command": `sed -i 's/\$1 - \$2/$1 + $2/' add.sh && bash check.sh add`}),
		toolCall("<think>\nThe check passes.\n</think>\n\nSubmitting.", "submit", map[string]string{}),
	}
	s.Normalize()
	e.submit(s)
	r := e.results(1)[s.ID]
	if !r.Solved() || r.Turns != 4 || r.Commands != 3 || !strings.Contains(r.Diff, "+echo $(( $1 + $2 ))") {
		t.Fatalf("%s: %s %q reward %g, %d turns, %d commands, diff %q", s.ID, r.Status, r.Reason, r.Reward, r.Turns,
			r.Commands, r.Diff)
	}
	var roles []string
	for _, m := range r.Messages {
		roles = append(roles, m.Role)
	}
	want := []string{"system", "user", "assistant", "tool", "assistant", "user", "assistant", "tool", "assistant", "tool"}
	if !slices.Equal(roles, want) {
		t.Fatalf("roles %q, want %q", roles, want)
	}
	if m := r.Messages[3].Content; !strings.Contains(m, "echo $(( $1 - $2 ))") {
		t.Errorf("the first tool result does not show add.sh: %q", m)
	}
	if m := r.Messages[5].Content; !strings.Contains(m, "found 0 tool calls") {
		t.Errorf("format error %q", m)
	}
	if m := r.Messages[9].Content; m != r.Diff {
		t.Errorf("the submit call's result is %q, want the submission (the diff)", m)
	}

	tmpl := testkit.ChatTemplate(t, tokenize.TemplateQwen3).(tokenize.ToolTemplate)
	msgs := make([]tokenize.Msg, len(r.Messages))
	for i, m := range r.Messages {
		msgs[i] = tokenize.Msg{Role: m.Role, Content: m.Content}
	}
	text, err := tmpl.RenderTools(msgs, agent.Tools, false)
	if err != nil {
		t.Fatal(err)
	}
	tok := tmpl.Tokenizer()
	if whole := tok.Encode(text); !slices.Equal(whole, r.Tokens) {
		t.Fatalf("stored ids differ from Qwen3's rendering of the conversation:\n got %q\nwant %q",
			tok.Decode(r.Tokens), text)
	}
	var generated []int32
	for i, m := range r.LossMask {
		if m == 1 {
			generated = append(generated, r.Tokens[i])
		}
	}
	var replies []int32
	for _, reply := range s.Script {
		replies = append(append(replies, tok.Encode(reply)...), tmpl.StopTokenIDs()...)
	}
	if !slices.Equal(generated, replies) {
		t.Fatalf("the loss mask covers %q, want exactly the replies and their stop tokens", tok.Decode(generated))
	}
}
