package agent

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/pkg/schema"
)

func qwen3(t testing.TB) tokenize.ChatTemplate {
	t.Helper()
	tmpl, err := tokenize.Chat{Tokenizer: tokenize.TokenizerQwen, ChatTemplate: tokenize.TemplateQwen3}.Template()
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// flowCase is what the conformance suite needs of a flow: a reply that asks
// for a command, and replies that are format errors.
type flowCase struct {
	name      string
	reply     func(command string) string
	malformed []string
}

var flowCases = []flowCase{
	{schema.FlowBash, func(c string) string { return "THOUGHT: go.\n\n```bash\n" + c + "\n```" },
		[]string{"no block", "```bash\nls\n```\n```bash\npwd\n```", "```bash\n  \n```"}},
	{schema.FlowToolCall, func(c string) string {
		return "Go.\n<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": " + jsonString(c) + "}}\n</tool_call>"
	}, []string{"no call", "<tool_call>\n{\"name\": \"bash\"\n</tool_call>", "<tool_call>{\"name\": \"rm\", \"arguments\": {}}</tool_call>",
		"<tool_call>{\"name\": \"bash\", \"arguments\": {\"command\": \" \"}}</tool_call>",
		"<tool_call>{\"name\": \"submit\", \"arguments\": {}}</tool_call><tool_call>{\"name\": \"submit\", \"arguments\": {}}</tool_call>"}},
}

func jsonString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

// Every flow keeps the token-in/token-out invariants: the opening ends with
// the generation prompt and its messages are system then user; a reply that
// asks for a command yields exactly that command; a malformed reply is a
// *FormatError the configuration renders feedback for; an outcome's ids
// are its message then the generation prompt, and its content is what the
// configuration's observation (or timeout) template renders.
func TestFlowConformance(t *testing.T) {
	tmpl := qwen3(t)
	for _, fc := range flowCases {
		t.Run(fc.name, func(t *testing.T) {
			ag, err := Agents{}.For(fc.name)
			if err != nil || ag.Name() != fc.name {
				t.Fatalf("For(%q): %v, %v", fc.name, ag.Flow, err)
			}
			c := ag.Config.For("fix the bug", 0)
			msgs, ids, err := ag.Opening(c, tmpl, "fix the bug")
			if err != nil {
				t.Fatal(err)
			}
			if len(msgs) != 2 || msgs[0].Role != schema.RoleSystem || msgs[1].Role != schema.RoleUser ||
				!strings.Contains(msgs[1].Content, "fix the bug") {
				t.Fatalf("opening messages %+v", msgs)
			}
			if gp := tmpl.GenerationPrompt(); !slices.Equal(ids[len(ids)-len(gp):], gp) {
				t.Fatal("the opening does not end with the generation prompt")
			}
			for _, cmd := range []string{"ls -la", "grep -n \"x\" a.py && echo 'done'", "cat <<'EOF' > f\na\nb\nEOF"} {
				got, err := ag.Action(c, fc.reply(cmd))
				if err != nil || got != cmd {
					t.Errorf("Action(%q) = %q, %v; want %q", fc.reply(cmd), got, err, cmd)
				}
			}
			for _, bad := range fc.malformed {
				_, err := ag.Action(c, bad)
				var fe *FormatError
				if !errors.As(err, &fe) {
					t.Errorf("Action(%q): %v, want a *FormatError", bad, err)
					continue
				}
				if msg, err := c.FormatErrorFor(fe); err != nil || msg == "" {
					t.Errorf("feedback for %q: %q, %v", bad, msg, err)
				}
			}
			m, ids, ok := ag.Closing(tmpl, EndingSubmitted, "the diff")
			if !ok || m.Content != "the diff" || !slices.Equal(ids, tmpl.Message(m.Role, m.Content)) {
				t.Errorf("closing of a submission: %+v %v", m, ok)
			}
			if _, _, ok := ag.Closing(tmpl, EndingLimitsExceeded, ""); ok != (fc.name == schema.FlowBash) {
				t.Errorf("closing of a limit: %v (mini-swe-agent's empty message in the bash flow only)", ok)
			}
			for _, timedOut := range []bool{false, true} {
				m, ids, err := ag.Outcome(c, tmpl, "ls", "a.py\n", 0, timedOut)
				if err != nil {
					t.Fatal(err)
				}
				want, _ := c.Observation("ls", "a.py\n", 0)
				if timedOut {
					want, _ = c.Timeout("ls", "a.py\n")
				}
				if m.Content != want {
					t.Errorf("outcome content %q, want %q", m.Content, want)
				}
				if wantIDs := append(tmpl.Message(m.Role, m.Content), tmpl.GenerationPrompt()...); !slices.Equal(ids, wantIDs) {
					t.Errorf("outcome ids are not its message then the generation prompt")
				}
			}
		})
	}
}

func TestToolCallAction(t *testing.T) {
	c := DefaultConfigFor(schema.FlowToolCall)
	for _, tt := range []struct {
		name, reply, want, reason string
	}{
		{"bash", "<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}\n</tool_call>", "ls", ""},
		{"crlf", "<tool_call>{\"name\": \"bash\", \"arguments\": {\"command\": \"a\\r\\nb\"}}</tool_call>", "a\nb", ""},
		{"submit", "done\n<tool_call>\n{\"name\": \"submit\", \"arguments\": {}}\n</tool_call>", SubmitCommand, ""},
		{"think first", "<think>\nmaybe <tool_call> later\n</think>\n\n<tool_call>{\"name\": \"bash\", \"arguments\": {\"command\": \"pwd\"}}</tool_call>",
			"pwd", ""}, // a call spoken of in the reasoning is not one
		{"none", "I am done.", "", "found 0 tool calls, want exactly 1"},
		{"two", strings.Repeat("<tool_call>{\"name\": \"submit\", \"arguments\": {}}</tool_call>", 2), "", "found 2 tool calls"},
		{"not json", "<tool_call>bash ls</tool_call>", "", "not a JSON object"},
		{"no command", "<tool_call>{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\"}}</tool_call>", "", `bash takes {"command"`},
		{"arguments a string", "<tool_call>{\"name\": \"bash\", \"arguments\": \"ls\"}</tool_call>", "", `bash takes {"command"`},
		{"empty", "<tool_call>{\"name\": \"bash\", \"arguments\": {\"command\": \"\"}}</tool_call>", "", "the command is empty"},
		{"unknown", "<tool_call>{\"name\": \"python\", \"arguments\": {}}</tool_call>", "", `unknown tool "python"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ToolCallFlow{}.Action(c, tt.reply)
			if tt.reason == "" {
				if err != nil || got != tt.want {
					t.Fatalf("got %q, %v; want %q", got, err, tt.want)
				}
				return
			}
			var fe *FormatError
			if !errors.As(err, &fe) || !strings.Contains(fe.Reason, tt.reason) {
				t.Fatalf("got %q, %v; want a format error saying %q", got, err, tt.reason)
			}
			if msg, err := c.FormatErrorFor(fe); err != nil || !strings.Contains(msg, fe.Reason) {
				t.Fatalf("feedback %q, %v", msg, err)
			}
		})
	}
}

// The tool-call flow refuses a chat template that cannot list tools, naming
// the setting.
func TestToolCallFlowNeedsToolTemplate(t *testing.T) {
	tmpl, err := tokenize.Chat{Tokenizer: tokenize.TokenizerQwen, ChatTemplate: tokenize.TemplateChatML}.Template()
	if err != nil {
		t.Fatal(err)
	}
	c := DefaultConfigFor(schema.FlowToolCall)
	if _, _, err := (ToolCallFlow{}).Opening(c, tmpl, "t"); !errors.Is(err, ErrNoToolTemplate) {
		t.Fatalf("Opening under chatml: %v", err)
	}
	if _, _, err := (ToolCallFlow{}).Outcome(c, tmpl, "ls", "", 0, false); !errors.Is(err, ErrNoToolTemplate) {
		t.Fatalf("Outcome under chatml: %v", err)
	}
	if _, err := FlowNamed("shell"); err == nil {
		t.Fatal("an unknown flow was found")
	}
}

func FuzzToolCallAction(f *testing.F) {
	for _, fc := range flowCases {
		for _, m := range fc.malformed {
			f.Add(m)
		}
		f.Add(fc.reply("ls"))
	}
	c := DefaultConfigFor(schema.FlowToolCall)
	f.Fuzz(func(t *testing.T, reply string) {
		got, err := ToolCallFlow{}.Action(c, reply)
		var fe *FormatError
		switch {
		case err == nil:
			if strings.TrimSpace(got) == "" || got != strings.TrimSpace(got) || strings.Contains(got, "\r\n") {
				t.Fatalf("action %q from %q", got, reply)
			}
		case errors.As(err, &fe):
			if fe.Reason == "" {
				t.Fatalf("a format error without a reason for %q", reply)
			}
		default:
			t.Fatalf("error %v is not a *FormatError", err)
		}
	})
}
