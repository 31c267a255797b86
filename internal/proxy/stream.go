package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/actloop/actloop/internal/agent"
	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/pkg/schema"
)

// Call is what one chat call sends: its messages (developer messages read
// as system ones) and its tools.
type Call struct {
	Messages []schema.PromptMessage
	Tools    []json.RawMessage
}

// Step is what one call adds to the token stream, from Conversation.Next or
// NextIDs, before its generation.
type Step struct {
	// Append are the ids the call appends to the stream, none of them
	// generated (loss mask 0): the continuation of the current segment, or
	// the whole of a new one when NewSegment.
	Append []int32
	// NewSegment says the call starts a new segment; Reason says why
	// ("first call", "tools changed", "message 3 differs"…).
	NewSegment bool
	Reason     string
	// Prompt is the generation's input: the segment with Append.
	Prompt []int32
	// From is the index of the first message the call adds to the
	// conversation: those after the previous reply, or 0 for a new segment
	// (all of them).
	From int

	chat bool // a chat call (Next), not a text completion (NextIDs)
}

// Conversation is one trajectory's calls as one token stream, cut into
// segments where the agent rewrote its history. It keeps what the agent
// sent last, the reply it was given and the ids of the current segment;
// doc.go states the rule. It does no I/O and is not safe for concurrent
// use (one trajectory's calls come one at a time).
type Conversation struct {
	chat      bool                   // the last call committed was a chat call
	msgs      []schema.PromptMessage // its messages
	tools     [][]byte               // its tools, compacted
	reply     schema.PromptMessage   // the reply as returned, an assistant message
	generated []int32                // the reply's ids
	segment   []int32                // the current segment's ids, the reply's included
	segments  int
}

// Segment returns the ids of the current segment (nil before the first
// commit); the caller must not change them.
func (c *Conversation) Segment() []int32 { return c.segment }

// Segments returns how many segments the stream has had.
func (c *Conversation) Segments() int { return c.segments }

// Next returns what chat call call adds to the stream under tmpl, without
// changing c: Commit records it once its generation is done, so a call
// whose generation fails can be made again. An error is the chat
// template's: messages with tools or tool calls under a template that
// renders none (agent.ErrMessagesNeedToolTemplate), or a model template
// that refuses the messages.
func (c *Conversation) Next(call Call, tmpl tokenize.ChatTemplate) (Step, error) {
	reason, from := c.continues(call)
	if reason == "" {
		ids, why, err := continuation(tmpl, c.generated, call.Messages[from:], from)
		if err != nil {
			return Step{}, err
		}
		if why == "" {
			return Step{Append: ids, Prompt: concat(c.segment, ids), From: from, chat: true}, nil
		}
		reason = why
	}
	_, ids, err := agent.MessagesOpening(tmpl, call.Messages, call.Tools)
	if err != nil {
		return Step{}, fmt.Errorf("render the conversation: %w", err)
	}
	return Step{Append: ids, NewSegment: true, Reason: reason, Prompt: ids, chat: true}, nil
}

// continues returns "" and the index of the first new message when call
// continues the stream, else the reason it does not.
func (c *Conversation) continues(call Call) (string, int) {
	switch {
	case c.segments == 0:
		return "first call", 0
	case !c.chat:
		return "the previous call was a text completion", 0
	case !sameTools(c.tools, call.Tools):
		return "tools changed", 0
	}
	n := len(c.msgs)
	for i, m := range c.msgs[:min(n, len(call.Messages))] {
		if !sameMessage(m, call.Messages[i]) {
			return fmt.Sprintf("message %d differs", i), 0
		}
	}
	if len(call.Messages) > n && !sameMessage(c.reply, call.Messages[n]) {
		return fmt.Sprintf("message %d is not the reply as returned", n), 0
	}
	if len(call.Messages) <= n+1 {
		return fmt.Sprintf("%d messages do not extend the previous call's %d and its reply", len(call.Messages), n), 0
	}
	return "", n + 1
}

// continuation renders the messages that follow a reply: the template's
// close of the reply's turn, each message (consecutive tool messages as
// one ToolResults turn) and the generation prompt. at is the index of
// msgs[0] in the call, for the reason it gives when a message cannot be
// appended turn by turn: an assistant message with tool calls the model did
// not generate, which the template renders only in a whole conversation.
func continuation(tmpl tokenize.ChatTemplate, generated []int32, msgs []schema.PromptMessage, at int) ([]int32, string, error) {
	ids := slices.Clone(tmpl.CloseTurn(generated))
	for i := 0; i < len(msgs); i++ {
		m := msgs[i]
		switch {
		case m.Role == schema.RoleTool:
			tt, ok := tmpl.(tokenize.ToolTemplate)
			if !ok {
				return nil, "", agent.ErrMessagesNeedToolTemplate
			}
			results := []string{m.Content}
			for i+1 < len(msgs) && msgs[i+1].Role == schema.RoleTool {
				i++
				results = append(results, msgs[i].Content)
			}
			ids = append(ids, tt.ToolResults(results...)...)
		case len(m.ToolCalls) > 0:
			return nil, fmt.Sprintf("message %d is an assistant message with tool calls the model did not generate", at+i), nil
		default:
			ids = append(ids, tmpl.Message(m.Role, m.Content)...)
		}
	}
	return append(ids, tmpl.GenerationPrompt()...), "", nil
}

// Commit records step, made by Next (for call) or NextIDs (call is then
// ignored), and its reply r: the stream's segment becomes step.Prompt
// followed by r.IDs.
func (c *Conversation) Commit(step Step, call Call, r Reply) {
	if step.NewSegment {
		c.segments++
	}
	c.segment = concat(step.Prompt, r.IDs)
	c.generated = slices.Clone(r.IDs)
	c.chat = step.chat
	if !step.chat {
		c.msgs, c.tools, c.reply = nil, nil, schema.PromptMessage{}
		return
	}
	c.msgs = slices.Clone(call.Messages)
	c.tools = compactAll(call.Tools)
	c.reply = r.Message()
}

// NextIDs returns what a text completion whose prompt is ids adds to the
// stream, without changing c: the rest of ids when they start with the
// current segment (the previous prompt and its reply, token for token),
// else a new segment of ids.
func (c *Conversation) NextIDs(ids []int32) Step {
	switch {
	case c.segments == 0:
		return Step{Append: slices.Clone(ids), NewSegment: true, Reason: "first call", Prompt: slices.Clone(ids)}
	case len(ids) < len(c.segment):
		return Step{Append: slices.Clone(ids), NewSegment: true, Prompt: slices.Clone(ids),
			Reason: fmt.Sprintf("the prompt's %d tokens are fewer than the segment's %d", len(ids), len(c.segment))}
	}
	for i, id := range c.segment {
		if ids[i] != id {
			return Step{Append: slices.Clone(ids), NewSegment: true, Prompt: slices.Clone(ids),
				Reason: fmt.Sprintf("the prompt differs from the segment at token %d", i)}
		}
	}
	return Step{Append: slices.Clone(ids[len(c.segment):]), Prompt: slices.Clone(ids)}
}

// NextText is NextIDs of a prompt given as text, encoded by tmpl's
// tokenizer (special-token text as the special token, as the server's
// tokenizer reads a prompt). A prompt that re-encodes a reply's text
// differently from the ids generated starts a new segment.
func (c *Conversation) NextText(prompt string, tmpl tokenize.ChatTemplate) Step {
	return c.NextIDs(tmpl.Tokenizer().Encode(prompt))
}

// sameMessage compares two messages as the chat template renders them:
// role, content (null read as ""), and tool calls by name and arguments
// (ignoring ids, and the arguments' insignificant white space). A tool
// message's tool_call_id and a message's name are not rendered, and not
// compared; neither is an assistant message's reasoning_content, which
// the agent may send back or not.
func sameMessage(a, b schema.PromptMessage) bool {
	if a.Role != b.Role || a.Content != b.Content || len(a.ToolCalls) != len(b.ToolCalls) {
		return false
	}
	for i, x := range a.ToolCalls {
		y := b.ToolCalls[i]
		if x.Function.Name != y.Function.Name || !sameJSON(x.Function.Arguments, y.Function.Arguments) {
			return false
		}
	}
	return true
}

// sameJSON compares two JSON texts with insignificant white space
// removed; a text that is not JSON compares as it is.
func sameJSON(a, b string) bool {
	if a == b {
		return true
	}
	return bytes.Equal(compact([]byte(a)), compact([]byte(b)))
}

func compact(b []byte) []byte {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return b
	}
	return buf.Bytes()
}

func compactAll(tools []json.RawMessage) [][]byte {
	out := make([][]byte, len(tools))
	for i, t := range tools {
		out[i] = bytes.Clone(compact(t))
	}
	return out
}

func sameTools(have [][]byte, tools []json.RawMessage) bool {
	if len(have) != len(tools) {
		return false
	}
	for i, t := range tools {
		if !bytes.Equal(have[i], compact(t)) {
			return false
		}
	}
	return true
}

func concat(a, b []int32) []int32 {
	out := make([]int32, 0, len(a)+len(b))
	return append(append(out, a...), b...)
}
