package tokenize

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/actloop/actloop/internal/chattemplate"
)

// Model is a model's own chat template (chattemplate), as a ChatTemplate.
//
// A trajectory grows by appending turns, so each piece Model returns is a
// delta of the template's rendering (chattemplate's prefix rule): the text
// a message, a generation prompt or the end of a turn appends to the
// rendering of the conversation before it. NewModel computes the pieces
// once, by rendering probe conversations with a marker in place of each
// content, and checks them on the conversations actloop's flows write (a
// system prompt and a task, replies with and without reasoning, user
// observations, and for a template that renders tools, tool calls and tool
// results): the pieces of each must join into exactly the template's
// rendering of the whole conversation. A template whose rendering of
// earlier turns changes as the conversation grows (Qwen3 drops the
// reasoning of replies before the last user message; Gemma 3 folds the
// system prompt into the first user turn) is refused with a *TemplateError,
// holding a chattemplate.PrefixError with the offset where the renderings
// diverge when they do. A template that renders tools but fails the tool
// loop's check is a Model without them. After NewModel, nothing is
// rendered again but a system message with tools (SystemTools, which
// returns the template's error) and whole conversations (Render,
// RenderText, RenderTools), so nothing else a trajectory appends can fail.
type Model struct {
	tmpl   *chattemplate.Template
	name   string
	tok    Tokenizer
	kwargs map[string]any

	begin    string // the bos_token the rendering starts with, or ""
	system   msgPiece
	user     msgPiece
	genPr    string // the generation prompt
	turnEnd  string // the special token that ends an assistant turn
	endID    int32
	close    string // what follows turnEnd before the next message
	stopIDs  []int32
	toolsSet bool // the template renders tools (ModelTools)
	results  msgPiece
}

// msgPiece is a message's text: pre + content + post, content trimmed of
// surrounding white space when the template trims it.
type msgPiece struct {
	pre, post string
	trim      bool
}

func (p msgPiece) text(content string) string {
	if p.trim {
		content = strings.TrimSpace(content)
	}
	return p.pre + content + p.post
}

// ModelTools is a Model whose template renders tools: a ToolTemplate.
type ModelTools struct{ *Model }

var (
	_ ChatTemplate    = (*Model)(nil)
	_ ToolTemplate    = ModelTools{}
	_ CheckedRenderer = (*Model)(nil)
)

// CheckedRenderer is a ChatTemplate whose rendering of a whole
// conversation can fail (a model's own template raises an exception, for
// example on roles that do not alternate), where Render returns "". A
// caller that renders a whole conversation finds it with a type assertion
// and reports the error.
type CheckedRenderer interface {
	RenderText(msgs []Msg, generationPrompt bool) (string, error)
}

// TemplateError is a model's chat template that actloop cannot use turn by
// turn: Name is the template (its model directory), Conversation the probe
// conversation that showed it, and Err why, often a
// *chattemplate.PrefixError with the offset where the renderings diverge.
type TemplateError struct {
	Name, Conversation string
	Err                error
}

func (e *TemplateError) Error() string {
	return fmt.Sprintf("chat template of %s, %s: %v", e.Name, e.Conversation, e.Err)
}

func (e *TemplateError) Unwrap() error { return e.Err }

// Probe contents. Markers are plain ASCII that no template transforms; the
// padded one shows whether a template trims content.
const (
	probeMark      = "ACTLOOPPROBEMARK"
	probePadded    = " \n" + probeMark + "\n "
	probeSystem    = "You are a helpful assistant."
	probeTask      = "Fix the failing test."
	probeReply     = "I will look at the tests first.\n\n```bash\nls\n```"
	probeThinking  = "<think>\nThe tests live under tests/.\n</think>\n\n" + probeReply
	probeObserved  = "<returncode>0</returncode>\n<output>\ntests\n</output>"
	probeToolName  = "actloop_probe_tool"
	probeToolCalls = `{"command": "ls"}`
)

var probeTool = json.RawMessage(`{"type": "function", "function": {"name": "` + probeToolName +
	`", "description": "Run a command.", "parameters": {"type": "object", "properties": {"command": ` +
	`{"type": "string", "description": "The command."}}, "required": ["command"]}}}`)

// NewModel returns tmpl, the chat template of the model named name (errors
// name it), over tok, rendered with kwargs as extra template variables
// (enable_thinking...). It checks the template's special tokens are single
// tokens of tok and that the template can be used turn by turn; see Model.
func NewModel(name string, tmpl *chattemplate.Template, tok Tokenizer, kwargs map[string]any) (ChatTemplate, error) {
	m := &Model{tmpl: tmpl, name: name, tok: tok, kwargs: kwargs}
	if err := m.checkSpecial(); err != nil {
		return nil, err
	}
	if err := m.derive(); err != nil {
		return nil, err
	}
	if err := m.check(); err != nil {
		return nil, err
	}
	if m.deriveTools() == nil && m.checkTools() == nil {
		m.toolsSet = true
		return ModelTools{m}, nil
	}
	return m, nil
}

// checkSpecial checks the special tokens of the model's configuration
// (bos_token, eos_token, unk_token, pad_token...) are one token each of the
// tokenizer.
func (m *Model) checkSpecial() error {
	special := m.tmpl.SpecialTokens()
	keys := make([]string, 0, len(special))
	for k := range special {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if ids := m.tok.Encode(special[k]); len(ids) != 1 {
			return m.fail("its special tokens", fmt.Errorf("%s %q is %d tokens of the tokenizer, want 1", k, special[k], len(ids)))
		}
	}
	return nil
}

// msg is an OpenAI-format chat message for chattemplate.
func msg(role, content string) map[string]any {
	return map[string]any{"role": role, "content": content}
}

func (m *Model) render(msgs []any, tools []json.RawMessage, gp bool) (string, error) {
	in := chattemplate.Input{Messages: msgs, AddGenerationPrompt: gp, Kwargs: m.kwargs}
	for _, t := range tools {
		in.Tools = append(in.Tools, t)
	}
	return m.tmpl.Render(in)
}

// delta is the text msgs appended to prev add to prev's rendering.
func (m *Model) delta(prev, added []any, tools []json.RawMessage, gp bool) (string, error) {
	have, err := m.render(prev, tools, false)
	if err != nil {
		return "", err
	}
	full, err := m.render(append(append([]any{}, prev...), added...), tools, gp)
	if err != nil {
		return "", err
	}
	return chattemplate.Suffix(have, full)
}

// split finds the marker in text: the piece around it.
func split(text string) (msgPiece, error) {
	pre, post, ok := strings.Cut(text, probeMark)
	if !ok || strings.Contains(post, probeMark) {
		return msgPiece{}, fmt.Errorf("the content does not appear once in %q", text)
	}
	return msgPiece{pre: pre, post: post}, nil
}

// contentPiece derives a message's piece from how render renders the
// marker, plain and padded with white space.
func contentPiece(render func(content string) (string, error)) (msgPiece, error) {
	plain, err := render(probeMark)
	if err != nil {
		return msgPiece{}, err
	}
	p, err := split(plain)
	if err != nil {
		return msgPiece{}, err
	}
	padded, err := render(probePadded)
	if err != nil {
		return msgPiece{}, err
	}
	switch padded {
	case p.pre + probePadded + p.post:
	case plain:
		p.trim = true
	default:
		return msgPiece{}, fmt.Errorf("the template changes content %q into %q", probePadded, padded)
	}
	return p, nil
}

func (m *Model) fail(conversation string, err error) error {
	return &TemplateError{Name: m.name, Conversation: conversation, Err: err}
}

// derive computes the pieces from probe conversations.
func (m *Model) derive() error {
	sys, err := m.render([]any{msg("system", probeMark)}, nil, false)
	if err != nil {
		return m.fail("a system message", err)
	}
	if bos := m.tmpl.BOS(); bos != "" && strings.HasPrefix(sys, bos) {
		m.begin = bos
	}
	if m.system, err = contentPiece(func(c string) (string, error) {
		s, err := m.render([]any{msg("system", c)}, nil, false)
		return strings.TrimPrefix(s, m.begin), err
	}); err != nil {
		return m.fail("a system message", err)
	}
	opening := []any{msg("system", probeSystem)}
	if m.user, err = contentPiece(func(c string) (string, error) {
		return m.delta(opening, []any{msg("user", c)}, nil, false)
	}); err != nil {
		return m.fail("a user message after the system message", err)
	}
	opening = append(opening, msg("user", probeTask))
	if m.genPr, err = m.delta(opening, nil, nil, true); err != nil {
		return m.fail("the generation prompt", err)
	}
	// A reply and the next user message: what the template writes after the
	// reply, before the next user message, ends the turn.
	prompt, err := m.render(opening, nil, true)
	if err != nil {
		return m.fail("the generation prompt", err)
	}
	next, err := m.render(append(append([]any{}, opening...), msg("assistant", probeMark), msg("user", probeTask)), nil, true)
	if err != nil {
		return m.fail("a reply and a user message", err)
	}
	rest, err := chattemplate.Suffix(prompt+probeMark, next)
	if err != nil {
		return m.fail("a reply and a user message", err)
	}
	tail := m.user.text(probeTask) + m.genPr
	after, ok := strings.CutSuffix(rest, tail)
	if !ok {
		return m.fail("a reply and a user message", fmt.Errorf("after the reply it writes %q, which does not end with the user message and generation prompt %q", rest, tail))
	}
	// The turn ends with the longest start of after that is one token.
	for k := len(after); k > 0; k-- {
		if ids := m.tok.Encode(after[:k]); len(ids) == 1 {
			m.turnEnd, m.endID, m.close = after[:k], ids[0], after[k:]
			break
		}
	}
	if m.turnEnd == "" || len(m.turnEnd) < 2 {
		return m.fail("a reply and a user message", fmt.Errorf("no end-of-turn token after the reply (it writes %q)", after))
	}
	m.stopIDs = []int32{m.endID}
	if eos := m.tmpl.EOS(); eos != "" {
		if ids := m.tok.Encode(eos); len(ids) == 1 && ids[0] != m.endID {
			m.stopIDs = append(m.stopIDs, ids[0])
		}
	}
	return nil
}

// check joins the pieces of the bash flow's conversations and compares
// them with the template's renderings.
func (m *Model) check() error {
	for _, reply := range []string{probeReply, probeThinking} {
		msgs := []Msg{{Role: "system", Content: probeSystem}, {Role: "user", Content: probeTask}}
		text := m.begin + m.system.text(probeSystem) + m.user.text(probeTask) + m.genPr
		for _, obs := range []string{probeObserved, probeObserved + "\n"} {
			msgs = append(msgs, Msg{Role: "assistant", Content: reply}, Msg{Role: "user", Content: obs})
			text += reply + m.turnEnd + m.close + m.user.text(obs)
			if err := m.compare(msgs, nil, false, text, "a user message after a reply"); err != nil {
				return err
			}
			text += m.genPr
			if err := m.compare(msgs, nil, true, text, "a generation prompt after a user message"); err != nil {
				return err
			}
		}
	}
	return nil
}

// compare checks text is the rendering of msgs.
func (m *Model) compare(msgs []Msg, tools []json.RawMessage, gp bool, text, what string) error {
	full, err := m.render(openAI(msgs), tools, gp)
	if err != nil {
		return m.fail(what, err)
	}
	if err := sameText(text, full); err != nil {
		return m.fail(what, err)
	}
	return nil
}

// openAI converts msgs to the OpenAI chat format chattemplate renders. A
// tool call's arguments are passed as the JSON object they spell (as
// transformers expects; templates print it with tojson), or as a string
// when they are not JSON.
func openAI(msgs []Msg) []any {
	type function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	type call struct {
		Type     string   `json:"type"`
		Function function `json:"function"`
	}
	type message struct {
		Role      string `json:"role"`
		Content   string `json:"content"`
		ToolCalls []call `json:"tool_calls,omitempty"`
	}
	out := make([]any, len(msgs))
	for i, mm := range msgs {
		o := message{Role: mm.Role, Content: mm.Content}
		for _, c := range mm.ToolCalls {
			args := json.RawMessage(c.Arguments)
			if !json.Valid(args) {
				args, _ = json.Marshal(c.Arguments)
			}
			o.ToolCalls = append(o.ToolCalls, call{Type: "function", Function: function{Name: c.Name, Arguments: args}})
		}
		data, _ := json.Marshal(o) // strings and valid JSON: cannot fail
		out[i] = json.RawMessage(data)
	}
	return out
}

// Tokenizer implements ChatTemplate.
func (m *Model) Tokenizer() Tokenizer { return m.tok }

// Begin implements ChatTemplate: the bos_token when the rendering starts
// with it.
func (m *Model) Begin() []int32 {
	if m.begin == "" {
		return nil
	}
	return m.tok.Encode(m.begin)
}

// Message implements ChatTemplate. A system message is the first message;
// a "tool" message is ToolResults of it when the template renders tools;
// any other role but assistant is rendered as a user message is.
func (m *Model) Message(role, content string) []int32 {
	switch role {
	case "system":
		return m.tok.Encode(m.system.text(content))
	case "assistant":
		return m.tok.Encode(m.genPr + content + m.turnEnd + m.close)
	case "tool":
		if m.toolsSet {
			return m.tok.Encode(m.results.text(content))
		}
	}
	return m.tok.Encode(m.user.text(content))
}

// GenerationPrompt implements ChatTemplate.
func (m *Model) GenerationPrompt() []int32 { return m.tok.Encode(m.genPr) }

// CloseTurn implements ChatTemplate.
func (m *Model) CloseTurn(generated []int32) []int32 {
	if n := len(generated); n > 0 && generated[n-1] == m.endID {
		return m.tok.Encode(m.close)
	}
	return m.tok.Encode(m.turnEnd + m.close)
}

// StopTokenIDs implements ChatTemplate: the end-of-turn token, and the
// eos_token when it is another.
func (m *Model) StopTokenIDs() []int32 { return m.stopIDs }

// Render implements ChatTemplate: the template's own rendering, "" when it
// raises an error.
func (m *Model) Render(msgs []Msg, generationPrompt bool) string {
	s, err := m.render(openAI(msgs), nil, generationPrompt)
	if err != nil {
		return ""
	}
	return s
}

// RenderText is Render with the template's error.
//
// Model implements CheckedRenderer.
func (m *Model) RenderText(msgs []Msg, generationPrompt bool) (string, error) {
	return m.render(openAI(msgs), nil, generationPrompt)
}

// Name is the template's name, its model directory.
func (m *Model) Name() string { return m.name }

// deriveTools computes the tool results' msgPiece, or errors when the
// template does not render tools turn by turn.
func (m *Model) deriveTools() error {
	tools := []json.RawMessage{probeTool}
	opening := []any{msg("system", probeSystem), msg("user", probeTask)}
	s, err := m.render(opening, tools, true)
	if err != nil {
		return err
	}
	if !strings.Contains(s, probeToolName) {
		return errors.New("the template does not list tools")
	}
	call := openAI([]Msg{{Role: "assistant", ToolCalls: []ToolCall{{Name: probeToolName, Arguments: probeToolCalls}}}})
	prev := append(opening, call...)
	p, err := contentPiece(func(c string) (string, error) {
		return m.delta(prev, []any{msg("tool", c)}, tools, false)
	})
	if err != nil {
		return err
	}
	m.results = p
	return nil
}

// checkTools checks the tool-call flow's conversation: system with tools,
// task, a reply calling a tool, its result, the next generation prompt.
func (m *Model) checkTools() error {
	mt := ModelTools{m}
	tools := []json.RawMessage{probeTool}
	sys, err := mt.systemTools(probeSystem, tools)
	if err != nil {
		return err
	}
	msgs := []Msg{{Role: "system", Content: probeSystem}, {Role: "user", Content: probeTask}}
	text := m.begin + sys + m.user.text(probeTask) + m.genPr
	if err := m.compare(msgs, tools, true, text, "the opening with tools"); err != nil {
		return err
	}
	// The reply is the template's own rendering of the call.
	call := Msg{Role: "assistant", Content: "", ToolCalls: []ToolCall{{Name: probeToolName, Arguments: probeToolCalls}}}
	msgs = append(msgs, call, Msg{Role: "tool", Content: probeObserved})
	full, err := m.render(openAI(msgs), tools, true)
	if err != nil {
		return m.fail("a tool result", err)
	}
	rest, err := chattemplate.Suffix(text, full)
	if err != nil {
		return m.fail("a tool result", err)
	}
	reply, _, ok := strings.Cut(rest, m.turnEnd)
	if !ok {
		return m.fail("a tool result", fmt.Errorf("no %s after the tool call in %q", m.turnEnd, rest))
	}
	text += reply + m.turnEnd + m.close + m.results.text(probeObserved) + m.genPr
	return m.compare(msgs, tools, true, text, "a tool result after a tool call")
}

func (m ModelTools) systemTools(system string, tools []json.RawMessage) (string, error) {
	var s string
	var err error
	if system == "" {
		// The system part of a conversation that opens with the task.
		full, err := m.render([]any{msg("user", probeTask)}, tools, false)
		if err != nil {
			return "", err
		}
		user := m.user.text(probeTask)
		s, _ = strings.CutSuffix(full, user)
		if s == full {
			return "", fmt.Errorf("chat template of %s: the rendering with tools %q does not end with the task", m.name, full)
		}
	} else if s, err = m.render([]any{msg("system", system)}, tools, false); err != nil {
		return "", fmt.Errorf("chat template of %s: %w", m.name, err)
	}
	return strings.TrimPrefix(s, m.begin), nil
}

// SystemTools implements ToolTemplate, rendering the template.
func (m ModelTools) SystemTools(system string, tools []json.RawMessage) ([]int32, error) {
	s, err := m.systemTools(system, tools)
	if err != nil {
		return nil, err
	}
	return m.tok.Encode(s), nil
}

// ToolResults implements ToolTemplate.
func (m ModelTools) ToolResults(results ...string) []int32 {
	var b strings.Builder
	for _, r := range results {
		b.WriteString(m.results.text(r))
	}
	return m.tok.Encode(b.String())
}

// RenderTools implements ToolTemplate.
func (m ModelTools) RenderTools(msgs []Msg, tools []json.RawMessage, generationPrompt bool) (string, error) {
	return m.render(openAI(msgs), tools, generationPrompt)
}
