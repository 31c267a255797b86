package predict

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/actloop/actloop/internal/agent"
	"github.com/actloop/actloop/internal/sim"
	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/schema"
)

// Oracle knows the future: it loads the trajectory's tokens from the store
// and asks the simulator (internal/sim) how many turns and output tokens its
// unscripted replies still take (POST /actloop/plan). It is for benchmarks,
// to measure what a perfect predictor would gain. Before its first answer it
// checks that the server's /get_model_info reports "actloop_simulator":
// true; a server that does not (a real inference server) makes it refuse
// every request with ErrNotSimulator.
//
// The answer is exact for an unscripted trajectory on the chat template the
// workers use (the simulator must decode with the same tokenizer), with the
// sample's step limit taken into account; scripted
// samples are refused (their replies are not the simulator's), and the
// token budget and the wall clock are not modelled.
type Oracle struct {
	st      *traj.Store
	tmpl    tokenize.ChatTemplate
	url     string
	timeout time.Duration
	hc      *http.Client

	// checkMu (a one-slot semaphore, so waiting for it respects ctx)
	// serialises the server check; isSim is its outcome once known.
	checkMu chan struct{}
	checked bool
	isSim   bool
}

var _ Predictor = (*Oracle)(nil)

// NewOracle returns an Oracle reading trajectories from st, whose tokens
// follow tmpl, and asking the simulator at simURL (its base URL), each call
// bounded by timeout (none when <= 0) as well as by its context.
func NewOracle(st *traj.Store, tmpl tokenize.ChatTemplate, simURL string, timeout time.Duration) *Oracle {
	return &Oracle{st: st, tmpl: tmpl, url: strings.TrimRight(simURL, "/"), timeout: timeout, hc: newClient(),
		checkMu: make(chan struct{}, 1)}
}

// Close closes idle connections.
func (o *Oracle) Close() error {
	o.hc.CloseIdleConnections()
	return nil
}

// check makes sure the server is the simulator; a failed check is tried
// again on the next call, a negative answer is final.
func (o *Oracle) check(ctx context.Context) error {
	select {
	case o.checkMu <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-o.checkMu }()
	if !o.checked {
		b, err := postJSON(ctx, o.hc, o.url+"/get_model_info", o.timeout, nil)
		if err != nil {
			return fmt.Errorf("check the oracle's server: %w", err)
		}
		var info map[string]any
		if err := json.Unmarshal(b, &info); err != nil {
			return fmt.Errorf("check the oracle's server: %s/get_model_info: %w: %v", o.url, ErrBadReply, err)
		}
		o.checked, o.isSim = true, info[sim.SimulatorKey] == true
	}
	if !o.isSim {
		return fmt.Errorf("%s: %w", o.url, ErrNotSimulator)
	}
	return nil
}

// Predict implements Predictor.
func (o *Oracle) Predict(ctx context.Context, req schema.PredictRequest) (schema.PredictReply, error) {
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	if err := o.check(ctx); err != nil {
		return schema.PredictReply{}, fmt.Errorf("predict %s: %w", req.TrajID, err)
	}
	t, err := o.st.Load(ctx, req.TrajID, traj.WithTokens)
	if errors.Is(err, traj.ErrNotFound) && req.Task != "" {
		// Not admitted yet: the simulator plans from the opening prompt.
		_, opening, oerr := agent.Opening(agent.DefaultConfig(), o.tmpl, req.Task)
		if oerr != nil {
			return schema.PredictReply{}, fmt.Errorf("predict %s: %w", req.TrajID, oerr)
		}
		t, err = &traj.Trajectory{ID: req.TrajID, Tokens: opening}, nil
	}
	if err != nil {
		return schema.PredictReply{}, fmt.Errorf("predict: %w", err)
	}
	if len(t.Sample.Script) > 0 {
		return schema.PredictReply{}, fmt.Errorf("predict %s: the sample is scripted; the oracle knows only the simulator's own replies", req.TrajID)
	}
	input, err := nextInput(o.tmpl, t.Tokens, req.Turns)
	if err != nil {
		return schema.PredictReply{}, fmt.Errorf("predict %s: %w", req.TrajID, err)
	}
	p, err := o.plan(ctx, input)
	if err != nil {
		return schema.PredictReply{}, fmt.Errorf("predict %s: %w", req.TrajID, err)
	}
	// The step limit ends the trajectory before its plan does: count only
	// the turns it allows (the plan at the first turn it forbids says
	// what those leave).
	if lim := t.Sample.Limits.StepLimit; lim > 0 && req.Turns+p.RemainingTurns > lim {
		allowed := max(lim-req.Turns, 0)
		cut := slices.Concat(input, slices.Repeat(o.tmpl.GenerationPrompt(), allowed))
		rest, err := o.plan(ctx, cut)
		if err != nil {
			return schema.PredictReply{}, fmt.Errorf("predict %s: %w", req.TrajID, err)
		}
		p.RemainingTurns, p.RemainingTokens = allowed, p.RemainingTokens-rest.RemainingTokens
	}
	return schema.PredictReply{V: schema.Version, RemainingTokens: float64(p.RemainingTokens),
		RemainingTurns: float64(p.RemainingTurns), Source: SourceOracle}, nil
}

// plan asks the simulator about input.
func (o *Oracle) plan(ctx context.Context, input []int32) (sim.TurnPlan, error) {
	body, err := json.Marshal(map[string][]int32{"input_ids": input})
	if err != nil {
		return sim.TurnPlan{}, err
	}
	b, err := postJSON(ctx, o.hc, o.url+sim.PlanPath, o.timeout, body)
	if err != nil {
		return sim.TurnPlan{}, err
	}
	var p sim.TurnPlan
	if err := json.Unmarshal(b, &p); err != nil {
		return sim.TurnPlan{}, fmt.Errorf("%s%s: %w: %v", o.url, sim.PlanPath, ErrBadReply, err)
	}
	if p.RemainingTurns < 0 || p.RemainingTokens < 0 {
		return sim.TurnPlan{}, fmt.Errorf("%s%s: %w: negative plan %+v", o.url, sim.PlanPath, ErrBadReply, p)
	}
	return p, nil
}

// nextInput is the input of the generation after turns model calls: tokens
// cut before the opening of assistant turn turns+1 if they hold one (the
// trajectory may have moved on, or hold a partial turn), then tmpl's
// generation prompt. An assistant turn opens with the generation prompt but
// its last token (the newline that the template may merge with what
// follows).
func nextInput(tmpl tokenize.ChatTemplate, tokens []int32, turns int) ([]int32, error) {
	genPrompt := tmpl.GenerationPrompt()
	open := genPrompt[:len(genPrompt)-1]
	seen := 0
	for i := 0; i+len(open) <= len(tokens); i++ {
		if tokens[i] != open[0] || !slices.Equal(tokens[i:i+len(open)], open) {
			continue
		}
		if seen == turns {
			return slices.Concat(tokens[:i], genPrompt), nil
		}
		seen++
	}
	if seen < turns {
		return nil, fmt.Errorf("the store holds %d assistant turns, the request says %d", seen, turns)
	}
	return slices.Concat(tokens, genPrompt), nil
}
