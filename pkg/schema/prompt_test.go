package schema

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// promptSample is a valid sample but for its prompt, which extra gives.
func promptSample(extra string) string {
	return `{"v":1,"id":"a","env":{"backend":"sim"},` + extra + `}`
}

func idList(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(i % 151_000))
	}
	return b.String()
}

func TestDecodeSamplePrompt(t *testing.T) {
	tests := []struct {
		name string
		in   string
		// want is the error's text, in part; "" = valid.
		want string
	}{
		{"task", `"task":"t"`, ""},
		{"messages", `"messages":[{"role":"system","content":"s"},{"role":"user","content":"u"}]`, ""},
		{"messages with tools and calls", `"messages":[{"role":"user","content":"u"},` +
			`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"bash","arguments":"{\"command\": \"ls\"}"}}]},` +
			`{"role":"tool","tool_call_id":"c1","name":"bash","content":"a.txt"}],` +
			`"tools":[{"type":"function","function":{"name":"bash","parameters":{"type":"object"}}}]`, ""},
		{"prompt_ids", `"prompt_ids":[151644,872,198,0]`, ""},
		{"prompt_ids at the limit", `"prompt_ids":[` + idList(MaxPromptIDs) + `]`, ""},
		{"empty task and messages count as unset", `"task":"","messages":[],"prompt_ids":[1]`, ""},

		{"none", `"task":""`, "task: missing (exactly one of task, messages, prompt_ids must be set; got none)"},
		{"task and prompt_ids", `"task":"t","prompt_ids":[1]`, "prompt_ids: set beside task (exactly one of task, messages, prompt_ids must be set)"},
		{"all three", `"task":"t","messages":[{"role":"user","content":"u"}],"prompt_ids":[1]`,
			"messages: set beside task (exactly one of task, messages, prompt_ids must be set)\nprompt_ids: set beside task"},
		{"tools without messages", `"task":"t","tools":[{"type":"function","function":{"name":"f"}}]`, "tools: given without messages"},
		{"role missing", `"messages":[{"content":"u"}]`, "messages[0].role: missing"},
		{"role unknown", `"messages":[{"role":"user","content":"u"},{"role":"developer","content":"d"}]`, `messages[1].role: unknown role "developer"`},
		{"last is the assistant's", `"messages":[{"role":"user","content":"u"},{"role":"assistant","content":"a"}]`,
			"messages[1].role: the last message is the assistant's"},
		{"tool calls on a user message", `"messages":[{"role":"user","content":"u","tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}]`,
			"messages[0].tool_calls: only an assistant message"},
		{"tool_call_id on a user message", `"messages":[{"role":"user","content":"u","tool_call_id":"c"}]`, "messages[0].tool_call_id: only a tool message"},
		{"call without a name", `"messages":[{"role":"assistant","tool_calls":[{"function":{"arguments":"{}"}}]},{"role":"tool","content":"x"}]`,
			"messages[0].tool_calls[0].function.name: missing"},
		{"call with bad arguments", `"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{x"}}]},{"role":"tool","content":"x"}]`,
			"messages[0].tool_calls[0].function.arguments: not valid JSON"},
		{"call of another type", `"messages":[{"role":"assistant","tool_calls":[{"type":"custom","function":{"name":"f"}}]},{"role":"tool","content":"x"}]`,
			`messages[0].tool_calls[0].type: unknown type "custom"`},
		{"content not a string", `"messages":[{"role":"user","content":[{"type":"text","text":"u"}]}]`, "messages.content: has JSON type array, want string"},
		{"unknown message field", `"messages":[{"role":"user","content":"u"},{"role":"user","content":"v","refusal":null}]`,
			`messages[1].refusal: unknown field`},
		{"misspelt call field", `"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","args":"{}"}}]},{"role":"tool","content":"x"}]`,
			`messages[0].tool_calls[0].function.args: unknown field (messages[0].tool_calls[0].function has arguments, name)`},
		{"too many messages", `"messages":[` + strings.Repeat(`{"role":"user","content":""},`, MaxPromptMessages) + `{"role":"user","content":"u"}]`,
			"messages: lists 4097 messages, more than 4096"},
		{"messages' text too long", `"messages":[{"role":"user","content":"` + strings.Repeat("x", MaxMessagesBytes/2+1) + `"},` +
			`{"role":"user","content":"` + strings.Repeat("x", MaxMessagesBytes/2) + `"}]`, "messages: their text (contents and arguments) is 262145 bytes"},
		{"tool not an object", `"messages":[{"role":"user","content":"u"}],"tools":["bash"]`, "tools[0]: must be an object"},
		{"tool without a function", `"messages":[{"role":"user","content":"u"}],"tools":[{"type":"function"}]`, "tools[0].function: missing"},
		{"tool without a name", `"messages":[{"role":"user","content":"u"}],"tools":[{"type":"function","function":{"description":"d"}}]`,
			"tools[0].function.name: missing"},
		{"tool of another type", `"messages":[{"role":"user","content":"u"}],"tools":[{"type":"web","function":{"name":"f"}}]`,
			`tools[0].type: unknown type "web"`},
		{"negative id", `"prompt_ids":[1,-2,3,-4,-5]`, "prompt_ids[1]: must be >= 0, got -2"},
		{"negative ids counted", `"prompt_ids":[1,-2,3,-4,-5]`, "prompt_ids: 2 more ids are negative"},
		{"id past int32", `"prompt_ids":[2147483648]`, "prompt_ids: out of range (int32), got 2147483648"},
		{"id not an integer", `"prompt_ids":[1.5]`, "must be an integer"},
		{"too many ids", `"prompt_ids":[` + idList(MaxPromptIDs+1) + `]`, "prompt_ids: lists 65537 ids, more than 65536"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := DecodeSample([]byte(promptSample(tt.in)))
			if tt.want == "" {
				if err != nil {
					t.Fatalf("DecodeSample: %v", err)
				}
				if err := s.Validate(); err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to say %q", err, tt.want)
			}
		})
	}
}

// A sample of the largest prompt_ids fits the sample size limit whatever
// the ids (below 1,000,000, as every vocabulary's are).
func TestPromptIDsFitTheSampleLimit(t *testing.T) {
	ids := strings.TrimSuffix(strings.Repeat("999999,", MaxPromptIDs), ",")
	in := promptSample(`"prompt_ids":[` + ids + `]`)
	if len(in) > MaxSampleBytes-32<<10 {
		t.Fatalf("%d ids take %d bytes, leaving less than 32 KiB of %d for the rest of the sample", MaxPromptIDs, len(in), MaxSampleBytes)
	}
	if _, err := DecodeSample([]byte(in)); err != nil {
		t.Fatal(err)
	}
}

// A sample built in Go with invalid UTF-8 in its messages is refused by
// path, as json.Marshal would send U+FFFD in its place.
func TestValidateMessagesInvalidUTF8(t *testing.T) {
	s := Sample{V: Version, ID: "a", Env: Env{Backend: BackendSim}, Messages: []PromptMessage{
		{Role: RoleUser, Content: "ok"},
		{Role: RoleAssistant, ToolCalls: []ToolCall{{Function: FunctionCall{Name: "f\xff", Arguments: "{}"}}}},
		{Role: RoleTool, Content: "x\xfe"},
	}}
	err := s.Validate()
	for _, want := range []string{"messages[1].tool_calls[0].function.name: invalid UTF-8", "messages[2].content: invalid UTF-8"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v, want %q", err, want)
		}
	}
}

// A decoded sample written back by Go (as actloop submit and the Go
// client send it) keeps its messages, tools and prompt ids as they were.
func TestPromptRoundTrip(t *testing.T) {
	for _, in := range []string{
		`"messages":[{"role":"user","content":"u","name":"n"},{"role":"assistant","content":"",` +
			`"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\": 1}"}}]},` +
			`{"role":"tool","content":"r","tool_call_id":"c"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]`,
		`"prompt_ids":[151644,872,198,0,2147483647]`,
	} {
		s, err := DecodeSample([]byte(promptSample(in)))
		if err != nil {
			t.Fatal(err)
		}
		out, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeSample(out)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", out, err)
		}
		if !reflect.DeepEqual(s, again) {
			t.Errorf("round trip changed the sample:\n%+v\n%+v", s, again)
		}
		if !strings.Contains(string(out), in) {
			t.Errorf("written back as %s, want it to hold %s", out, in)
		}
	}
}

// The proxy flow takes an agent command and a task, on a local sandbox;
// every rule is refused naming its field.
func TestDecodeSampleProxyFlow(t *testing.T) {
	agent := `"flow":"proxy","agent":{"command":"python3 agent.py"}`
	local := func(extra string) string { return `{"v":1,"id":"a","env":{"backend":"local"},` + extra + `}` }
	tests := []struct{ name, in, want string }{
		{"valid", local(agent + `,"task":"t"`), ""},
		{"task at the limit", local(agent + `,"task":"` + strings.Repeat("t", MaxAgentTaskBytes) + `"`), ""},
		{"no agent", local(`"flow":"proxy","task":"t"`), `agent.command: missing (flow "proxy" runs the sample's own agent command)`},
		{"blank command", local(`"flow":"proxy","agent":{"command":" "},"task":"t"`), "agent.command: missing"},
		{"long command", local(`"flow":"proxy","agent":{"command":"` + strings.Repeat("x", MaxAgentCommandBytes+1) + `"},"task":"t"`),
			"agent.command: 4097 bytes exceeds the limit of 4096"},
		{"agent without the flow", local(`"agent":{"command":"a"},"task":"t"`), `agent: set with flow "bash" (an agent command goes with flow "proxy" only)`},
		{"messages", local(agent + `,"messages":[{"role":"user","content":"u"}]`), `flow: "proxy" takes a task`},
		{"task past the limit", local(agent + `,"task":"` + strings.Repeat("t", MaxAgentTaskBytes+1) + `"`),
			"task: 98305 bytes exceeds the proxy flow's limit of 98304"},
		{"sim", promptSample(agent + `,"task":"t"`), `env.backend: "sim" cannot run an agent (flow "proxy" needs "local")`},
	}
	for _, tt := range tests {
		_, err := DecodeSample([]byte(tt.in))
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
}
