package virtual

import (
	"errors"
	"fmt"
	"time"

	"github.com/actloop/actloop/internal/batching"
	"github.com/actloop/actloop/pkg/priority"
)

// Kinds of run.
const (
	// KindTrajectory: a trajectory holds a generation slot for its whole
	// life (admission limited to the slots).
	KindTrajectory = "trajectory"
	// KindAsync: every trajectory admitted at once and every generation
	// sent to the server at once, which queues and retracts (verl's agent
	// loop).
	KindAsync = "async"
	// KindAction: actloop's action-level scheduling.
	KindAction = "action"
)

// Predictors.
const (
	PredictNone    = ""        // the history, as predictor-gw's default backend
	PredictHistory = "history" // predict.Remaining over the finished trajectories' totals
	PredictOracle  = "oracle"  // the workload's own remaining tokens
	PredictLearned = "learned" // predict.Regression on what the conversation says, as predictor-gw's learned backend
)

// Config is one run: the machine, the mode and the services' settings.
type Config struct {
	Replicas int
	Server   batching.Config
	// Slots is each gen-worker's generation slots (ACTLOOP_SLOTS); an
	// async run has as many as trajectories.
	Slots  int
	Kind   string
	Policy string // priority policy name
	// Custom, when set, is the policy instead of Policy's: a user's own
	// (see pkg/priority's doc for the contract). It ranks admission and
	// the per-replica high classes as a named policy does; AgeLimit does not
	// apply to it unless it ages by itself.
	Custom    priority.Policy
	Predictor string
	// SyncEvery is the seconds between weight syncs (0: none): the trainer
	// pauses generation (abort mode), the servers' caches are flushed,
	// and after SyncPauseS generation resumes with the next version.
	SyncEvery, SyncPauseS float64
	// MaxNew is each generation's max_new_tokens.
	MaxNew int
	// TrainBatchSize and MaxStaleness bound admission as the control
	// state's max_staleness and ACTLOOP_TRAIN_BATCH_SIZE do
	// (priority.StalenessRoom): no more trajectories are admitted than the
	// trainer can consume while they are fresh. TrainBatchSize 0: no bound.
	TrainBatchSize int
	MaxStaleness   int64
	// Trainer, when set, runs steady-state asynchronous RL: the run ends
	// when the trainer has taken its batches, and a weight sync (of
	// SyncPauseS) follows each batch instead of coming every SyncEvery.
	// Admission is bounded as TrainBatchSize and MaxStaleness bound it,
	// which Trainer sets.
	Trainer *Trainer

	// The coordinator's and gen-workers' settings, as their ACTLOOP_
	// settings name them; Defaults has their defaults.
	MaxActive, MaxActiveCeiling int // 0: 1.5 × slots, and 3 × that (by KV: no count ceiling, priority.KVCeiling)
	HighSlots                   int // 0: Slots
	AdaptInterval               time.Duration
	SnapshotInterval            time.Duration
	AgeLimit                    time.Duration
	PreemptCooldown             time.Duration
	ReprefillLimit              float64

	// KVBudget is the share of each server's pool that admission lets the
	// active trajectories' KV demand fill (the coordinator's
	// ACTLOOP_KV_BUDGET; 0: admission by the adaptive count limit), and
	// DispatchKVBudget the share each gen-worker's running generations may
	// fill beyond its slots (the gen-workers' ACTLOOP_KV_BUDGET; 0: slots
	// only).
	KVBudget, DispatchKVBudget float64
	// Preempt lets a high step preempt a low generation (ACTLOOP_PREEMPT),
	// in action-level runs.
	Preempt bool
	// Hold holds trajectories while the contexts on their replica would
	// overfill its pool (priority.KVPools.Hold; the coordinator's
	// ACTLOOP_HOLD), in action-level runs with admission by KV; with
	// KVResidency, by the pools as KV residency counts them (which the
	// coordinator does not do).
	Hold bool
	// KVResidency makes admission by KV count against the device pools
	// only the KV of trajectories that generate, not that of those whose
	// command is running, when the servers have a host tier
	// (Server.HostTokens > 0) to hold their contexts meanwhile; every
	// context must still fit in the host pools (priority.KVPools.Total). The
	// coordinator does not do this yet: it is the engine's measure of the
	// mechanism.
	KVResidency bool

	// Dispatch is the order in which each gen-worker takes its waiting
	// gen steps: DispatchActloop (the services') or DispatchReference
	// (siiRL-agentic's three queues), in action-level runs.
	Dispatch string

	// RankBy is what policies rank by: priority.RankByTime (the default) or
	// priority.RankByTokens (ACTLOOP_RANK_BY).
	RankBy string

	// SampleEveryS is the step of the KV-use series, in seconds.
	SampleEveryS float64
}

// Defaults returns a configuration with the services' default settings
// (a test checks them against the services' own) on replicas default
// servers.
func Defaults(replicas, slots int) Config {
	return Config{Replicas: replicas, Server: batching.DefaultConfig(), Slots: slots, Kind: KindAction,
		Policy: priority.NameFCFS, MaxNew: 8192,
		AdaptInterval: 5 * time.Second, SnapshotInterval: 200 * time.Millisecond, AgeLimit: 2 * time.Minute,
		PreemptCooldown: 30 * time.Second, ReprefillLimit: 0.5, KVBudget: 1, DispatchKVBudget: 1, Hold: true, RankBy: priority.RankByTime, SampleEveryS: 10}
}

// floor and ceiling of the admission limit, as the coordinator's
// (priority.ActiveBounds; a trajectory-level run is ACTLOOP_SCHEDULING=trajectory).
func (c Config) bounds() (floor, ceiling int) {
	mode := priority.SchedulingAction
	if c.Kind == KindTrajectory {
		mode = priority.SchedulingTrajectory
	}
	return priority.ActiveBounds(mode, c.Slots, c.Replicas, c.MaxActive, c.MaxActiveCeiling)
}

func (c Config) floor() int   { f, _ := c.bounds(); return f }
func (c Config) ceiling() int { _, x := c.bounds(); return x }

// resident reports whether admission runs by KV residency.
func (c Config) resident() bool { return c.KVResidency && c.Server.HostTokens > 0 }

func (c Config) highSlots() int {
	if c.HighSlots > 0 {
		return c.HighSlots
	}
	return c.Slots
}

// Validate names every setting out of range.
func (c Config) Validate() error {
	var errs []error
	bad := func(name string, v any) { errs = append(errs, fmt.Errorf("%s: out of range: %v", name, v)) }
	if c.Replicas < 1 {
		bad("replicas", c.Replicas)
	}
	if c.Slots < 1 {
		bad("slots", c.Slots)
	}
	switch c.Kind {
	case KindTrajectory, KindAsync, KindAction:
	default:
		bad("kind", c.Kind)
	}
	pc := priority.Config{AgeLimit: c.AgeLimit}
	if c.Custom != nil {
		if err := pc.Validate(); err != nil {
			errs = append(errs, err)
		}
	} else if _, err := priority.New(c.Policy, pc); err != nil {
		errs = append(errs, err)
	}
	switch c.Predictor {
	case PredictNone, PredictHistory, PredictOracle, PredictLearned:
	default:
		bad("predictor", c.Predictor)
	}
	if c.Dispatch != DispatchActloop && c.Dispatch != DispatchReference {
		bad("dispatch", c.Dispatch)
	}
	if c.RankBy != priority.RankByTime && c.RankBy != priority.RankByTokens {
		bad("rank_by", c.RankBy)
	}
	if c.SyncEvery < 0 || c.SyncPauseS < 0 {
		bad("sync", fmt.Sprint(c.SyncEvery, c.SyncPauseS))
	}
	if c.Trainer != nil {
		errs = append(errs, c.Trainer.validate(c))
	}
	if c.MaxNew < 1 {
		bad("max_new_tokens", c.MaxNew)
	}
	if c.AdaptInterval <= 0 || c.SnapshotInterval <= 0 || c.SampleEveryS <= 0 {
		bad("intervals", fmt.Sprint(c.AdaptInterval, c.SnapshotInterval, c.SampleEveryS))
	}
	if err := c.Server.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
