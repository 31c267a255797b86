package genworker

import (
	"encoding/json"
	"fmt"

	"github.com/actloop/actloop/internal/agent"
	"github.com/actloop/actloop/internal/proxy"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/llm"
)

// proxyFlow is the gen step of a proxy-flow trajectory: one call of its
// agent. The input is the stream's current segment; the call's own
// sampling fields (kept as Trajectory.Call) go over the sample's, its
// max tokens (else the sample's max_new_tokens) capped by the room left;
// the sample's limits but the format-error one apply, and a limit ends
// the conversation with no message of its own. The whole turn commits as
// it was generated, with how it ended: the env-worker answers the call
// from it, and the agent's next call brings the tokens that close it.
func (w *Worker) proxyFlow(t *traj.Trajectory) (flow, error) {
	s := t.Sample
	var call proxy.SamplingFields
	if t.Call != "" {
		if err := json.Unmarshal([]byte(t.Call), &call); err != nil {
			return flow{}, fmt.Errorf("trajectory %s: the call's sampling fields: %w", t.ID, err)
		}
	}
	f := flow{
		limits:  agent.Limits{StepLimit: s.Limits.StepLimit, TokenBudget: s.Limits.TokenBudget, WallClock: s.Limits.WallClock()},
		maxNew:  s.Sampling.MaxNewTokens,
		closing: func() *traj.UserTurn { return nil },
		turn: func(turn traj.Turn, _ []int32, finish llm.Finish) (traj.Transition, error) {
			b, err := json.Marshal(finish)
			if err != nil {
				return nil, err
			}
			turn.Finish = string(b)
			return traj.Generated{Turn: turn}, nil
		},
	}
	if call.MaxTokens != nil {
		f.maxNew = *call.MaxTokens
	}
	base := w.sampling(s)
	f.sampling = func(maxNew int) llm.SamplingParams {
		p, err := call.Params(base, maxNew)
		if err != nil { // maxNew < 1: the step asks for none (never called so)
			return base
		}
		p.MaxNewTokens = maxNew
		return p
	}
	return f, nil
}
