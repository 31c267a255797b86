package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/actloop/actloop/pkg/schema"
)

// The request side of POST /v1/chat/completions, as OpenAI's API reference
// (platform.openai.com/docs/api-reference/chat/create) and vLLM's
// OpenAI-compatible server define it (vllm/entrypoints/openai/protocol.py,
// ChatCompletionRequest, read at commit 0052bed3 of vllm-project/vllm).
//
// Unknown fields are ignored, as vLLM does: its OpenAIBaseModel has
// extra="allow" and only logs "The following fields were present in the
// request but ignored". OpenAI itself answers 400 to an unknown field, but
// agents written against vLLM send its extensions (chat_template_kwargs,
// skip_special_tokens, repetition_penalty…), and refusing them would stop
// such an agent for a field that does not change the token stream. The
// chat template and its kwargs are the deployment's, whatever a request
// asks for.

// Bounds of a request. The messages and tools are bounded by the sample
// limits of pkg/schema (MaxPromptMessages, MaxTools); the body is not bounded
// by MaxMessagesBytes, since an agent's conversation grows with every turn
// past any opening a sample holds.
const (
	// MaxBodyBytes bounds a request body: a 128k-token conversation is
	// about 0.5 MB of text, a 1M-token one a few MB, and JSON escaping can
	// double that.
	MaxBodyBytes = 32 << 20
	// MaxMessages bounds how many messages a chat request lists.
	MaxMessages = schema.MaxPromptMessages
	// MaxTools bounds how many tools a chat request lists.
	MaxTools = schema.MaxTools
	// MaxStops bounds how many stop strings a request lists (OpenAI takes 4;
	// vLLM sets no bound).
	MaxStops = 64
	// MaxPromptTokens bounds a text completion's prompt given as token
	// ids: schema.MaxNewTokens, the longest context windows served.
	MaxPromptTokens = schema.MaxNewTokens
)

// RoleDeveloper is OpenAI's newer name for the system role. Chat templates
// do not know it (Qwen3's renders only system, user, assistant and tool
// messages and would drop it), so it is read as RoleSystem.
const RoleDeveloper = "developer"

// ChatRequest is a decoded POST /v1/chat/completions body.
type ChatRequest struct {
	// Model is the model the request names; the proxy serves one model
	// under any name and answers with this one.
	Model string
	// Messages are the conversation, developer messages as system ones,
	// content given as parts joined as vLLM joins them.
	Messages []schema.PromptMessage
	// Tools are the tool definitions as given, for the chat template.
	Tools []json.RawMessage
	// ToolChoice is "auto" or "none" ("" when absent: auto with tools).
	ToolChoice string
	SamplingFields
	// Stream asks for server-sent events; IncludeUsage for the usage chunk.
	Stream, IncludeUsage bool
	// Logprobs asks for the sampled tokens' log-probabilities.
	Logprobs bool
}

// ParseTools reports whether replies to r are read for tool calls: it
// lists tools and its tool_choice is not "none" (vLLM parses calls only
// then: serving_chat.py).
func (r *ChatRequest) ParseTools() bool { return len(r.Tools) > 0 && r.ToolChoice != "none" }

// Call is what r asks of the token stream: its messages and tools.
func (r *ChatRequest) Call() Call { return Call{Messages: r.Messages, Tools: r.Tools} }

// chatWire is the JSON of a chat request, every field the proxy reads.
type chatWire struct {
	Model               *string         `json:"model"`
	Messages            json.RawMessage `json:"messages"`
	Tools               json.RawMessage `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Logprobs            *bool           `json:"logprobs"`
	TopLogprobs         *int            `json:"top_logprobs"`
	ResponseFormat      json.RawMessage `json:"response_format"`
	commonWire
}

// commonWire holds the fields chat and text completion requests share.
type commonWire struct {
	Temperature      *float64        `json:"temperature"`
	TopP             *float64        `json:"top_p"`
	TopK             *int            `json:"top_k"`
	MinP             *float64        `json:"min_p"`
	MaxTokens        *int            `json:"max_tokens"`
	Stop             json.RawMessage `json:"stop"`
	Seed             *int64          `json:"seed"`
	N                *int            `json:"n"`
	PresencePenalty  *float64        `json:"presence_penalty"`
	FrequencyPenalty *float64        `json:"frequency_penalty"`
	Stream           *bool           `json:"stream"`
	StreamOptions    *struct {
		IncludeUsage *bool `json:"include_usage"`
	} `json:"stream_options"`
}

// DecodeChatRequest decodes and checks a chat completion request body. An
// error is a *RequestError naming the field.
func DecodeChatRequest(body []byte) (*ChatRequest, error) {
	var w chatWire
	if err := decodeBody(body, &w); err != nil {
		return nil, err
	}
	r := &ChatRequest{}
	if w.Model != nil {
		r.Model = *w.Model
	}
	var err error
	if r.Messages, err = decodeMessages(w.Messages); err != nil {
		return nil, err
	}
	if r.Tools, err = decodeTools(w.Tools); err != nil {
		return nil, err
	}
	if r.ToolChoice, err = decodeToolChoice(w.ToolChoice); err != nil {
		return nil, err
	}
	if r.SamplingFields, r.Stream, r.IncludeUsage, err = w.common(); err != nil {
		return nil, err
	}
	if v := w.MaxCompletionTokens; v != nil {
		if *v < 1 {
			return nil, invalid("max_completion_tokens", "must be at least 1, got %d", *v)
		}
		r.MaxTokens = v // max_completion_tokens wins over the deprecated max_tokens
	}
	r.Logprobs = w.Logprobs != nil && *w.Logprobs
	if v := w.TopLogprobs; v != nil {
		switch {
		case *v < 0:
			return nil, invalid("top_logprobs", "must be at least 0, got %d", *v)
		case *v > 0:
			return nil, unsupported("top_logprobs", "%d is not supported: only the sampled tokens' log-probabilities are returned (top_logprobs 0)", *v)
		}
	}
	if err := checkResponseFormat(w.ResponseFormat); err != nil {
		return nil, err
	}
	return r, nil
}

// decodeBody unmarshals a request body into w, which must be a JSON object.
func decodeBody(body []byte, w any) error {
	if len(body) > MaxBodyBytes {
		return invalid("", "the body is %d bytes, more than the limit of %d (MaxBodyBytes)", len(body), MaxBodyBytes)
	}
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return invalid("", "the body must be a JSON object")
	}
	return jsonErr("", json.Unmarshal(body, w))
}

// jsonErr turns encoding/json's error into a *RequestError under prefix.
func jsonErr(prefix string, err error) error {
	if err == nil {
		return nil
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		// encoding/json names a promoted field by its embedded struct too.
		field := strings.ReplaceAll(te.Field, "commonWire.", "")
		return invalid(joinPath(prefix, field), "must be %s, got %s", typeName(te.Type.Kind().String()), te.Value)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return invalid(prefix, "not valid JSON at byte %d: %v", se.Offset, se)
	}
	return invalid(prefix, "%v", err)
}

func typeName(kind string) string {
	switch kind {
	case "int", "int32", "int64":
		return "an integer"
	case "float64":
		return "a number"
	case "bool":
		return "a boolean"
	case "string":
		return "a string"
	case "ptr", "struct", "map":
		return "an object"
	case "slice":
		return "an array"
	}
	return "a " + kind
}

func joinPath(prefix, field string) string {
	switch {
	case prefix == "":
		return field
	case field == "":
		return prefix
	}
	return prefix + "." + field
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}

// common checks the shared fields: the sampling fields, n, the penalties
// and the stream options.
func (w *commonWire) common() (s SamplingFields, stream, usage bool, err error) {
	if v := w.N; v != nil && *v != 1 {
		return s, false, false, unsupported("n", "%d is not supported: one choice per request (n 1)", *v)
	}
	for _, p := range []struct {
		name string
		v    *float64
	}{{"presence_penalty", w.PresencePenalty}, {"frequency_penalty", w.FrequencyPenalty}} {
		if p.v != nil && *p.v != 0 {
			return s, false, false, unsupported(p.name, "%v is not supported: only 0", *p.v)
		}
	}
	stream = w.Stream != nil && *w.Stream
	if w.StreamOptions != nil {
		if !stream {
			// vLLM's words (validate_stream_options).
			return s, false, false, invalid("stream_options", "Stream options can only be defined when `stream=True`.")
		}
		usage = w.StreamOptions.IncludeUsage != nil && *w.StreamOptions.IncludeUsage
	}
	s = SamplingFields{Temperature: w.Temperature, TopP: w.TopP, TopK: w.TopK, MinP: w.MinP, MaxTokens: w.MaxTokens, Seed: w.Seed}
	if s.Stop, err = decodeStop(w.Stop); err != nil {
		return s, false, false, err
	}
	return s, stream, usage, s.check()
}

// decodeStop reads stop: a string, a list of strings, or null.
func decodeStop(raw json.RawMessage) ([]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		if one == "" {
			return nil, invalid("stop", "must not be empty")
		}
		return []string{one}, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, invalid("stop", "must be a string or a list of strings")
	}
	if len(list) > MaxStops {
		return nil, invalid("stop", "lists %d strings, more than the limit of %d (MaxStops)", len(list), MaxStops)
	}
	for i, s := range list {
		if s == "" {
			return nil, invalid("stop["+strconv.Itoa(i)+"]", "must not be empty")
		}
	}
	return list, nil
}

// messageWire is one chat message (ChatCompletionMessageParam).
type messageWire struct {
	Role       *string         `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  json.RawMessage `json:"tool_calls"`
	ToolCallID *string         `json:"tool_call_id"`
	Name       *string         `json:"name"`
}

type toolCallWire struct {
	ID       *string `json:"id"`
	Type     *string `json:"type"`
	Function *struct {
		Name      *string `json:"name"`
		Arguments *string `json:"arguments"`
	} `json:"function"`
}

// decodeMessages reads messages, naming each by its index.
func decodeMessages(raw json.RawMessage) ([]schema.PromptMessage, error) {
	if isNull(raw) {
		return nil, invalid("messages", "missing")
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, invalid("messages", "must be an array of messages")
	}
	switch n := len(list); {
	case n == 0:
		return nil, invalid("messages", "must list at least one message")
	case n > MaxMessages:
		return nil, invalid("messages", "lists %d messages, more than the limit of %d (MaxMessages)", n, MaxMessages)
	}
	out := make([]schema.PromptMessage, len(list))
	for i, m := range list {
		var err error
		if out[i], err = decodeMessage("messages["+strconv.Itoa(i)+"]", m); err != nil {
			return nil, err
		}
	}
	if last := len(out) - 1; out[last].Role == schema.RoleAssistant {
		return nil, unsupported("messages["+strconv.Itoa(last)+"].role",
			"the last message is the assistant's, and continuing it is not supported: end with a user, system or tool message")
	}
	return out, nil
}

func decodeMessage(at string, raw json.RawMessage) (schema.PromptMessage, error) {
	var m schema.PromptMessage
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		return m, invalid(at, "must be an object")
	}
	var w messageWire
	if err := json.Unmarshal(raw, &w); err != nil {
		return m, jsonErr(at, err)
	}
	if w.Role == nil {
		return m, invalid(at+".role", "missing")
	}
	switch r := *w.Role; r {
	case schema.RoleSystem, schema.RoleUser, schema.RoleAssistant, schema.RoleTool:
		m.Role = r
	case RoleDeveloper:
		m.Role = schema.RoleSystem
	default:
		return m, invalid(at+".role", "unknown role %q (want system, developer, user, assistant or tool)", clip(r))
	}
	var err error
	if m.Content, err = decodeContent(at+".content", w.Content); err != nil {
		return m, err
	}
	var calls []json.RawMessage
	if !isNull(w.ToolCalls) {
		if err := json.Unmarshal(w.ToolCalls, &calls); err != nil {
			return m, invalid(at+".tool_calls", "must be an array of tool calls")
		}
	}
	if len(calls) > 0 && m.Role != schema.RoleAssistant {
		return m, invalid(at+".tool_calls", "only an assistant message makes tool calls (role is %q)", m.Role)
	}
	for j, raw := range calls {
		call := at + ".tool_calls[" + strconv.Itoa(j) + "]"
		var c toolCallWire
		if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
			return m, invalid(call, `must be an object {"id": …, "type": "function", "function": {"name": …, "arguments": …}}`)
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return m, jsonErr(call, err)
		}
		if c.Type != nil && *c.Type != schema.ToolTypeFunction {
			return m, invalid(call+".type", "unknown type %q (want %q)", clip(*c.Type), schema.ToolTypeFunction)
		}
		if c.Function == nil {
			return m, invalid(call+".function", "missing")
		}
		if c.Function.Name == nil || *c.Function.Name == "" {
			return m, invalid(call+".function.name", "missing")
		}
		tc := schema.ToolCall{Type: schema.ToolTypeFunction, Function: schema.FunctionCall{Name: *c.Function.Name}}
		if c.ID != nil {
			tc.ID = *c.ID
		}
		if c.Function.Arguments != nil {
			tc.Function.Arguments = *c.Function.Arguments
		}
		m.ToolCalls = append(m.ToolCalls, tc)
	}
	if w.ToolCallID != nil {
		if m.Role != schema.RoleTool {
			return m, invalid(at+".tool_call_id", "only a tool message answers a tool call (role is %q)", m.Role)
		}
		m.ToolCallID = *w.ToolCallID
	}
	if w.Name != nil {
		m.Name = *w.Name
	}
	return m, nil
}

// decodeContent reads a message's content: null, a string, or an array of
// {"type": "text", "text": …} parts, joined with "\n" as vLLM joins text
// parts for a chat template that takes string content
// (vllm/entrypoints/chat_utils.py, _parse_chat_message_content_parts).
func decodeContent(at string, raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", invalid(at, "must be a string, an array of content parts, or null")
	}
	texts := make([]string, len(parts))
	for j, p := range parts {
		part := at + "[" + strconv.Itoa(j) + "]"
		var w struct {
			Type *string `json:"type"`
			Text *string `json:"text"`
		}
		if t := bytes.TrimSpace(p); len(t) == 0 || t[0] != '{' {
			return "", invalid(part, `must be an object {"type": "text", "text": …}`)
		}
		if err := json.Unmarshal(p, &w); err != nil {
			return "", jsonErr(part, err)
		}
		switch {
		case w.Type == nil:
			return "", invalid(part+".type", "missing")
		case *w.Type != "text":
			return "", unsupported(part+".type", "%q is not supported: only text parts", clip(*w.Type))
		case w.Text == nil:
			return "", invalid(part+".text", "missing")
		}
		texts[j] = *w.Text
	}
	return strings.Join(texts, "\n"), nil
}

// decodeTools reads tools: each {"type": "function", "function": {"name",
// "description", "parameters"}} (ChatCompletionToolsParam), kept as given
// for the chat template.
func decodeTools(raw json.RawMessage) ([]json.RawMessage, error) {
	if isNull(raw) {
		return nil, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, invalid("tools", "must be an array of tools")
	}
	if n := len(list); n > MaxTools {
		return nil, invalid("tools", "lists %d tools, more than the limit of %d (MaxTools)", n, MaxTools)
	}
	for i, t := range list {
		at := "tools[" + strconv.Itoa(i) + "]"
		if b := bytes.TrimSpace(t); len(b) == 0 || b[0] != '{' {
			return nil, invalid(at, `must be an object {"type": "function", "function": {"name": …, "description": …, "parameters": …}}`)
		}
		var w struct {
			Type     *string `json:"type"`
			Function *struct {
				Name        *string         `json:"name"`
				Description *string         `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
			} `json:"function"`
		}
		if err := json.Unmarshal(t, &w); err != nil {
			return nil, jsonErr(at, err)
		}
		switch {
		case w.Type != nil && *w.Type != schema.ToolTypeFunction:
			return nil, unsupported(at+".type", "%q is not supported (want %q)", clip(*w.Type), schema.ToolTypeFunction)
		case w.Function == nil:
			return nil, invalid(at+".function", "missing")
		case w.Function.Name == nil || *w.Function.Name == "":
			return nil, invalid(at+".function.name", "missing")
		}
		if p := bytes.TrimSpace(w.Function.Parameters); !isNull(p) && p[0] != '{' {
			return nil, invalid(at+".function.parameters", "must be an object (a JSON Schema)")
		}
	}
	return list, nil
}

// decodeToolChoice reads tool_choice: "auto" and "none" are served;
// "required" and a named function are not (vLLM forces them with guided
// decoding, which the generation step here does not run).
func decodeToolChoice(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		if t := bytes.TrimSpace(raw); t[0] == '{' {
			return "", unsupported("tool_choice", "a named function is not supported: use \"auto\" or \"none\"")
		}
		return "", invalid("tool_choice", `must be "auto", "none", "required" or a named function`)
	}
	switch s {
	case "auto", "none":
		return s, nil
	case "required":
		return "", unsupported("tool_choice", `"required" is not supported: use "auto" or "none"`)
	}
	return "", invalid("tool_choice", `unknown value %q (want "auto" or "none")`, clip(s))
}

// checkResponseFormat accepts no response_format or {"type": "text"}:
// structured output needs guided decoding, which is not run here.
func checkResponseFormat(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var w struct {
		Type *string `json:"type"`
	}
	if t := bytes.TrimSpace(raw); t[0] != '{' {
		return invalid("response_format", `must be an object {"type": …}`)
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return jsonErr("response_format", err)
	}
	switch {
	case w.Type == nil:
		return invalid("response_format.type", "missing")
	case *w.Type != "text":
		return unsupported("response_format.type", "%q is not supported: only \"text\"", clip(*w.Type))
	}
	return nil
}

// clip shortens a value quoted in an error.
func clip(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return fmt.Sprintf("%s… (%d bytes)", strings.ToValidUTF8(s[:max], ""), len(s))
}
