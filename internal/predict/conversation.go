package predict

import (
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/actloop/actloop/pkg/schema"
)

// HTTPProtocol is the version of the body HTTP posts, its "protocol"
// field. Protocol 1 (a body without the field) was the PredictRequest
// alone; 2 adds last_exit_code, conversation and siblings and keeps every
// field of 1, so a server written for 1 still reads it.
const HTTPProtocol = 2

// Bounds of an HTTPRequest.
const (
	// DefaultMessagesBytes is the default budget of the conversation's
	// tail (the sum of its messages' content bytes).
	DefaultMessagesBytes = 64 << 10
	// MaxMessagesBytes is the largest budget allowed.
	MaxMessagesBytes = 4 << 20
	// MaxSiblings bounds each of Siblings' lists.
	MaxSiblings = 256
	// MaxHTTPRequestBytes bounds the JSON of an HTTPRequest: the tail at
	// its largest budget, escaped, and everything else.
	MaxHTTPRequestBytes = 8*MaxMessagesBytes + 1<<20
)

// ErrBadRequest: a body is not an HTTPRequest (DecodeHTTPRequest).
var ErrBadRequest = errors.New("bad prediction request")

// HTTPRequest is the body HTTP posts to a model server: every field of
// the PredictRequest as predictor-gw got it, and what predictor-gw reads
// of the trajectory and its group besides.
type HTTPRequest struct {
	schema.PredictRequest
	Protocol int `json:"protocol"`
	// LastExitCode is the exit code of the last command whose observation
	// the model has read; null before the first (PredictRequest's
	// exit_code is 0 then, and omitted when 0).
	LastExitCode *int `json:"last_exit_code"`
	// Conversation is null when the trajectory is not in the store (a
	// waiting sample: see task) or predictor-gw does not read the store.
	Conversation *Conversation `json:"conversation"`
	// Siblings is null without a group_id or when predictor-gw does not
	// read Redis.
	Siblings *Siblings `json:"siblings"`
}

// Conversation is the trajectory's conversation as of the request (up to
// and with its turns-th reply), bounded: its newest messages whose
// contents fit the budget, and what was left out of it.
type Conversation struct {
	// Messages is the tail, oldest first.
	Messages []schema.Message `json:"messages"`
	// OmittedMessages counts the messages before the tail, left out whole.
	OmittedMessages int `json:"omitted_messages"`
	// OmittedTokens is the tokens of everything left out: context_tokens
	// less the tail's tokens as the chat template encodes them (with no
	// context_tokens, the left-out part encoded).
	OmittedTokens int `json:"omitted_tokens"`
	// CutBytes is how many bytes the first message's content lost at its
	// start: the newest message alone was over the budget, and the tail is
	// its end. 0 otherwise.
	CutBytes int `json:"cut_bytes"`
}

// Siblings is the progress of the trajectory's group siblings as far as
// predictor-gw knows it.
type Siblings struct {
	// Finished holds the totals of the siblings that completed (a
	// trainable result; fallbacks are not counted), newest first.
	Finished []SiblingTotal `json:"finished"`
	// Running holds, by traj_id, the progress of the siblings predicted for
	// after a model call and without a result yet, as of their latest
	// request.
	Running []SiblingProgress `json:"running"`
}

// SiblingTotal is a finished sibling's totals.
type SiblingTotal struct {
	GenTokens int `json:"gen_tokens"`
	Turns     int `json:"turns"`
}

// SiblingProgress is a running sibling's progress.
type SiblingProgress struct {
	TrajID    string `json:"traj_id"`
	GenTokens int    `json:"gen_tokens"`
	Turns     int    `json:"turns"`
}

// AsAsked returns msgs as they were when a request after turns model calls
// was made: up to and with the turns-th assistant message (with turns 0,
// the messages before the first). The store may hold more: the command's
// observation can land before predictor-gw reads it.
func AsAsked(msgs []schema.Message, turns int) []schema.Message {
	seen := 0
	for i, m := range msgs {
		if m.Role != schema.RoleAssistant {
			continue
		}
		if seen == turns {
			return msgs[:i]
		}
		seen++
		if seen == turns {
			return msgs[:i+1]
		}
	}
	return msgs
}

// Tail returns the newest messages of msgs whose contents add up to at
// most maxBytes, oldest first, and how many messages before them are left
// out whole. When the newest message alone is over maxBytes the tail is
// that message with its content's start cut: cut bytes, at a character
// boundary, so the rest is at most maxBytes. maxBytes <= 0 leaves every
// message out.
func Tail(msgs []schema.Message, maxBytes int) (tail []schema.Message, omitted, cut int) {
	if maxBytes <= 0 || len(msgs) == 0 {
		return nil, len(msgs), 0
	}
	start, size := len(msgs), 0
	for start > 0 && size+len(msgs[start-1].Content) <= maxBytes {
		start--
		size += len(msgs[start].Content)
	}
	if start < len(msgs) {
		return slices.Clone(msgs[start:]), start, 0
	}
	last := msgs[len(msgs)-1]
	cut = len(last.Content) - maxBytes
	for cut < len(last.Content) && !utf8.RuneStart(last.Content[cut]) {
		cut++
	}
	return []schema.Message{{Role: last.Role, Content: last.Content[cut:]}}, len(msgs) - 1, cut
}

// ConversationOf is the Conversation of a request after turns model calls
// whose context holds contextTokens (0: unknown), from the stored msgs,
// bounded by maxBytes; tokens counts a message's tokens as the chat
// template encodes it.
func ConversationOf(msgs []schema.Message, turns, contextTokens, maxBytes int, tokens func(schema.Message) int) Conversation {
	msgs = AsAsked(msgs, turns)
	tail, omitted, cut := Tail(msgs, maxBytes)
	c := Conversation{Messages: tail, OmittedMessages: omitted, CutBytes: cut}
	if c.Messages == nil {
		c.Messages = []schema.Message{}
	}
	if contextTokens > 0 {
		rest := contextTokens
		for _, m := range tail {
			rest -= tokens(m)
		}
		c.OmittedTokens = max(rest, 0)
		return c
	}
	for _, m := range msgs[:omitted] {
		c.OmittedTokens += tokens(m)
	}
	if cut > 0 {
		last := msgs[len(msgs)-1]
		c.OmittedTokens += max(tokens(last)-tokens(tail[0]), 0)
	}
	return c
}

// LastExitCode is an HTTPRequest's last_exit_code for req: its exit_code
// once a command's observation is in the conversation (obs_tokens > 0).
func LastExitCode(req schema.PredictRequest) *int {
	if req.ObsTokens <= 0 {
		return nil
	}
	e := req.ExitCode
	return &e
}

// DecodeHTTPRequest decodes and checks an HTTPRequest, as a model server
// written in Go reads it: its schema version "v" as schema.Decode checks
// it, then Validate. Unknown fields are ignored (a later protocol may
// add some); every error wraps ErrBadRequest and names the field.
func DecodeHTTPRequest(b []byte) (HTTPRequest, error) {
	if len(b) > MaxHTTPRequestBytes {
		return HTTPRequest{}, fmt.Errorf("%w: %d bytes, more than %d", ErrBadRequest, len(b), MaxHTTPRequestBytes)
	}
	r, err := schema.Decode[HTTPRequest](b) // checks "v", then r.Validate
	if err != nil && !errors.Is(err, ErrBadRequest) {
		return HTTPRequest{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	return r, err
}

// Validate checks r; an error wraps ErrBadRequest and names the field.
func (r *HTTPRequest) Validate() error {
	bad := func(field, format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrBadRequest, field, fmt.Sprintf(format, a...))
	}
	if err := r.PredictRequest.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if r.Protocol < 0 || r.Protocol > HTTPProtocol {
		return bad("protocol", "want 1 to %d (or none, for 1), got %d", HTTPProtocol, r.Protocol)
	}
	if c := r.Conversation; c != nil {
		size := 0
		for i, m := range c.Messages {
			if m.Role == "" {
				return bad(fmt.Sprintf("conversation.messages[%d].role", i), "missing")
			}
			size += len(m.Content)
		}
		if size > MaxMessagesBytes {
			return bad("conversation.messages", "contents of %d bytes, more than %d", size, MaxMessagesBytes)
		}
		for _, f := range []struct {
			name string
			v    int
		}{{"omitted_messages", c.OmittedMessages}, {"omitted_tokens", c.OmittedTokens}, {"cut_bytes", c.CutBytes}} {
			if f.v < 0 {
				return bad("conversation."+f.name, "must be >= 0, got %d", f.v)
			}
		}
		if c.CutBytes > 0 && len(c.Messages) == 0 {
			return bad("conversation.cut_bytes", "%d with no message to have cut", c.CutBytes)
		}
	}
	if s := r.Siblings; s != nil {
		if len(s.Finished) > MaxSiblings || len(s.Running) > MaxSiblings {
			return bad("siblings", "more than %d finished or running (%d, %d)", MaxSiblings, len(s.Finished), len(s.Running))
		}
		for i, f := range s.Finished {
			if f.GenTokens < 0 || f.Turns < 1 {
				return bad(fmt.Sprintf("siblings.finished[%d]", i), "want gen_tokens >= 0 and turns >= 1, got %d and %d", f.GenTokens, f.Turns)
			}
		}
		for i, p := range s.Running {
			if !schema.ValidID(p.TrajID) {
				return bad(fmt.Sprintf("siblings.running[%d].traj_id", i), "invalid id %q", clip(p.TrajID, 80))
			}
			if p.GenTokens < 0 || p.Turns < 0 {
				return bad(fmt.Sprintf("siblings.running[%d]", i), "want gen_tokens and turns >= 0, got %d and %d", p.GenTokens, p.Turns)
			}
		}
	}
	return nil
}
