package agent

import (
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
