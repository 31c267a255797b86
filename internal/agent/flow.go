package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/pkg/schema"
)

// A Flow is how a trajectory talks to its model, siiRL-agentic's agent flow
// (its BUILTIN_FLOW registry): how the conversation opens, how a reply
// becomes the command to run, and how the command's outcome becomes the
// next message. Everything else (limits, submission, format errors as user
// messages, the eval) is the same for every flow. A sample picks its flow
// by name (schema.Sample.Flow); FlowNamed finds it.
type Flow interface {
	// Name is the flow's name, as a sample's flow field gives it.
	Name() string
	// Opening renders a trajectory's first messages (system prompt and
	// task) and their ids, up to and including the first generation prompt.
	Opening(c Config, tmpl tokenize.ChatTemplate, task string) ([]schema.Message, []int32, error)
	// Action is the command a reply asks to run; a *FormatError when it
	// asks for none, several, or one that cannot run.
	Action(c Config, reply string) (string, error)
	// Outcome renders a command's outcome (its output and exit code, or
	// that it timed out) as the next message and its ids, generation
	// prompt included.
	Outcome(c Config, tmpl tokenize.ChatTemplate, action, output string, code int, timedOut bool) (schema.Message, []int32, error)
	// Closing is the message that ends a trajectory's conversation when it
	// ends (submission is the submitted text) and its ids, which no
	// generation prompt follows; false when the flow appends none.
	Closing(tmpl tokenize.ChatTemplate, e Ending, submission string) (schema.Message, []int32, bool)
}

// BuiltinFlows are the flows of the built-in agent, which FlowNamed
// returns; schema.FlowProxy runs a sample's own agent instead.
var BuiltinFlows = []string{schema.FlowBash, schema.FlowToolCall}

// FlowNamed returns the flow a sample names; "" is schema.FlowBash.
func FlowNamed(name string) (Flow, error) {
	switch name {
	case "", schema.FlowBash:
		return BashFlow{}, nil
	case schema.FlowToolCall:
		return ToolCallFlow{}, nil
	case schema.FlowProxy:
		return nil, fmt.Errorf("flow %q runs the sample's own agent (agent.command): it has no built-in one", name)
	}
	return nil, fmt.Errorf("unknown flow %q (want one of %s)", name, strings.Join(BuiltinFlows, ", "))
}

// BashFlow is mini-swe-agent's: the reply holds one ```bash block (the
// configuration's action_regex), and the outcome is a user message from
// action_observation_template (or timeout_template).
type BashFlow struct{}

var _ Flow = BashFlow{}

// Name implements Flow.
func (BashFlow) Name() string { return schema.FlowBash }

// Opening implements Flow.
func (BashFlow) Opening(c Config, tmpl tokenize.ChatTemplate, task string) ([]schema.Message, []int32, error) {
	return Opening(c, tmpl, task)
}

// Action implements Flow.
func (BashFlow) Action(c Config, reply string) (string, error) { return c.ParseAction(reply) }

// Outcome implements Flow.
func (BashFlow) Outcome(c Config, tmpl tokenize.ChatTemplate, action, output string, code int, timedOut bool) (schema.Message, []int32, error) {
	content, err := observation(c, action, output, code, timedOut)
	if err != nil {
		return schema.Message{}, nil, err
	}
	return schema.Message{Role: schema.RoleUser, Content: content},
		append(tmpl.Message(schema.RoleUser, content), tmpl.GenerationPrompt()...), nil
}

// Closing implements Flow: mini-swe-agent's terminating message
// (TerminatingMessage), a user message.
func (BashFlow) Closing(tmpl tokenize.ChatTemplate, e Ending, submission string) (schema.Message, []int32, bool) {
	m := TerminatingMessage(e, submission)
	return m, tmpl.Message(m.Role, m.Content), true
}

func observation(c Config, action, output string, code int, timedOut bool) (string, error) {
	if timedOut {
		return c.Timeout(action, output)
	}
	return c.Observation(action, output, code)
}

// ToolCallFlow is a function-calling agent's, as Qwen3-style models are
// trained: the tools (ToolBash and ToolSubmit) are listed in the system
// message, the reply calls one of them as <tool_call>{"name": …,
// "arguments": …}</tool_call>, and the outcome goes back as a tool message
// (<tool_response> in a user turn), rendered by the configuration's
// action_observation_template (or timeout_template). Calling submit runs
// SubmitCommand, so a submission is recognised and scored as in the bash
// flow. It needs a chat template that renders tools (tokenize.ToolTemplate:
// qwen3, qwen3-nothink).
type ToolCallFlow struct{}

var _ Flow = ToolCallFlow{}

// The tools of ToolCallFlow, as apply_chat_template takes them.
var (
	ToolBash = json.RawMessage(`{"type": "function", "function": {"name": "bash", ` +
		`"description": "Run one bash command (or several joined with && or ||) in the task's sandbox and return its output and exit code.", ` +
		`"parameters": {"type": "object", "properties": {"command": {"type": "string", "description": "The command to run."}}, "required": ["command"]}}}`)
	ToolSubmit = json.RawMessage(`{"type": "function", "function": {"name": "submit", ` +
		`"description": "Submit your changes when the task is done. You cannot continue working after this.", ` +
		`"parameters": {"type": "object", "properties": {}}}}`)
	Tools = []json.RawMessage{ToolBash, ToolSubmit}
)

// SubmitCommand is what calling the submit tool runs: the submission that
// the built-in configuration asks a bash-flow agent to type, printing the
// sentinel and the diff of every change.
const SubmitCommand = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached"

// ErrNoToolTemplate: the tool-call flow under a chat template that cannot
// render tools.
var ErrNoToolTemplate = errors.New("the tool_call flow needs a chat template that renders tools " +
	"(ACTLOOP_CHAT_TEMPLATE=qwen3 or qwen3-nothink, or a model's own template that lists tools: ACTLOOP_MODEL_DIR)")

// Name implements Flow.
func (ToolCallFlow) Name() string { return schema.FlowToolCall }

func toolTemplate(tmpl tokenize.ChatTemplate) (tokenize.ToolTemplate, error) {
	tt, ok := tmpl.(tokenize.ToolTemplate)
	if !ok {
		return nil, ErrNoToolTemplate
	}
	return tt, nil
}

// Opening implements Flow: the system message lists Tools.
func (ToolCallFlow) Opening(c Config, tmpl tokenize.ChatTemplate, task string) ([]schema.Message, []int32, error) {
	tt, err := toolTemplate(tmpl)
	if err != nil {
		return nil, nil, err
	}
	msgs, _, err := Opening(c, tmpl, task)
	if err != nil {
		return nil, nil, err
	}
	system, err := tt.SystemTools(msgs[0].Content, Tools)
	if err != nil {
		return nil, nil, err
	}
	ids := append(tmpl.Begin(), system...)
	ids = append(ids, tmpl.Message(msgs[1].Role, msgs[1].Content)...)
	return msgs, append(ids, tmpl.GenerationPrompt()...), nil
}

// toolCallRe finds Hermes-style tool calls, as Qwen3's template writes
// them and vLLM's and SGLang's hermes/qwen25 parsers read them.
var toolCallRe = regexp.MustCompile(`(?s)<tool_call>(.*?)</tool_call>`)

// Action implements Flow: exactly one call after the reply's reasoning
// (what precedes its last </think>, as the servers' reasoning parsers split
// it off before they read tool calls), of bash with a non-empty command
// (the action) or of submit (SubmitCommand). Anything else is a
// *FormatError whose Actions are the calls found and whose Reason says
// what is wrong.
func (ToolCallFlow) Action(_ Config, reply string) (string, error) {
	if i := strings.LastIndex(reply, "</think>"); i >= 0 {
		reply = reply[i+len("</think>"):]
	}
	matches := toolCallRe.FindAllStringSubmatch(reply, -1)
	calls := make([]string, len(matches))
	for i, m := range matches {
		calls[i] = m[1]
	}
	if len(calls) != 1 {
		return "", &FormatError{Actions: calls, Reason: fmt.Sprintf("found %d tool calls, want exactly 1", len(calls))}
	}
	var call struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(calls[0])), &call); err != nil {
		return "", &FormatError{Actions: calls, Reason: "the tool call is not a JSON object with name and arguments: " + err.Error()}
	}
	switch call.Name {
	case "bash":
		var args struct {
			Command *string `json:"command"`
		}
		if err := json.Unmarshal(call.Arguments, &args); err != nil || args.Command == nil {
			return "", &FormatError{Actions: calls, Reason: `bash takes {"command": "<the command>"}`}
		}
		command := strings.TrimSpace(strings.ReplaceAll(*args.Command, "\r\n", "\n"))
		if command == "" {
			return "", &FormatError{Actions: calls, Reason: "the command is empty"}
		}
		return command, nil
	case "submit":
		return SubmitCommand, nil
	}
	return "", &FormatError{Actions: calls, Reason: fmt.Sprintf("unknown tool %q (the tools are bash and submit)", call.Name)}
}

// Closing implements Flow: the submit call's result, a tool message
// holding the submitted text; nothing for a limit (a user message would
// make Qwen3's template drop the reasoning of every turn before it when it
// renders the conversation again).
func (ToolCallFlow) Closing(tmpl tokenize.ChatTemplate, e Ending, submission string) (schema.Message, []int32, bool) {
	tt, err := toolTemplate(tmpl)
	if err != nil || e != EndingSubmitted {
		return schema.Message{}, nil, false
	}
	return schema.Message{Role: schema.RoleTool, Content: submission}, tt.ToolResults(submission), true
}

// Outcome implements Flow: a tool message, its content rendered by the
// configuration's observation (or timeout) template.
func (ToolCallFlow) Outcome(c Config, tmpl tokenize.ChatTemplate, action, output string, code int, timedOut bool) (schema.Message, []int32, error) {
	tt, err := toolTemplate(tmpl)
	if err != nil {
		return schema.Message{}, nil, err
	}
	content, err := observation(c, action, output, code, timedOut)
	if err != nil {
		return schema.Message{}, nil, err
	}
	return schema.Message{Role: schema.RoleTool, Content: content}, append(tt.ToolResults(content), tmpl.GenerationPrompt()...), nil
}
