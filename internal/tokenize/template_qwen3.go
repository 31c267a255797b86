package tokenize

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/actloop/actloop/internal/chattemplate"
)

// ToolCall is one function call in an assistant message.
type ToolCall struct {
	Name string
	// Arguments is the call's arguments as JSON text. A template prints it as
	// it is, as Qwen3's does with an arguments string, so a re-rendering
	// reproduces the model's own spelling of them.
	Arguments string
}

// ToolTemplate is a ChatTemplate that also renders tool definitions, tool
// calls and tool results, for the conversations of a function-calling
// agent. Callers find it with a type assertion, as pkg/llm's optional
// capabilities.
type ToolTemplate interface {
	ChatTemplate
	// SystemTools returns the ids of the system message that lists tools,
	// which opens the conversation in place of Message("system", system).
	// Each tool is a JSON object as given to apply_chat_template's tools
	// (usually {"type": "function", "function": {"name", "description",
	// "parameters"}}); system "" stands for no system message.
	SystemTools(system string, tools []json.RawMessage) ([]int32, error)
	// ToolResults returns the ids of the turn that gives the model the
	// results of an assistant turn's tool calls, one or more in order; a
	// GenerationPrompt follows it.
	ToolResults(results ...string) []int32
	// RenderTools is Render with tools listed in the system message; an
	// assistant Msg's ToolCalls follow its content, and messages of role
	// "tool" are results.
	RenderTools(msgs []Msg, tools []json.RawMessage, generationPrompt bool) (string, error)
}

// Qwen3 is the chat template of the Qwen3 models, the chat_template of
// Qwen/Qwen3-*'s tokenizer_config.json (testdata/qwen3 holds it and says
// where it comes from), in thinking mode (the template's default) or in
// non-thinking mode (enable_thinking=false), where the generation prompt
// ends with an empty think block so the model answers at once:
// "<|im_start|>assistant\n<think>\n\n</think>\n\n".
//
// System and user messages are ChatML's. Tools are listed in the system
// message; a message of role "tool" is a user turn of <tool_response>
// blocks, consecutive ones merged into one turn; an assistant's tool calls
// follow its content as <tool_call> blocks, on a line of their own after
// any reply text (so the Content of a Msg with ToolCalls is the generated
// text before the newline that precedes the first <tool_call>).
//
// Render and RenderTools are Qwen3's template exactly. A trajectory, though,
// keeps every assistant turn as it was generated, because its ids are what
// the model saw: each generation's prompt is the trajectory before it. The
// template instead rewrites assistant turns when it renders a whole
// conversation. Before the last user message it drops their think blocks;
// after it (a tool loop, whose observations are tool messages) it keeps a
// turn's think block only if there is reasoning in it; and it writes the
// last turn's think block as "<think>\n{reasoning}\n</think>\n\n", adding
// an empty one if there is none. So the trajectory's ids equal the
// rendering of its messages in thinking mode for a tool loop whose turns
// reason (Qwen3's agent loop) and for earlier turns without think blocks;
// they differ where think blocks precede the last user message (actloop's
// text actions return observations as user messages) and, in non-thinking
// mode, in every turn but the last, which the template renders without the
// empty think block its prompt ended with.
type Qwen3 struct {
	ChatML
	// Thinking is false in non-thinking mode.
	Thinking bool
}

var _ ToolTemplate = Qwen3{}

// NewQwen3 returns the Qwen3 template over tok, which must have the
// <|im_start|> and <|im_end|> tokens.
func NewQwen3(tok Tokenizer, thinking bool) (Qwen3, error) {
	name := TemplateQwen3
	if !thinking {
		name = TemplateQwen3NoThink
	}
	c, err := newChatML(tok, name)
	if err != nil {
		return Qwen3{}, err
	}
	return Qwen3{ChatML: c, Thinking: thinking}, nil
}

const (
	qwen3ToolsIntro = "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" +
		"You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
	qwen3ToolsOutro = "\n</tools>\n\nFor each function call, return a json object with function name and arguments " +
		"within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": " +
		"<args-json-object>}\n</tool_call><|im_end|>\n"
	emptyThink = "<think>\n\n</think>\n\n"
)

func (q Qwen3) generationPrompt() string {
	if q.Thinking {
		return "<|im_start|>assistant\n"
	}
	return "<|im_start|>assistant\n" + emptyThink
}

// GenerationPrompt implements ChatTemplate.
func (q Qwen3) GenerationPrompt() []int32 { return q.Tok.Encode(q.generationPrompt()) }

// Message implements ChatTemplate; a "tool" message is ToolResults of it.
func (q Qwen3) Message(role, content string) []int32 {
	if role == "tool" {
		return q.ToolResults(content)
	}
	return q.ChatML.Message(role, content)
}

// ToolResults implements ToolTemplate.
func (q Qwen3) ToolResults(results ...string) []int32 {
	var b strings.Builder
	b.WriteString("<|im_start|>user")
	for _, r := range results {
		b.WriteString("\n<tool_response>\n" + r + "\n</tool_response>")
	}
	b.WriteString("<|im_end|>\n")
	return q.Tok.Encode(b.String())
}

// SystemTools implements ToolTemplate.
func (q Qwen3) SystemTools(system string, tools []json.RawMessage) ([]int32, error) {
	js, err := toolsJSON(tools)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	writeQwen3System(&b, system, system != "", js)
	return q.Tok.Encode(b.String()), nil
}

// Render implements ChatTemplate.
func (q Qwen3) Render(msgs []Msg, generationPrompt bool) string {
	return q.render(msgs, nil, generationPrompt)
}

// RenderTools implements ToolTemplate.
func (q Qwen3) RenderTools(msgs []Msg, tools []json.RawMessage, generationPrompt bool) (string, error) {
	js, err := toolsJSON(tools)
	if err != nil {
		return "", err
	}
	return q.render(msgs, js, generationPrompt), nil
}

// toolsJSON writes each tool as the template's tojson filter does.
func toolsJSON(tools []json.RawMessage) ([]string, error) {
	js := make([]string, len(tools))
	for i, t := range tools {
		s, err := chattemplate.PyDumps(t)
		if err != nil {
			return nil, fmt.Errorf("tool %d: %w", i, err)
		}
		js[i] = s
	}
	return js, nil
}

// writeQwen3System writes the system message: the tools section after the
// system prompt (if any) when there are tools, else the system prompt
// alone (if any).
func writeQwen3System(b *strings.Builder, system string, hasSystem bool, tools []string) {
	if len(tools) == 0 {
		if hasSystem {
			b.WriteString("<|im_start|>system\n" + system + "<|im_end|>\n")
		}
		return
	}
	b.WriteString("<|im_start|>system\n")
	if hasSystem {
		b.WriteString(system + "\n\n")
	}
	b.WriteString(qwen3ToolsIntro)
	for _, t := range tools {
		b.WriteString("\n" + t)
	}
	b.WriteString(qwen3ToolsOutro)
}

// render follows the template statement by statement.
func (q Qwen3) render(msgs []Msg, tools []string, generationPrompt bool) string {
	var b strings.Builder
	hasSystem := len(msgs) > 0 && msgs[0].Role == "system"
	var system string
	if hasSystem {
		system = msgs[0].Content
	}
	writeQwen3System(&b, system, hasSystem, tools)

	// The last user message that is not a wrapped tool response: assistant
	// turns after it are one multi-step tool call and keep their reasoning.
	lastQuery := len(msgs) - 1
	for i := len(msgs) - 1; i >= 0; i-- {
		c := msgs[i].Content
		if msgs[i].Role == "user" && !(strings.HasPrefix(c, "<tool_response>") && strings.HasSuffix(c, "</tool_response>")) {
			lastQuery = i
			break
		}
	}
	for i, m := range msgs {
		last := i == len(msgs)-1
		switch {
		case m.Role == "user" || (m.Role == "system" && i > 0):
			b.WriteString("<|im_start|>" + m.Role + "\n" + m.Content + "<|im_end|>\n")
		case m.Role == "assistant":
			content, reasoning := splitThink(m.Content)
			b.WriteString("<|im_start|>assistant\n")
			if i > lastQuery && (last || reasoning != "") {
				b.WriteString("<think>\n" + strings.Trim(reasoning, "\n") + "\n</think>\n\n" + strings.TrimLeft(content, "\n"))
			} else {
				b.WriteString(content)
			}
			for j, tc := range m.ToolCalls {
				if j > 0 || content != "" {
					b.WriteString("\n")
				}
				b.WriteString("<tool_call>\n{\"name\": \"" + tc.Name + "\", \"arguments\": " + tc.Arguments + "}\n</tool_call>")
			}
			b.WriteString("<|im_end|>\n")
		case m.Role == "tool":
			if i == 0 || msgs[i-1].Role != "tool" {
				b.WriteString("<|im_start|>user")
			}
			b.WriteString("\n<tool_response>\n" + m.Content + "\n</tool_response>")
			if last || msgs[i+1].Role != "tool" {
				b.WriteString("<|im_end|>\n")
			}
		}
	}
	if generationPrompt {
		b.WriteString(q.generationPrompt())
	}
	return b.String()
}

// splitThink splits an assistant message as the template does: with a
// </think> in it, the reply is what follows the last one and the reasoning
// what precedes the first, after the last <think> before it; otherwise it is
// all reply.
func splitThink(s string) (content, reasoning string) {
	before, _, ok := strings.Cut(s, "</think>")
	if !ok {
		return s, ""
	}
	content = strings.TrimLeft(s[strings.LastIndex(s, "</think>")+len("</think>"):], "\n")
	before = strings.TrimRight(before, "\n")
	if k := strings.LastIndex(before, "<think>"); k >= 0 {
		before = before[k+len("<think>"):]
	}
	return content, strings.TrimLeft(before, "\n")
}
