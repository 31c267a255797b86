package coordinator

import (
	"sync"
	"time"

	"github.com/actloop/actloop/pkg/schema"
)

// OutcomeWindow is how far back the status's rates and recent figures
// look.
const OutcomeWindow = 60 * time.Second

// Outcomes is what the results this coordinator has seen (since its term
// began) say: throughput over the last OutcomeWindow, and reward, solve
// rate and staleness, over the window and in total.
type Outcomes struct {
	// WindowS is the span the rates and Window are over, in seconds:
	// OutcomeWindow, or the time since the term began when that is shorter.
	WindowS float64 `json:"window_s"`
	// TrajectoriesPerS, TokensPerS and EnvStepsPerS are Window's
	// trajectories, generated tokens and env steps over WindowS.
	TrajectoriesPerS float64       `json:"trajectories_per_s"`
	TokensPerS       float64       `json:"tokens_per_s"`
	EnvStepsPerS     float64       `json:"env_steps_per_s"`
	Window           OutcomeCounts `json:"window"`
	Total            OutcomeCounts `json:"total"`
}

// OutcomeCounts sums results. Trajectories, GenTokens and EnvSteps count
// every result (training, validation, fallbacks); the rest count training
// results only, as the trainer learns from them.
type OutcomeCounts struct {
	Trajectories int64 `json:"trajectories"`
	GenTokens    int64 `json:"gen_tokens"` // tokens the trajectories generated
	EnvSteps     int64 `json:"env_steps"`  // commands they ran
	// Results counts the training results; Solved those submitted with
	// reward >= 1; SolveRate is Solved / Results and MeanReward their mean
	// reward (both 0 without results).
	Results    int64   `json:"results"`
	Solved     int64   `json:"solved"`
	SolveRate  float64 `json:"solve_rate"`
	MeanReward float64 `json:"mean_reward"`
	// MeanStaleness and MaxStaleness are over the completed training
	// results: weight versions between the oldest generated token and the
	// version current at the result (actloop_staleness_versions).
	MeanStaleness float64 `json:"mean_staleness"`
	MaxStaleness  int64   `json:"max_staleness"`

	rewards  float64
	stale    int64 // results counted in the staleness
	staleSum int64
}

// outcome is one result, as outcomes keeps it.
type outcome struct {
	at               time.Time
	tokens, envSteps int
	training, solved bool
	reward           float64
	staleness        int64 // -1: not counted
}

func (o *OutcomeCounts) add(e outcome) {
	o.Trajectories++
	o.GenTokens += int64(e.tokens)
	o.EnvSteps += int64(e.envSteps)
	if !e.training {
		return
	}
	o.Results++
	o.rewards += e.reward
	if e.solved {
		o.Solved++
	}
	if e.staleness >= 0 {
		o.stale++
		o.staleSum += e.staleness
		o.MaxStaleness = max(o.MaxStaleness, e.staleness)
	}
}

// finish fills the means.
func (o *OutcomeCounts) finish() {
	if o.Results > 0 {
		o.SolveRate, o.MeanReward = float64(o.Solved)/float64(o.Results), o.rewards/float64(o.Results)
	}
	if o.stale > 0 {
		o.MeanStaleness = float64(o.staleSum) / float64(o.stale)
	}
}

// outcomes keeps the results seen: their totals, and each one of the last
// OutcomeWindow. It owns its state under its own lock.
type outcomes struct {
	started time.Time

	mu     sync.Mutex
	total  OutcomeCounts
	recent []outcome // within the window, oldest first
}

func newOutcomes(started time.Time) *outcomes { return &outcomes{started: started} }

// observe counts result r, seen at now; staleness is its weight versions
// behind (-1: not counted).
func (o *outcomes) observe(r schema.ResultHead, staleness int64, now time.Time) {
	e := outcome{at: now, tokens: r.GenTokens, envSteps: r.Commands, training: r.Purpose != schema.PurposeValidation,
		solved: r.Solved(), reward: r.Reward, staleness: staleness}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.total.add(e)
	o.recent = append(o.recent, e)
	o.trimLocked(now)
}

func (o *outcomes) trimLocked(now time.Time) {
	i := 0
	for i < len(o.recent) && now.Sub(o.recent[i].at) > OutcomeWindow {
		i++
	}
	if i > 0 {
		o.recent = append(o.recent[:0], o.recent[i:]...)
	}
}

// get returns the outcomes as of now.
func (o *outcomes) get(now time.Time) Outcomes {
	o.mu.Lock()
	o.trimLocked(now)
	out := Outcomes{Total: o.total}
	for _, e := range o.recent {
		out.Window.add(e)
	}
	o.mu.Unlock()
	out.Total.finish()
	out.Window.finish()
	span := min(now.Sub(o.started), OutcomeWindow)
	if span > 0 {
		out.WindowS = span.Seconds()
		out.TrajectoriesPerS = float64(out.Window.Trajectories) / out.WindowS
		out.TokensPerS = float64(out.Window.GenTokens) / out.WindowS
		out.EnvStepsPerS = float64(out.Window.EnvSteps) / out.WindowS
	}
	return out
}
