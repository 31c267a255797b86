package proxy

import (
	"encoding/json"
	"errors"
	"regexp"
	"strings"

	"github.com/actloop/actloop/internal/chattemplate"
	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/pkg/schema"
)

// ReasoningParser splits a reply's text into its reasoning and its content
// (nil where there is none), as vLLM's --reasoning-parser does before the
// tool parser reads the content.
type ReasoningParser interface {
	SplitReasoning(text string) (reasoning, content *string)
}

// ToolCallParser reads the tool calls out of a reply's content, as vLLM's
// --tool-call-parser does: the content left (nil when empty) and the calls,
// or ok false when the text holds no well-formed calls (then it is all
// content).
type ToolCallParser interface {
	ParseToolCalls(text string) (content *string, calls []schema.FunctionCall, ok bool)
}

// Parsers are how replies are read: Reasoning nil keeps any think block
// in the content; Tools nil reads no tool calls.
type Parsers struct {
	Reasoning ReasoningParser
	Tools     ToolCallParser
}

// ParsersFor returns the parsers that fit tmpl, as one would start vLLM for
// its model: Qwen3's template gets Think (thinking as the template's mode)
// and Hermes; another template that renders tools (a model's own, such as
// Qwen2.5's) gets Hermes; the rest get neither.
func ParsersFor(tmpl tokenize.ChatTemplate) Parsers {
	switch t := tmpl.(type) {
	case tokenize.Qwen3:
		return Parsers{Reasoning: Think{Thinking: t.Thinking}, Tools: Hermes{}}
	case tokenize.ToolTemplate:
		return Parsers{Tools: Hermes{}}
	}
	return Parsers{}
}

// Think is the <think>…</think> reasoning parser of vLLM's qwen3
// (vllm/reasoning/qwen3_reasoning_parser.py, extract_reasoning; its base,
// basic_parsers.py BaseThinkingReasoningParser, is deepseek_r1's): the
// text up to and including the first <think> is dropped (a chat template
// that opens the think block in the prompt leaves none); with a </think>,
// the reasoning is what precedes the first one and the content what
// follows it (nil when empty); without, the text is all reasoning in
// thinking mode (the reply was cut short while thinking) and all content
// otherwise. Qwen3.5's implicit end of reasoning at a <tool_call> followed
// by <function=…> is not read.
type Think struct {
	// Thinking is false under enable_thinking=false (qwen3-nothink).
	Thinking bool
}

// SplitReasoning implements ReasoningParser.
func (t Think) SplitReasoning(text string) (reasoning, content *string) {
	if _, after, ok := strings.Cut(text, "<think>"); ok {
		text = after
	}
	if r, c, ok := strings.Cut(text, "</think>"); ok {
		return &r, nonEmpty(c)
	}
	if !t.Thinking {
		return nil, &text
	}
	return &text, nil
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Hermes is the Hermes-style tool call parser of vLLM's hermes
// (vllm/entrypoints/openai/tool_parsers/hermes_tool_parser.py,
// extract_tool_calls), which Qwen2.5 and Qwen3 use: every
// <tool_call>…</tool_call> block, and an unclosed last one, holds a JSON
// object {"name": …, "arguments": …}; the arguments are written back as
// Python's json.dumps(arguments, ensure_ascii=False) writes them (", " and
// ": " between items, keys in their order, non-ASCII as it is, a number
// past float64's range as Python's Infinity, which is not JSON); the
// content is the text before the first <tool_call>, nil when empty. A
// block that is not such an object makes the whole text content, with no
// calls, as vLLM does on any exception.
type Hermes struct{}

var hermesRe = regexp.MustCompile(`(?s)<tool_call>(.*?)</tool_call>|<tool_call>(.*)`)

// ParseToolCalls implements ToolCallParser.
func (Hermes) ParseToolCalls(text string) (*string, []schema.FunctionCall, bool) {
	start := strings.Index(text, "<tool_call>")
	if start < 0 {
		return &text, nil, false
	}
	var calls []schema.FunctionCall
	for _, m := range hermesRe.FindAllStringSubmatch(text, -1) {
		body := m[1]
		if body == "" {
			body = m[2]
		}
		c, err := hermesCall(body)
		if err != nil {
			return &text, nil, false
		}
		calls = append(calls, c)
	}
	return nonEmpty(text[:start]), calls, true
}

// hermesCall reads one block: json.loads(body), then its "name" (a string)
// and "arguments" (any JSON value, required).
func hermesCall(body string) (schema.FunctionCall, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &obj); err != nil {
		return schema.FunctionCall{}, err
	}
	var name string
	if err := json.Unmarshal(obj["name"], &name); err != nil || isNull(obj["name"]) {
		return schema.FunctionCall{}, errors.New("no name")
	}
	raw, ok := obj["arguments"]
	if !ok {
		return schema.FunctionCall{}, errors.New("no arguments")
	}
	args, err := chattemplate.PyDumps(raw)
	if err != nil {
		return schema.FunctionCall{}, err
	}
	return schema.FunctionCall{Name: name, Arguments: args}, nil
}
