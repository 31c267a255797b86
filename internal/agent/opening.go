package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/pkg/schema"
)

// Opening renders a trajectory's first messages (system prompt and task)
// and their tokens, up to and including the first generation prompt. Both
// templates see task, and n_model_calls is 0: mini-swe-agent's run sets the
// task before it renders the system message.
func Opening(cfg Config, tmpl tokenize.ChatTemplate, task string) ([]schema.Message, []int32, error) {
	cfg = cfg.For(task, 0)
	system, err := cfg.System(nil)
	if err != nil {
		return nil, nil, err
	}
	inst, err := cfg.Instance(task, nil)
	if err != nil {
		return nil, nil, err
	}
	msgs := []schema.Message{{Role: schema.RoleSystem, Content: system}, {Role: schema.RoleUser, Content: inst}}
	ids := tmpl.Begin()
	for _, m := range msgs {
		ids = append(ids, tmpl.Message(m.Role, m.Content)...)
	}
	return msgs, append(ids, tmpl.GenerationPrompt()...), nil
}

// ErrMessagesNeedToolTemplate: a sample's messages carry tools or tool
// calls, and the chat template cannot render them.
var ErrMessagesNeedToolTemplate = errors.New("the sample's messages carry tools or tool calls, which the chat template " +
	"cannot render (ACTLOOP_CHAT_TEMPLATE=qwen3 or qwen3-nothink renders them, as does a model's own template that lists tools: ACTLOOP_MODEL_DIR)")

// SampleOpening is a trajectory's opening as its sample gives its prompt:
// from the task, the flow's Opening (the configuration's system and
// instance templates); from messages, MessagesOpening; from token ids,
// IDsOpening. Under the tool_call flow, messages given without tools are
// rendered with the flow's Tools, since its replies are read as calls of
// them.
func (a Agent) SampleOpening(tmpl tokenize.ChatTemplate, s *schema.Sample) ([]schema.Message, []int32, error) {
	switch {
	case len(s.PromptIDs) > 0:
		msgs, ids := IDsOpening(tmpl, s.PromptIDs)
		return msgs, ids, nil
	case len(s.Messages) > 0:
		tools := s.Tools
		if len(tools) == 0 && a.Flow.Name() == schema.FlowToolCall {
			tools = Tools
		}
		return MessagesOpening(tmpl, s.Messages, tools)
	}
	return a.Flow.Opening(a.Config, tmpl, s.Task)
}

// MessagesOpening renders a sample's messages, with tools when there are
// any, as the chat template renders a whole conversation (a model's
// apply_chat_template(messages, tools=tools, add_generation_prompt=True)),
// and their ids are the template's tokenizer's encoding of that text: the
// tokenizer cuts its input at special tokens, so these are the ids the
// template would give message by message. The agent configuration's
// templates are not applied. The messages are returned, for the result,
// as their roles and contents (their tool calls are in the ids).
func MessagesOpening(tmpl tokenize.ChatTemplate, given []schema.PromptMessage, tools []json.RawMessage) ([]schema.Message, []int32, error) {
	if n := len(given); n == 0 || given[n-1].Role == schema.RoleAssistant {
		return nil, nil, errors.New("the messages must end with a message the model answers (not the assistant's)")
	}
	msgs := make([]tokenize.Msg, len(given))
	out := make([]schema.Message, len(given))
	calls := false
	for i, m := range given {
		msgs[i] = tokenize.Msg{Role: m.Role, Content: m.Content}
		out[i] = schema.Message{Role: m.Role, Content: m.Content}
		for _, c := range m.ToolCalls {
			msgs[i].ToolCalls = append(msgs[i].ToolCalls, tokenize.ToolCall{Name: c.Function.Name, Arguments: c.Function.Arguments})
			calls = true
		}
	}
	var text string
	if len(tools) > 0 || calls {
		tt, ok := tmpl.(tokenize.ToolTemplate)
		if !ok {
			return nil, nil, ErrMessagesNeedToolTemplate
		}
		var err error
		if text, err = tt.RenderTools(msgs, tools, true); err != nil {
			return nil, nil, fmt.Errorf("render the messages' tools: %w", err)
		}
	} else if cr, ok := tmpl.(tokenize.CheckedRenderer); ok {
		// A model's own template may raise (raise_exception): say why.
		var err error
		if text, err = cr.RenderText(msgs, true); err != nil {
			return nil, nil, fmt.Errorf("render the messages: %w", err)
		}
	} else {
		text = tmpl.Render(msgs, true)
	}
	return out, tmpl.Tokenizer().Encode(text), nil
}

// IDsOpening is the opening of a sample that gives its prompt as token
// ids: the ids as given, and for the result's messages one user message
// holding their decoding (the chat template's markup included, invalid
// UTF-8 replaced with U+FFFD), which is for reading, not for rendering
// again.
func IDsOpening(tmpl tokenize.ChatTemplate, ids []int32) ([]schema.Message, []int32) {
	text := strings.ToValidUTF8(tmpl.Tokenizer().Decode(ids), "\uFFFD")
	return []schema.Message{{Role: schema.RoleUser, Content: text}}, slices.Clone(ids)
}
