package proxy

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/pkg/llm"
	"github.com/actloop/actloop/pkg/schema"
)

// Reply is one generation read as an answer: its ids as the server
// returned them (the stop token included; they go into the stream as
// they are, never re-tokenized) and its text split as the request's
// parsers split it.
type Reply struct {
	IDs      []int32
	Logprobs []float32
	Finish   llm.Finish
	// Text is the ids' decoding without the trailing stop token (as a
	// server that skips special tokens writes it) and without a matched
	// stop string (as vLLM's include_stop_str_in_output=false), invalid
	// UTF-8 replaced with U+FFFD.
	Text string
	// Reasoning and Content are Text split by the parsers (nil where
	// there is none); Calls the tool calls read from the content.
	Reasoning, Content *string
	Calls              []schema.FunctionCall

	tokens []string // each id's text, for log-probabilities
}

// ForRequest returns p for req: without tool parsing when req lists no
// tools or its tool_choice is "none".
func (p Parsers) ForRequest(req *ChatRequest) Parsers {
	if !req.ParseTools() {
		p.Tools = nil
	}
	return p
}

// ParseChatReply reads res as a chat reply under tmpl with parsers p
// (Parsers.ForRequest). An aborted generation is ErrAborted.
func ParseChatReply(tmpl tokenize.ChatTemplate, res llm.Result, p Parsers) (Reply, error) {
	r, err := ParseTextReply(tmpl, res)
	if err != nil {
		return r, err
	}
	content := &r.Text
	if p.Reasoning != nil {
		r.Reasoning, content = p.Reasoning.SplitReasoning(r.Text)
	}
	if p.Tools != nil && content != nil {
		if c, calls, ok := p.Tools.ParseToolCalls(*content); ok {
			content, r.Calls = c, calls
		}
	}
	if content != nil && *content == "" {
		content = nil
	}
	r.Content = content
	return r, nil
}

// ParseTextReply reads res as a text completion under tmpl: its text, no
// parsing. An aborted generation is ErrAborted.
func ParseTextReply(tmpl tokenize.ChatTemplate, res llm.Result) (Reply, error) {
	if res.Finish.Type == llm.FinishAbort {
		return Reply{}, ErrAborted
	}
	r := Reply{IDs: slices.Clone(res.OutputIDs), Logprobs: slices.Clone(res.Logprobs), Finish: res.Finish}
	tok := tmpl.Tokenizer()
	ids := res.OutputIDs
	if n := len(ids); n > 0 && (slices.Contains(tmpl.StopTokenIDs(), ids[n-1]) ||
		(res.Finish.Type == llm.FinishStop && ids[n-1] == res.Finish.Matched)) {
		ids = ids[:n-1]
	}
	r.Text = strings.ToValidUTF8(tok.Decode(ids), "\uFFFD")
	if m := res.Finish.MatchedText; m != "" && res.Finish.Type == llm.FinishStop {
		if i := strings.LastIndex(r.Text, m); i >= 0 {
			r.Text = r.Text[:i]
		}
	}
	r.tokens = make([]string, len(res.OutputIDs))
	for i, id := range res.OutputIDs {
		r.tokens[i] = tok.Decode([]int32{id})
	}
	return r, nil
}

// Message is the reply as the assistant message an agent sends back:
// its content ("" for none) and its tool calls.
func (r Reply) Message() schema.PromptMessage {
	m := schema.PromptMessage{Role: schema.RoleAssistant}
	if r.Content != nil {
		m.Content = *r.Content
	}
	for _, c := range r.Calls {
		m.ToolCalls = append(m.ToolCalls, schema.ToolCall{Type: schema.ToolTypeFunction, Function: c})
	}
	return m
}

// FinishReason is OpenAI's finish_reason: "tool_calls" when the reply
// calls tools (whatever ended it, as vLLM's serving_chat.py does), else
// "length" at the token limit, else "stop".
func (r Reply) FinishReason() string {
	switch {
	case len(r.Calls) > 0:
		return "tool_calls"
	case r.Finish.Type == llm.FinishLength:
		return "length"
	}
	return "stop"
}

// Meta is what a response says besides the reply: its id (prefixed with
// "chatcmpl-" or "cmpl-"), its creation time in Unix seconds (passed in:
// nothing here reads a clock) and the model named.
type Meta struct {
	ID      string
	Created int64
	Model   string
}

// ChatCompletion is OpenAI's chat.completion object (vLLM's
// ChatCompletionResponse, with its reasoning_content extension).
type ChatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []ChatChoice `json:"choices"`
	Usage   Usage        `json:"usage"`
}

// ChatChoice is one choice of a ChatCompletion.
type ChatChoice struct {
	Index        int           `json:"index"`
	Message      ChatMessage   `json:"message"`
	Logprobs     *ChatLogprobs `json:"logprobs"`
	FinishReason string        `json:"finish_reason"`
}

// ChatMessage is the assistant message of a ChatChoice: content null when
// there is none (only tool calls, or only reasoning).
type ChatMessage struct {
	Role             string            `json:"role"`
	Content          *string           `json:"content"`
	ReasoningContent *string           `json:"reasoning_content,omitempty"`
	ToolCalls        []schema.ToolCall `json:"tool_calls,omitempty"`
}

// ChatLogprobs is a choice's logprobs: one entry per generated token.
type ChatLogprobs struct {
	Content []TokenLogprob `json:"content"`
}

// TokenLogprob is one token's log-probability; bytes are its UTF-8 bytes
// (a byte-level token may hold part of a character), and no alternatives
// are given.
type TokenLogprob struct {
	Token       string         `json:"token"`
	Logprob     Logprob        `json:"logprob"`
	Bytes       []int          `json:"bytes"`
	TopLogprobs []TokenLogprob `json:"top_logprobs"`
}

// Logprob is a log-probability written with float32's shortest digits;
// one that is not finite is written as vLLM's -9999.0.
type Logprob float32

// MarshalJSON implements json.Marshaler.
func (l Logprob) MarshalJSON() ([]byte, error) {
	f := float64(l)
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		return []byte("-9999.0"), nil
	case f == 0:
		return []byte("0"), nil // not "-0"
	}
	return strconv.AppendFloat(nil, f, 'g', -1, 32), nil
}

// Usage is OpenAI's usage: completion tokens count the stop token, as
// vLLM's do.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func usage(prompt, completion int) Usage {
	return Usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}
}

// ToolCallID is the id of a reply's i-th tool call in the response with
// id id: deterministic, so a replayed step answers the same; the proxy
// reads tool calls back by name and arguments, never by id.
func ToolCallID(id string, i int) string { return "call_" + id + "_" + strconv.Itoa(i) }

// Chat is r as a chat.completion; promptTokens is the generation's input
// length, logprobs whether the request asked for them.
func (r Reply) Chat(meta Meta, promptTokens int, logprobs bool) ChatCompletion {
	msg := ChatMessage{Role: schema.RoleAssistant, Content: r.Content, ReasoningContent: r.Reasoning}
	for i, c := range r.Calls {
		msg.ToolCalls = append(msg.ToolCalls, schema.ToolCall{ID: ToolCallID(meta.ID, i), Type: schema.ToolTypeFunction, Function: c})
	}
	ch := ChatChoice{Message: msg, FinishReason: r.FinishReason()}
	if logprobs {
		ch.Logprobs = r.chatLogprobs()
	}
	return ChatCompletion{ID: "chatcmpl-" + meta.ID, Object: "chat.completion", Created: meta.Created, Model: meta.Model,
		Choices: []ChatChoice{ch}, Usage: usage(promptTokens, len(r.IDs))}
}

func (r Reply) chatLogprobs() *ChatLogprobs {
	lp := &ChatLogprobs{Content: make([]TokenLogprob, len(r.tokens))}
	for i, t := range r.tokens {
		b := make([]int, len(t))
		for j := range len(t) {
			b[j] = int(t[j])
		}
		lp.Content[i] = TokenLogprob{Token: strings.ToValidUTF8(t, "\uFFFD"), Logprob: r.logprob(i), Bytes: b, TopLogprobs: []TokenLogprob{}}
	}
	return lp
}

func (r Reply) logprob(i int) Logprob {
	if i < len(r.Logprobs) {
		return Logprob(r.Logprobs[i])
	}
	return Logprob(math.Inf(-1)) // the server gave none: written as -9999.0
}

// Completion is OpenAI's text_completion object (vLLM's
// CompletionResponse).
type Completion struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []CompletionChoice `json:"choices"`
	Usage   Usage              `json:"usage"`
}

// CompletionChoice is one choice of a Completion.
type CompletionChoice struct {
	Index        int                 `json:"index"`
	Text         string              `json:"text"`
	Logprobs     *CompletionLogprobs `json:"logprobs"`
	FinishReason string              `json:"finish_reason"`
}

// CompletionLogprobs is a text completion's logprobs (vLLM's
// CompletionLogProbs): parallel lists, one entry per generated token;
// text_offset counts characters, and each top_logprobs entry holds the
// sampled token alone (logprobs 0).
type CompletionLogprobs struct {
	TextOffset    []int                `json:"text_offset"`
	TokenLogprobs []Logprob            `json:"token_logprobs"`
	Tokens        []string             `json:"tokens"`
	TopLogprobs   []map[string]Logprob `json:"top_logprobs"`
}

// Completion is r as a text_completion; promptTokens is the prompt's
// length, logprobs whether the request asked for them.
func (r Reply) Completion(meta Meta, promptTokens int, logprobs bool) Completion {
	ch := CompletionChoice{Text: r.Text, FinishReason: r.FinishReason()}
	if logprobs {
		ch.Logprobs = r.completionLogprobs()
	}
	return Completion{ID: "cmpl-" + meta.ID, Object: "text_completion", Created: meta.Created, Model: meta.Model,
		Choices: []CompletionChoice{ch}, Usage: usage(promptTokens, len(r.IDs))}
}

func (r Reply) completionLogprobs() *CompletionLogprobs {
	n := len(r.tokens)
	lp := &CompletionLogprobs{TextOffset: make([]int, n), TokenLogprobs: make([]Logprob, n), Tokens: make([]string, n),
		TopLogprobs: make([]map[string]Logprob, n)}
	off := 0
	for i, t := range r.tokens {
		t = strings.ToValidUTF8(t, "\uFFFD")
		lp.TextOffset[i], lp.TokenLogprobs[i], lp.Tokens[i] = off, r.logprob(i), t
		lp.TopLogprobs[i] = map[string]Logprob{t: r.logprob(i)}
		off += utf8.RuneCountInString(t)
	}
	return lp
}
