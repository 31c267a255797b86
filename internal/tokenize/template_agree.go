package tokenize

import (
	"encoding/json"
	"fmt"

	"github.com/actloop/actloop/internal/chattemplate"
)

// TokenizerFile is the tokenizer's file in a model directory.
const TokenizerFile = "tokenizer.json"

// builtinKwargs are the template variables under which a built-in
// template renders as the model's own.
var builtinKwargs = map[string]map[string]any{
	TemplateQwen3NoThink: {"enable_thinking": false},
}

// agreeProbes are the conversations a built-in template must render as the
// model's own does: the flows' conversations, opening with a system
// message.
func agreeProbes() [][]Msg {
	sys := Msg{Role: "system", Content: probeSystem}
	task := Msg{Role: "user", Content: probeTask}
	obs := Msg{Role: "user", Content: probeObserved}
	return [][]Msg{
		{sys, task},
		{sys, task, {Role: "assistant", Content: probeReply}, obs},
		{sys, task, {Role: "assistant", Content: probeThinking}, obs, {Role: "assistant", Content: probeReply}, obs},
		{sys, {Role: "user", Content: "  padded task\n"}, {Role: "assistant", Content: "reply"}},
	}
}

// Agree checks builtin renders the probe conversations (and, when it
// renders tools, the tool-call flow's) byte for byte as the model's own
// template tmpl does with kwargs; the error names the conversation and
// holds a *chattemplate.PrefixError with the offset.
func Agree(builtin ChatTemplate, tmpl *chattemplate.Template, kwargs map[string]any) error {
	m := &Model{tmpl: tmpl, kwargs: kwargs}
	for i, msgs := range agreeProbes() {
		for _, gp := range []bool{false, true} {
			want, err := m.render(openAI(msgs), nil, gp)
			if err != nil {
				return err
			}
			if err := sameText(builtin.Render(msgs, gp), want); err != nil {
				return fmt.Errorf("probe conversation %d (generation prompt %t): %w", i+1, gp, err)
			}
		}
	}
	bt, ok := builtin.(ToolTemplate)
	if !ok {
		return nil
	}
	tools := []json.RawMessage{probeTool}
	call := Msg{Role: "assistant", Content: "I will list the files.", ToolCalls: []ToolCall{{Name: probeToolName, Arguments: probeToolCalls}}}
	msgs := []Msg{{Role: "system", Content: probeSystem}, {Role: "user", Content: probeTask}, call,
		{Role: "tool", Content: probeObserved}, {Role: "tool", Content: "second"}}
	want, err := m.render(openAI(msgs), tools, true)
	if err != nil {
		return err
	}
	got, err := bt.RenderTools(msgs, tools, true)
	if err != nil {
		return err
	}
	if err := sameText(got, want); err != nil {
		return fmt.Errorf("the tool-call conversation: %w", err)
	}
	return nil
}

// sameText returns nil when got is want, else a *chattemplate.PrefixError
// at the first byte where they differ.
func sameText(got, want string) error {
	if got == want {
		return nil
	}
	if _, err := chattemplate.Suffix(got, want); err != nil {
		return err
	}
	// got is a strict prefix of want.
	return &chattemplate.PrefixError{Offset: len(got), Next: want[len(got):min(len(want), len(got)+48)]}
}
