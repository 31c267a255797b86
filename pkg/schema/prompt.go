package schema

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Bounds of a sample's prompt given as messages or token ids. A task is
// bounded by MaxTaskBytes; a sample as a whole by MaxSampleBytes.
const (
	// MaxPromptMessages bounds how many messages a sample's messages lists:
	// a conversation of a few thousand turns is past any opening a trainer
	// gives.
	MaxPromptMessages = 4096
	// MaxMessagesBytes bounds the text of a sample's messages (every
	// content and every tool call's arguments, summed), as MaxTaskBytes
	// bounds a task.
	MaxMessagesBytes = MaxTaskBytes
	// MaxTools bounds how many tool definitions a sample's tools lists.
	MaxTools = 128
	// MaxPromptIDs bounds how many token ids a sample's prompt_ids lists:
	// 64 Ki tokens, whose JSON (ids below 1,000,000 take at most 7 bytes
	// each, comma included) leaves room within MaxSampleBytes for the rest
	// of the sample. A longer opening does not fit one sample.
	MaxPromptIDs = 1 << 16
)

// PromptMessage is one message of a sample's prompt (Sample.Messages), in
// the OpenAI chat format. A trajectory's result carries each as a Message,
// its role and content; its tool calls are in the result's tokens, as the
// chat template rendered them.
type PromptMessage struct {
	Role string `json:"role" jsonschema:"required"`
	// Content is the message's text; JSON null reads as "".
	Content string `json:"content"`
	// ToolCalls are an assistant message's function calls.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID is the call a tool message answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// Name is the author's or the tool's name, as OpenAI's messages may
	// carry it; chat templates mostly ignore it.
	Name string `json:"name,omitempty"`
}

// ToolCall is one function call of an assistant message, OpenAI's
// {"id", "type": "function", "function": {"name", "arguments"}}.
type ToolCall struct {
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function FunctionCall `json:"function" jsonschema:"required"`
}

// FunctionCall is a ToolCall's function: its name and its arguments as
// JSON text, as the model wrote them.
type FunctionCall struct {
	Name      string `json:"name" jsonschema:"required"`
	Arguments string `json:"arguments"`
}

// ToolTypeFunction is the one type of tool call and tool definition.
const ToolTypeFunction = "function"

// promptFields names the fields of which a sample sets exactly one.
var promptFields = []string{"task", "messages", "prompt_ids"}

// validPrompt checks that s sets exactly one of Task, Messages and
// PromptIDs, and that one. An empty list counts as unset, as an empty
// task does.
func (s *Sample) validPrompt(p *problems) {
	var set []string
	for i, ok := range []bool{s.Task != "", len(s.Messages) > 0, len(s.PromptIDs) > 0} {
		if ok {
			set = append(set, promptFields[i])
		}
	}
	one := "exactly one of " + strings.Join(promptFields, ", ") + " must be set"
	switch len(set) {
	case 0:
		// Named as the field a sample most often lacks, as before messages
		// and prompt_ids were known.
		p.add("task", "missing (%s; got none)", one)
	default:
		// Named as the fields set beside the first, so that the error
		// names a field as every other does.
		for _, f := range set[1:] {
			p.add(f, "set beside %s (%s)", set[0], one)
		}
	}
	if len(s.Task) > MaxTaskBytes {
		p.add("task", "%d bytes exceeds the limit of %d", len(s.Task), MaxTaskBytes)
	}
	if len(s.Tools) > 0 && len(s.Messages) == 0 {
		p.add("tools", "given without messages (tools go with messages only)")
	}
	s.validMessages(p)
	validTools(p, s.Tools)
	if n := len(s.PromptIDs); n > MaxPromptIDs {
		p.add("prompt_ids", "lists %d ids, more than %d", n, MaxPromptIDs)
	}
	negative := 0
	for i, id := range s.PromptIDs {
		if id >= 0 {
			continue
		}
		if negative == 0 {
			p.add("prompt_ids["+strconv.Itoa(i)+"]", "must be >= 0, got %d", id)
		}
		negative++
	}
	if negative > 1 {
		p.add("prompt_ids", "%d more ids are negative", negative-1)
	}
}

// validMessages checks each of s.Messages, naming it by its index.
func (s *Sample) validMessages(p *problems) {
	ms := s.Messages
	if n := len(ms); n > MaxPromptMessages {
		p.add("messages", "lists %d messages, more than %d", n, MaxPromptMessages)
		return
	}
	total := 0
	for i, m := range ms {
		at := "messages[" + strconv.Itoa(i) + "]"
		total += len(m.Content)
		switch m.Role {
		case RoleSystem, RoleUser, RoleAssistant, RoleTool:
		case "":
			p.add(at+".role", "missing (want %s, %s, %s or %s)", RoleSystem, RoleUser, RoleAssistant, RoleTool)
		default:
			p.add(at+".role", "unknown role %q (want %s, %s, %s or %s)", clip(m.Role), RoleSystem, RoleUser, RoleAssistant, RoleTool)
		}
		if len(m.ToolCalls) > 0 && m.Role != RoleAssistant {
			p.add(at+".tool_calls", "only an assistant message makes tool calls (role is %q)", clip(m.Role))
		}
		if m.ToolCallID != "" && m.Role != RoleTool {
			p.add(at+".tool_call_id", "only a tool message answers a tool call (role is %q)", clip(m.Role))
		}
		for j, c := range m.ToolCalls {
			call := at + ".tool_calls[" + strconv.Itoa(j) + "]"
			total += len(c.Function.Arguments)
			if c.Type != "" && c.Type != ToolTypeFunction {
				p.add(call+".type", "unknown type %q (want %q)", clip(c.Type), ToolTypeFunction)
			}
			if c.Function.Name == "" {
				p.add(call+".function.name", "missing")
			}
			if a := c.Function.Arguments; a != "" && !json.Valid([]byte(a)) {
				p.add(call+".function.arguments", "not valid JSON text (OpenAI's arguments are a JSON string holding the JSON of the arguments)")
			}
		}
	}
	if total > MaxMessagesBytes {
		p.add("messages", "their text (contents and arguments) is %d bytes, more than the limit of %d", total, MaxMessagesBytes)
	}
	if n := len(ms); n > 0 && ms[n-1].Role == RoleAssistant {
		p.add("messages["+strconv.Itoa(n-1)+"].role",
			"the last message is the assistant's, but the model generates next (end with a user, system or tool message)")
	}
}

// validTools checks each tool definition: a JSON object, of type
// "function" when it says, whose function has a name.
func validTools(p *problems, tools []json.RawMessage) {
	if n := len(tools); n > MaxTools {
		p.add("tools", "lists %d tools, more than %d", n, MaxTools)
		return
	}
	for i, raw := range tools {
		at := "tools[" + strconv.Itoa(i) + "]"
		var tool struct {
			Type     *string `json:"type"`
			Function *struct {
				Name *string `json:"name"`
			} `json:"function"`
		}
		if !utf8.Valid(raw) {
			p.add(at, "invalid UTF-8 at byte %d", invalidAt(raw))
			continue
		}
		if err := json.Unmarshal(raw, &tool); err != nil || !isObject(raw) {
			p.add(at, `must be an object {"type": "function", "function": {"name": …, "description": …, "parameters": …}}`)
			continue
		}
		if tool.Type != nil && *tool.Type != ToolTypeFunction {
			p.add(at+".type", "unknown type %q (want %q)", clip(*tool.Type), ToolTypeFunction)
		}
		switch {
		case tool.Function == nil:
			p.add(at+".function", "missing")
		case tool.Function.Name == nil || *tool.Function.Name == "":
			p.add(at+".function.name", "missing")
		}
	}
}

func isObject(raw json.RawMessage) bool {
	s := strings.TrimLeft(string(raw), " \t\r\n")
	return strings.HasPrefix(s, "{")
}
