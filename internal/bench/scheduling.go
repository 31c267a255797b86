package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/actloop/actloop/internal/batching"
	"github.com/actloop/actloop/internal/devstack"
	"github.com/actloop/actloop/internal/predictor"
	"github.com/actloop/actloop/internal/sim"
	"github.com/actloop/actloop/internal/virtual"
	"github.com/actloop/actloop/internal/workload"
	"github.com/actloop/actloop/pkg/priority"
	"github.com/actloop/actloop/pkg/schema"
)

// Mode is one way of running the batch.
type Mode struct {
	Name string
	// Kind: "trajectory" (a trajectory holds a slot for its whole life:
	// admission limited to the slots), "async" (every trajectory in flight,
	// every generation sent at once; the server queues beyond its running
	// limit) or "action" (actloop's action-level scheduling).
	Kind              string
	Policy, Predictor string
	// Sync: the trainer updates the weights every SyncEvery simulated
	// seconds (pause in abort mode, flush the prefix caches, resume with
	// the next version).
	Sync bool
	// Without turns one of action-level scheduling's mechanisms off, for
	// ablations: AblateKVAdmission (admission by the adaptive count limit:
	// the coordinator's ACTLOOP_KV_BUDGET=0), AblateKVDispatch (each
	// gen-worker runs its slots only: its ACTLOOP_KV_BUDGET=0), AblateHold (the
	// coordinator holds no trajectory: its ACTLOOP_HOLD=false),
	// AblateRankByTime (lpt and sjf rank by tokens: ACTLOOP_RANK_BY=tokens)
	// or AblatePartialRollout (a steady-state scenario's weight sync at a
	// batch's end discards the output of the generations it aborts instead
	// of keeping it: virtual.Trainer.DiscardPartials; virtual engine only,
	// as the services have no such setting; on a scenario that is not
	// steady-state, the same as the mode without it).
	Without string
	// Tune names the knob the bench sweeps for this mode on every scenario,
	// reporting the best setting (virtual engine only): TuneSlots (a
	// trajectory-level loop's slots per replica) or TuneCap (an async
	// loop's trajectories in flight per replica).
	Tune string
	// Shipped runs actloop exactly as it ships: the services' default
	// settings (ACTLOOP_SLOTS, the admission floor and ceiling, the
	// policy and the predictor), nothing set for the scenario.
	Shipped bool
	// With turns on a mechanism that is off by default: WithPreemption (a
	// high step preempts the newest low generation: ACTLOOP_PREEMPT=true),
	// or one the services do not run yet, measured in the virtual engine
	// before it is built into them: WithKVResidency
	// (admission by the KV running requests need, on servers with a host
	// tier: virtual.Config.KVResidency) or WithReferenceLoop (siiRL-agentic's
	// action-level loop: its dispatch order, virtual.DispatchReference, and
	// its admission, a fixed count of 1.5 × slots a replica with no KV
	// awareness, and its preemption of the newest low generation;
	// ModeReference).
	With string
	// FirstBatch tunes the knob on a drifting scenario's first batch only
	// and holds that setting for the others, as a user sets it once at the
	// start of a training run (without it a tuned mode is re-tuned on every
	// batch). The bench runs it on drifting scenarios only: on one batch
	// it is the tuned mode.
	FirstBatch bool
}

// Mechanisms a Mode may turn off.
const (
	AblateKVAdmission = "kv-admission"
	AblateKVDispatch  = "kv-dispatch"
	AblateHold        = "hold"
	AblateRankByTime  = "rank-by-time"
	// AblatePartialRollout is the tail: partial rollout at a batch's end.
	AblatePartialRollout = "partial-rollout"
)

// Mechanisms a Mode may turn on.
const (
	WithKVResidency   = "kv-residency"
	WithReferenceLoop = "reference-loop"
	WithPreemption    = "preemption"
)

// Knobs a tuned Mode sweeps.
const (
	// TuneSlots is a trajectory-level loop's concurrency: slime's
	// sglang_server_concurrency, a verl user's max concurrent rollouts.
	TuneSlots = "slots"
	// TuneCap is an async loop's trajectories in flight per replica, each
	// one coroutine sending its generations straight to its server
	// (AReaL's max_concurrent_rollouts); no KV awareness.
	TuneCap = "cap"
)

// Names of the rows the comparison is made against.
const (
	ModeDefault          = "default"
	ModeTrajectoryTuned  = "trajectory-tuned"
	ModeAsyncCappedTuned = "async-capped-tuned"
	ModeTrajectoryFirst  = "trajectory-first-batch"
	// ModeReference schedules as siiRL-agentic's action-level loop, the
	// design actloop follows: a comparison row, neither shipped nor tuned.
	ModeReference = "reference"
)

// Modes are every mode the scheduling bench knows.
var Modes = []Mode{
	{Name: ModeDefault, Kind: "action", Policy: priority.NameFCFS, Predictor: predictor.BackendHistory, Shipped: true},
	{Name: "trajectory", Kind: "trajectory", Policy: "fcfs"},
	{Name: ModeTrajectoryTuned, Kind: "trajectory", Policy: "fcfs", Tune: TuneSlots},
	{Name: ModeTrajectoryFirst, Kind: "trajectory", Policy: "fcfs", Tune: TuneSlots, FirstBatch: true},
	{Name: "async", Kind: "async", Policy: "fcfs"},
	{Name: ModeAsyncCappedTuned, Kind: "async", Policy: "fcfs", Tune: TuneCap},
	{Name: "action-fcfs", Kind: "action", Policy: "fcfs"},
	{Name: "action-lpt-history", Kind: "action", Policy: "lpt", Predictor: predictor.BackendHistory},
	{Name: "action-lpt-oracle", Kind: "action", Policy: "lpt", Predictor: predictor.BackendOracle},
	{Name: "action-lpt-learned", Kind: "action", Policy: "lpt", Predictor: predictor.BackendLearned},
	{Name: "action-sjf-learned", Kind: "action", Policy: "sjf", Predictor: predictor.BackendLearned},
	{Name: "action-sjf-history", Kind: "action", Policy: "sjf", Predictor: predictor.BackendHistory},
	{Name: "action-lpt-history-sync", Kind: "action", Policy: "lpt", Predictor: predictor.BackendHistory, Sync: true},
	{Name: "action-fcfs-no-kv-admission", Kind: "action", Policy: "fcfs", Without: AblateKVAdmission},
	{Name: "action-fcfs-no-kv-dispatch", Kind: "action", Policy: "fcfs", Without: AblateKVDispatch},
	{Name: "action-fcfs-preemption", Kind: "action", Policy: "fcfs", With: WithPreemption},
	{Name: "action-fcfs-no-hold", Kind: "action", Policy: "fcfs", Without: AblateHold},
	{Name: "action-lpt-history-by-tokens", Kind: "action", Policy: "lpt", Predictor: predictor.BackendHistory, Without: AblateRankByTime},
	{Name: ModeDefault + "-no-partial-rollout", Kind: "action", Policy: priority.NameFCFS, Predictor: predictor.BackendHistory, Shipped: true, Without: AblatePartialRollout},
	{Name: ModeDefault + "-kv-residency", Kind: "action", Policy: priority.NameFCFS, Predictor: predictor.BackendHistory, Shipped: true, With: WithKVResidency},
	{Name: "action-fcfs-kv-residency", Kind: "action", Policy: "fcfs", With: WithKVResidency},
	{Name: ModeReference, Kind: "action", Policy: "fcfs", With: WithReferenceLoop},
}

// DefaultModes are the modes `actloop bench` runs unless told otherwise.
const DefaultModes = "default,trajectory,trajectory-tuned,async,async-capped-tuned,action-fcfs,action-lpt-oracle"

// ModeNames are the names of Modes.
func ModeNames() []string {
	names := make([]string, 0, len(Modes))
	for _, m := range Modes {
		names = append(names, m.Name)
	}
	return names
}

// ScenarioNames are the names of the workload's scenarios and their
// variants (which "all" leaves out).
func ScenarioNames() []string {
	names := make([]string, 0, len(workload.Scenarios)+len(workload.Variants))
	for _, s := range slices.Concat(workload.Scenarios, workload.Variants) {
		names = append(names, s.Name)
	}
	return names
}

func lookupMode(name string) (Mode, bool) {
	for _, m := range Modes {
		if m.Name == name {
			return m, true
		}
	}
	return Mode{}, false
}

// Result is one mode's measurements on one scenario, in simulated
// seconds.
type Result struct {
	Scenario     string  `json:"scenario"`
	Mode         string  `json:"mode"`
	Trajectories int     `json:"trajectories"`
	Completed    int     `json:"completed"`
	MakespanS    float64 `json:"makespan_s"`
	BoundS       float64 `json:"bound_s"`
	VsBound      float64 `json:"makespan_vs_bound"`
	MeanLatencyS float64 `json:"mean_latency_s"`
	P99LatencyS  float64 `json:"p99_latency_s"`
	TokensPerS   float64 `json:"generated_tokens_per_s"`
	// SlotUse is the mean share of the replicas' slots (running limit)
	// holding a request over the makespan; SlotUseSeries samples it every
	// SlotUseStepS simulated seconds from the start.
	SlotUse       float64   `json:"slot_use"`
	SlotUseStepS  float64   `json:"slot_use_step_s"`
	SlotUseSeries []float64 `json:"slot_use_series"`
	Preemptions   int64     `json:"preemptions"`
	ResumedTokens int64     `json:"resumed_tokens"`
	// WastedTokens is output thrown away and generated again: on the live
	// engine by a server's own abort; on the virtual engine by a weight
	// sync that discards partials (AblatePartialRollout), per run.
	WastedTokens int64 `json:"wasted_tokens"`
	Reprefilled  int64 `json:"reprefilled_tokens"`
	// With weight syncs: how many, and per trajectory the spread of the
	// weight versions its tokens came from (max − min), mean and largest.
	Syncs          int     `json:"syncs,omitempty"`
	VersionSpread  float64 `json:"version_spread_mean,omitempty"`
	VersionSpreadX int32   `json:"version_spread_max,omitempty"`
	WallS          float64 `json:"wall_s"`
	// Where the makespan goes: the trajectory that finished last waited
	// LastAdmitS for admission and then ran LastRunS against its own
	// critical path LastPathS; over all trajectories, the mean admission
	// wait and the mean stretch (run time over critical path).
	LastAdmitS     float64 `json:"last_admit_wait_s"`
	LastRunS       float64 `json:"last_run_s"`
	LastPathS      float64 `json:"last_path_s"`
	MeanAdmitWaitS float64 `json:"mean_admit_wait_s"`
	MeanStretch    float64 `json:"mean_stretch"`

	// The virtual engine's figures. Every figure above is then the mean
	// over Seeds runs (counters per run), the makespan's spread is
	// MakespanMinS..MakespanMaxS, and the bound splits into the work
	// (BoundWorkS) and the longest critical path (BoundPathS).
	Engine string `json:"engine"`
	// Machine is the virtual engine's servers' model and GPUs
	// (MachineNames).
	Machine             string  `json:"machine,omitempty"`
	Seeds               int     `json:"seeds,omitempty"`
	MakespanMinS        float64 `json:"makespan_min_s,omitempty"`
	MakespanMaxS        float64 `json:"makespan_max_s,omitempty"`
	BoundWorkS          float64 `json:"bound_work_s,omitempty"`
	BoundPathS          float64 `json:"bound_path_s,omitempty"`
	SpeedupVsTrajectory float64 `json:"speedup_vs_trajectory,omitempty"` // trajectory's makespan over this one's
	SpeedupVsAsync      float64 `json:"speedup_vs_async,omitempty"`
	// SpeedupVsBestTuned is the best of the trajectory-tuned,
	// async-capped-tuned and async rows (BestTuned names it) over this
	// row's makespan (on a steady-state scenario, this row's trainable
	// trajectories per GPU-hour over the best's): above 1, this row beats
	// every baseline as its users would tune it.
	SpeedupVsBestTuned float64 `json:"speedup_vs_best_tuned,omitempty"`
	BestTuned          string  `json:"best_tuned,omitempty"`
	// A tuned row's setting of its knob (Mode.Tune) with the least mean
	// makespan over the seeds, and every setting tried as [setting, mean
	// makespan s], in the order of the setting; on a steady-state scenario
	// the score is GPU-seconds per trainable trajectory instead of the
	// makespan; on a drifting one Cap and Sweep are the first batch's and
	// BatchCaps the setting each batch ran at.
	Cap         int          `json:"cap,omitempty"`
	Sweep       [][2]float64 `json:"sweep,omitempty"`
	BatchCaps   []int        `json:"batch_caps,omitempty"`
	Retractions int64        `json:"retractions"`
	// Holds counts the trajectories held for want of room (priority.KVPools.Hold),
	// each time one was, per run.
	Holds           int64 `json:"holds,omitempty"`
	PrefilledTokens int64 `json:"prefilled_tokens,omitempty"`
	CachedTokens    int64 `json:"cached_tokens,omitempty"`
	// With a host tier (a "-hicache" scenario): input tokens loaded back
	// from host memory instead of prefilled, and the seconds of those
	// loads (summed over the servers), per run.
	LoadedTokens int64   `json:"loaded_tokens,omitempty"`
	LoadS        float64 `json:"load_s,omitempty"`
	// Batches is a drifting scenario's batches, run one after the other:
	// the makespan, the bound and the counters are their sums.
	Batches int `json:"batches,omitempty"`
	// A steady-state scenario's trainer (virtual engine): trainable
	// trajectories per GPU-hour after the warm-up, their mean staleness
	// (weight versions behind when taken), the trajectories dropped as
	// stale per run, and the batches taken. The makespan is then when the
	// last batch was taken.
	TrainablePerGPUHour float64 `json:"trainable_per_gpu_hour,omitempty"`
	MeanStaleness       float64 `json:"mean_staleness,omitempty"`
	DroppedStale        int     `json:"dropped_stale,omitempty"`
	TrainerBatches      int     `json:"trainer_batches,omitempty"`
	// KVUse is the mean share of the servers' token pools held by running
	// requests (sglang:token_usage), KVUseSeries samples it every
	// KVUseStepS; BusyShare is the share of the makespan the servers spent
	// in iterations.
	KVUse       float64   `json:"kv_use,omitempty"`
	KVUseStepS  float64   `json:"kv_use_step_s,omitempty"`
	KVUseSeries []float64 `json:"kv_use_series,omitempty"`
	BusyShare   float64   `json:"busy_share,omitempty"`
	// InputPerCall is the mean input tokens of a generation call.
	InputPerCall float64 `json:"input_tokens_per_call,omitempty"`
	// Mean seconds a trajectory spent with its gen step queued at its
	// gen-worker, at its server (queued, prefilling, decoding) and in its
	// sandbox (start-up, commands, eval).
	MeanGenQueueS float64 `json:"mean_gen_queue_s,omitempty"`
	MeanServerS   float64 `json:"mean_server_s,omitempty"`
	MeanEnvS      float64 `json:"mean_env_s,omitempty"`
	// The predictor's error (virtual engine): the share of the times asked
	// that it predicted, the mean absolute error of remaining tokens, and
	// Spearman's rank correlation of predicted with true remaining tokens.
	PredCoverage float64 `json:"predictor_coverage,omitempty"`
	PredMAE      float64 `json:"predictor_mae_tokens,omitempty"`
	PredRankCorr float64 `json:"predictor_rank_corr,omitempty"`
}

// Scheduling is what `actloop bench` runs: one simulated workload per
// scenario under several scheduling modes, each on a fresh in-process
// stack.
type Scheduling struct {
	Scenarios string // comma-separated scenario names, or "all"
	Modes     string // comma-separated mode names
	// Engine is EngineVirtual (the default) or EngineLive.
	Engine string
	// Seeds is how many seeds the virtual engine runs each scenario with
	// (Seed, Seed+1, ...); its figures are the mean over them.
	Seeds int
	// Tasks, Replicas and Slots: trajectories per scenario, inference
	// replicas, and each gen-worker's slots (on the live engine also each
	// simulated replica's running limit). 0: the scenario's own, or 96, 2
	// and 8 for the small scenarios.
	Tasks    int
	Replicas int
	Slots    int
	// TimeScale is wall seconds per simulated second.
	TimeScale float64
	// SyncEvery is simulated seconds between weight syncs in the -sync
	// modes (0: the scenario's own, else 60).
	SyncEvery float64
	// PauseMS is a weight sync's pause on a steady-state scenario, trainer
	// side, in milliseconds; 0: SyncJSON's pause_p50_ms (what bench-sync
	// measured), SyncJSON "" meaning bench/sync.json.
	PauseMS  float64
	SyncJSON string
	// Machine is the servers' model and GPUs on the virtual engine
	// (MachineNames; "": MachineA100Llama8B).
	Machine string
	Seed    int64  // workload and simulator seed: same seed, same batch
	JSON    bool   // one JSON array instead of a table
	Charts  string // a directory for a PNG chart per scenario ("": none)
	Outputs Outputs
}

// plan resolves the modes and scenarios named, and checks the numbers.
func (s Scheduling) plan() ([]Mode, []workload.Scenario, error) {
	var errs []error
	var modes []Mode
	for _, n := range strings.Split(s.Modes, ",") {
		m, ok := lookupMode(strings.TrimSpace(n))
		if !ok {
			errs = append(errs, fmt.Errorf("--modes: unknown mode %q (want some of %s)", n, strings.Join(ModeNames(), ", ")))
			continue
		}
		modes = append(modes, m)
	}
	var scs []workload.Scenario
	if s.Scenarios == "all" {
		for _, sc := range workload.Scenarios {
			if s.Engine != EngineLive || sc.Tasks == 0 {
				scs = append(scs, sc)
			}
		}
	} else {
		for _, n := range strings.Split(s.Scenarios, ",") {
			sc, ok := workload.Lookup(strings.TrimSpace(n))
			if !ok {
				errs = append(errs, fmt.Errorf("--scenarios: unknown scenario %q (want all or some of %s)", n, strings.Join(ScenarioNames(), ", ")))
				continue
			}
			scs = append(scs, sc)
		}
	}
	switch s.Engine {
	case EngineVirtual, "":
	case EngineLive:
		for _, m := range modes {
			if m.Tune != "" {
				errs = append(errs, fmt.Errorf("--modes: %s sweeps its %s, which only the virtual engine does", m.Name, m.Tune))
			}
			if m.With != "" {
				errs = append(errs, fmt.Errorf("--modes: %s turns on %s, which only the virtual engine runs (the services do not have it yet)", m.Name, m.With))
			}
			if m.Without == AblatePartialRollout {
				errs = append(errs, fmt.Errorf("--modes: %s turns off %s at a batch's end, which only the virtual engine's trainer does (steady-state scenarios)", m.Name, m.Without))
			}
		}
		for _, sc := range scs {
			if sc.Tasks > 0 && s.Tasks == 0 {
				errs = append(errs, fmt.Errorf("--scenarios: %s is RL-scale (%d trajectories): run it with --engine virtual, or give --tasks", sc.Name, sc.Tasks))
			}
		}
	default:
		errs = append(errs, fmt.Errorf("--engine: unknown engine %q (want %s or %s)", s.Engine, EngineVirtual, EngineLive))
	}
	for _, c := range []struct {
		flag string
		v    int
	}{{"--tasks", s.Tasks}, {"--replicas", s.Replicas}, {"--slots", s.Slots}, {"--seeds", s.Seeds}} {
		if c.v < 0 {
			errs = append(errs, fmt.Errorf("%s: must be >= 0 (0: the default), got %d", c.flag, c.v))
		}
	}
	for _, sc := range scs {
		if sc.Steady != nil && s.Engine == EngineLive {
			errs = append(errs, fmt.Errorf("--scenarios: %s is steady-state RL, which only the virtual engine runs", sc.Name))
		}
		if sc.Server != (workload.ServerOptions{}) && s.Engine == EngineLive {
			errs = append(errs, fmt.Errorf("--scenarios: %s sets server options (%+v), which only the virtual engine runs", sc.Name, sc.Server))
		}
		if len(sc.Drift) > 0 && s.Engine == EngineLive {
			errs = append(errs, fmt.Errorf("--scenarios: %s drifts over %d batches, which only the virtual engine runs", sc.Name, len(sc.Drift)))
		}
	}
	if _, err := machineServer(s.Machine); err != nil {
		errs = append(errs, err)
	} else if s.Engine == EngineLive && s.Machine != "" && s.Machine != MachineA100Llama8B {
		errs = append(errs, fmt.Errorf("--machine: %s is modelled by the virtual engine only (the live engine's simulator runs %s)", s.Machine, MachineA100Llama8B))
	}
	if s.PauseMS < 0 {
		errs = append(errs, fmt.Errorf("--pause-ms: must be >= 0 (0: --sync-json's pause_p50_ms), got %g", s.PauseMS))
	}
	if s.Engine == EngineLive && s.TimeScale <= 0 {
		errs = append(errs, errors.New("--time-scale: must be positive"))
	}
	return modes, scs, errors.Join(errs...)
}

// Validate joins every problem with s, each naming its flag.
func (s Scheduling) Validate() error {
	_, _, err := s.plan()
	return err
}

// RunScheduling runs s and writes the results to stdout (a table, or one
// JSON array with s.JSON) and its progress to stderr. It fails if two modes
// produced other tokens for a trajectory: scheduling changes when, never
// what.
func RunScheduling(ctx context.Context, s Scheduling, stdout, stderr io.Writer) error {
	chosen, scs, err := s.plan()
	if err != nil {
		return err
	}
	if slices.ContainsFunc(scs, func(sc workload.Scenario) bool { return sc.Steady != nil }) && s.PauseMS == 0 {
		if s.PauseMS, err = pauseFrom(cmp.Or(s.SyncJSON, DefaultSyncJSON)); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "bench: a weight sync pauses generation %.0f ms (pause_p50_ms of %s)\n", s.PauseMS, cmp.Or(s.SyncJSON, DefaultSyncJSON))
	}
	o := runOpts{timeScale: s.TimeScale, seed: s.Seed}
	log, closeLog, err := s.Outputs.logger()
	if err != nil {
		return err
	}
	defer closeLog()
	o.log = log
	stopProfile, err := s.Outputs.profile()
	if err != nil {
		return err
	}
	defer stopProfile()
	var results []Result
	for _, sc := range scs {
		var rs []Result
		var err error
		modes := chosen
		if sc.Batches() == 1 { // one batch: trajectory-first-batch is trajectory-tuned
			modes = slices.DeleteFunc(slices.Clone(chosen), func(m Mode) bool { return m.FirstBatch })
		}
		if s.Engine == EngineLive {
			rs, err = s.runLive(ctx, sc, modes, o, stderr)
		} else {
			rs, err = s.runVirtual(sc, modes, stderr)
		}
		if err != nil {
			return err
		}
		results = append(results, rs...)
	}
	if s.Charts != "" {
		files, err := writeCharts(s.Charts, results)
		if err != nil {
			return err
		}
		for _, f := range files {
			fmt.Fprintf(stderr, "bench: wrote %s\n", f)
		}
	}
	if s.JSON {
		b, _ := json.Marshal(results)
		_, err := fmt.Fprintln(stdout, string(b))
		return err
	}
	if s.Engine == EngineLive {
		return liveTable(stdout, results)
	}
	return virtualTable(stdout, results)
}

// DefaultSyncJSON is where `make bench` writes bench-sync's figures.
const DefaultSyncJSON = "bench/sync.json"

// pauseFrom reads the median pause (pause_p50_ms) from a bench-sync JSON
// report.
func pauseFrom(path string) (float64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("--sync-json: the steady-state scenario takes its pause from bench-sync's report: %w (or give --pause-ms)", err)
	}
	var rep struct {
		P50 float64 `json:"pause_p50_ms"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		return 0, fmt.Errorf("--sync-json: %s: %w", path, err)
	}
	if rep.P50 <= 0 {
		return 0, fmt.Errorf("--sync-json: %s has no positive pause_p50_ms (got %g): give --pause-ms", path, rep.P50)
	}
	return rep.P50, nil
}

// capOf is a tuned row's chosen setting, "-" for any other row.
func capOf(r Result) string {
	if r.Cap == 0 {
		return "-"
	}
	return strconv.Itoa(r.Cap)
}

// capsOf is capOf, with the setting of each batch of a drifting scenario.
func capsOf(r Result) string {
	if len(r.BatchCaps) == 0 {
		return capOf(r)
	}
	parts := make([]string, len(r.BatchCaps))
	for i, c := range r.BatchCaps {
		parts[i] = strconv.Itoa(c)
	}
	return strings.Join(parts, "/")
}

// liveTable prints the live engine's results.
func liveTable(stdout io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tmode\tdone\tmakespan s\t× bound\tmean lat s\tp99 lat s\ttok/s\tslot use\tpreempt\twasted tok\tre-prefill tok\tsyncs\tversion spread\tlast: wait+run / path s\tmean stretch\twall s\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%.0f\t%.2f\t%.0f\t%.0f\t%.0f\t%.2f\t%d\t%d\t%d\t%d\t%.1f / %d\t%.0f+%.0f / %.0f\t%.2f\t%.1f\t\n", r.Scenario, r.Mode, r.Completed,
			r.Trajectories, r.MakespanS, r.VsBound, r.MeanLatencyS, r.P99LatencyS, r.TokensPerS, r.SlotUse,
			r.Preemptions, r.WastedTokens, r.Reprefilled, r.Syncs, r.VersionSpread, r.VersionSpreadX,
			r.LastAdmitS, r.LastRunS, r.LastPathS, r.MeanStretch, r.WallS)
	}
	return tw.Flush()
}

// virtualTable prints the virtual engine's results: means over the seeds.
func virtualTable(stdout io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tmode\tdone\tmakespan s\tmin–max s\t× bound\t× best tuned\t× trajectory\t× async\tcap\ttrainable/GPU-h\tstaleness\tdropped\tmean lat s\ttok/s\tKV use\tbusy\tpreempt\tre-prefill tok\tloaded tok\tretract\tsyncs\tqueue/server/env s\tpred MAE tok\tpred rank ρ\twall s\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%.0f\t%.0f–%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t%.1f\t%.2f\t%d\t%.0f\t%.0f\t%.2f\t%.2f\t%d\t%d\t%d\t%d\t%d\t%.0f/%.0f/%.0f\t%.0f\t%.2f\t%.1f\t\n",
			r.Scenario, r.Mode, r.Completed, r.Trajectories, r.MakespanS, r.MakespanMinS, r.MakespanMaxS, r.VsBound,
			r.SpeedupVsBestTuned, r.SpeedupVsTrajectory, r.SpeedupVsAsync, capsOf(r), r.TrainablePerGPUHour, r.MeanStaleness, r.DroppedStale,
			r.MeanLatencyS, r.TokensPerS, r.KVUse, r.BusyShare,
			r.Preemptions, r.Reprefilled, r.LoadedTokens, r.Retractions, r.Syncs, r.MeanGenQueueS, r.MeanServerS, r.MeanEnvS,
			r.PredMAE, r.PredRankCorr, r.WallS)
	}
	return tw.Flush()
}

// runLive runs every chosen mode on sc, each on a fresh in-process stack,
// and checks that they produced the same tokens.
func (s Scheduling) runLive(ctx context.Context, sc workload.Scenario, chosen []Mode, o runOpts, stderr io.Writer) ([]Result, error) {
	o.tasks, o.syncEvery = s.tasksOf(sc), s.syncEveryOf(sc)
	o.replicas, o.slots = s.machine(sc)
	var results []Result
	plans := sc.Generate(o.seed, o.tasks)
	bound := virtual.LowerBound(plans, virtual.Defaults(o.replicas, o.slots))
	var ref map[string]uint64
	var refFull map[string]schema.Result
	refMode := ""
	for _, m := range chosen {
		if !s.JSON {
			fmt.Fprintf(stderr, "bench: %s / %s ...\n", sc.Name, m.Name)
		}
		r, prints, full, err := runOne(ctx, m, plans, o)
		if err != nil {
			return nil, fmt.Errorf("bench %s/%s: %w", sc.Name, m.Name, err)
		}
		r.Scenario, r.Engine, r.BoundS, r.VsBound = sc.Name, EngineLive, bound.S, r.MakespanS/bound.S
		results = append(results, r)
		// Fidelity: scheduling changes when, never what.
		if ref == nil {
			ref, refFull, refMode = prints, full, m.Name
			continue
		}
		for id, want := range ref {
			if got, ok := prints[id]; ok && got != want {
				return nil, fmt.Errorf("bench %s: FIDELITY: trajectory %s has other tokens under %s than under %s: %s",
					sc.Name, id, m.Name, refMode, firstDifference(refFull[id], full[id]))
			}
		}
	}
	return results, nil
}

// runOpts are the knobs shared by every run of one scheduling bench.
type runOpts struct {
	tasks, replicas, slots int
	timeScale, syncEvery   float64
	seed                   int64
	log                    *slog.Logger
}

// runOne runs the batch under one mode on a fresh stack. It returns the
// measurements and a fingerprint of each completed trajectory's tokens,
// log-probs and loss mask.
func runOne(ctx context.Context, m Mode, plans []workload.Trajectory, o runOpts) (Result, map[string]uint64, map[string]schema.Result, error) {
	tasks := len(plans)
	genSlots := o.slots
	if m.Kind == "async" {
		genSlots = tasks // every generation goes to the server at once; it queues the rest
	}
	// Every replica is the server model the virtual engine runs.
	model := batching.DefaultConfig()
	simCfg := sim.Config{TimeScale: o.timeScale, Seed: o.seed, Model: &model}
	st, sctx, stop, err := startBench(ctx, devstack.Options{Replicas: o.replicas, Slots: genSlots,
		EnvSlots: 2 * tasks, Sim: simCfg, Common: benchCommon(), Log: o.log})
	if err != nil {
		return Result{}, nil, nil, err
	}
	defer stop()

	cc := st.CoordinatorConfig()
	cc.Policy, cc.Slots = m.Policy, o.slots
	// Admission adapts on the simulated clock's scale: every few simulated
	// seconds, not every few wall seconds.
	cc.AdaptInterval = max(100*time.Millisecond, time.Duration(float64(5*time.Second)*o.timeScale))
	// Admission by KV reads predictions whatever the policy: every
	// action-level mode runs predictor-gw (the history backend unless the
	// mode names one), as the services do by default.
	predictorBackend := m.Predictor
	if predictorBackend == "" && m.Kind == "action" {
		predictorBackend = predictor.BackendHistory
	}
	if predictorBackend == "" {
		cc.PredictTimeout = 0
	}
	switch m.Without {
	case AblateKVAdmission:
		cc.KVBudget = 0
	case AblateHold:
		cc.Hold = false
	case AblateRankByTime:
		cc.RankBy = priority.RankByTokens
	}
	switch m.Kind {
	case "trajectory":
		cc.Scheduling = priority.SchedulingTrajectory
	case "async":
		cc.MaxActive, cc.MaxActiveCeiling = tasks, tasks
	default: // adapts from the default floor up to the whole batch
		if !m.Shipped {
			cc.MaxActiveCeiling = tasks
		}
	}
	if _, err := st.StartCoordinator(sctx, cc); err != nil {
		return Result{}, nil, nil, err
	}
	for _, r := range st.Replicas {
		gc := st.GenWorkerConfig(r)
		gc.Preempt = m.Kind == "action" && m.With == WithPreemption
		if m.Kind == "trajectory" {
			gc.Scheduling = priority.SchedulingTrajectory
		}
		if m.Without == AblateKVDispatch {
			gc.KVBudget = 0
		}
		gc.HeartbeatInterval = cc.AdaptInterval // what admission adapts to
		if predictorBackend == "" {
			gc.PredictTimeout = 0
		}
		if _, err := st.StartGenWorkerWith(sctx, gc, nil); err != nil {
			return Result{}, nil, nil, err
		}
	}
	ec := st.EnvWorkerConfig("env-0")
	ec.SimStartLatency, ec.SimExecLatency = 0, 0 // the workload's own times only
	if _, err := st.StartEnvWorker(sctx, ec); err != nil {
		return Result{}, nil, nil, err
	}
	if predictorBackend != "" {
		pc := st.PredictorConfig()
		pc.Backend, pc.OracleURL = predictorBackend, st.SimURLs[st.Replicas[0]]
		if err := st.StartPredictorWith(sctx, pc); err != nil {
			return Result{}, nil, nil, err
		}
	}
	d, err := st.Deps(ctx, "bench")
	if err != nil {
		return Result{}, nil, nil, err
	}
	defer d.Close()
	start := time.Now()
	for _, p := range plans {
		s := p.Sample()
		if err := d.Pub.Publish(ctx, schema.SubjectSamples, s.ID, s); err != nil {
			return Result{}, nil, nil, err
		}
	}
	syncs := make(chan int, 1)
	syncCtx, stopSyncs := context.WithCancel(sctx)
	if m.Sync {
		go func() {
			syncs <- syncEvery(syncCtx, d, st.SimURLs, time.Duration(o.syncEvery*o.timeScale*float64(time.Second)))
		}()
	} else {
		syncs <- 0
	}
	use := sampleSlotUse(syncCtx, st.Sims, o.replicas*o.slots, slotUseStep*o.timeScale)
	results, err := collectFull(ctx, d, tasks)
	stopSyncs()
	nSyncs := <-syncs
	series := <-use
	if err != nil {
		return Result{}, nil, nil, err
	}
	r := Result{Mode: m.Name, Trajectories: tasks, WallS: time.Since(start).Seconds(), Syncs: nSyncs}
	prints := make(map[string]uint64, len(results))
	var lat []float64
	var last time.Time
	tokens := 0
	paths := make(map[string]float64, len(plans))
	for i := range plans {
		paths[plans[i].ID] = virtual.Path(&plans[i], model.Cost)
	}
	simS := func(d time.Duration) float64 { return d.Seconds() / o.timeScale }
	for _, res := range results {
		wait, run := simS(res.AdmittedAt.Sub(start)), simS(res.FinishedAt.Sub(res.AdmittedAt))
		r.MeanAdmitWaitS += wait / float64(len(results))
		r.MeanStretch += run / paths[res.SampleID] / float64(len(results))
		if res.FinishedAt.After(last) {
			r.LastAdmitS, r.LastRunS, r.LastPathS = wait, run, paths[res.SampleID]
		}
		if schema.Trainable(res.Status) {
			r.Completed++
			prints[res.TrajID] = fingerprint(res)
			if m.Sync {
				spread := res.MaxVersion - res.MinVersion
				r.VersionSpread += float64(spread) / float64(tasks)
				r.VersionSpreadX = max(r.VersionSpreadX, spread)
			}
		}
		tokens += res.GenTokens
		lat = append(lat, res.FinishedAt.Sub(start).Seconds()/o.timeScale)
		if res.FinishedAt.After(last) {
			last = res.FinishedAt
		}
	}
	slices.Sort(lat)
	r.MakespanS = last.Sub(start).Seconds() / o.timeScale
	for _, l := range lat {
		r.MeanLatencyS += l / float64(len(lat))
	}
	r.P99LatencyS = lat[min(len(lat)-1, len(lat)*99/100)]
	r.TokensPerS = float64(tokens) / r.MakespanS
	r.SlotUseStepS = slotUseStep
	r.SlotUseSeries = series[:min(len(series), int(math.Ceil(r.MakespanS/slotUseStep)))]
	for _, u := range r.SlotUseSeries {
		r.SlotUse += u / float64(len(r.SlotUseSeries))
	}
	for _, rep := range st.Replicas {
		if w := st.GenWorker(rep); w != nil {
			s := w.Stats()
			r.Preemptions += s.Preemptions
			r.ResumedTokens += s.ResumedTokens
			r.WastedTokens += s.WastedTokens
			r.Reprefilled += s.ReprefilledTokens
		}
	}
	var calls, input int64
	for _, sv := range st.Sims {
		ss := sv.Stats()
		calls += ss.Requests
		input += ss.PromptTokens
	}
	r.InputPerCall = float64(input) / float64(max(calls, 1))
	return r, prints, results, nil
}

// slotUseStep is how often, in simulated seconds, the bench samples the
// replicas' slot use.
const slotUseStep = 2.0

// sampleSlotUse samples, every step wall seconds until ctx ends, the share
// of the simulators' slots holding a request, and then sends the series.
func sampleSlotUse(ctx context.Context, sims map[string]*sim.Server, slots int, step float64) <-chan []float64 {
	out := make(chan []float64, 1)
	go func() {
		var series []float64
		t := time.NewTicker(time.Duration(step * float64(time.Second)))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				out <- series
				return
			case <-t.C:
			}
			running := 0
			for _, s := range sims {
				running += s.Stats().Running
			}
			series = append(series, min(1, float64(running)/float64(slots)))
		}
	}()
	return out
}

// fingerprint hashes what a trajectory produced: tokens, log-probs, mask.
func fingerprint(r schema.Result) uint64 {
	h := fnv.New64a()
	for i, t := range r.Tokens {
		var b [13]byte
		b[0], b[1], b[2], b[3] = byte(t), byte(t>>8), byte(t>>16), byte(t>>24)
		lp := math.Float32bits(r.Logprobs[i])
		b[4], b[5], b[6], b[7] = byte(lp), byte(lp>>8), byte(lp>>16), byte(lp>>24)
		b[8] = byte(r.LossMask[i])
		_, _ = h.Write(b[:9])
	}
	return h.Sum64()
}

// firstDifference describes where two runs of a trajectory part.
func firstDifference(a, b schema.Result) string {
	n := min(len(a.Tokens), len(b.Tokens))
	i := 0
	for i < n && a.Tokens[i] == b.Tokens[i] && a.Logprobs[i] == b.Logprobs[i] && a.LossMask[i] == b.LossMask[i] {
		i++
	}
	window := func(r schema.Result) string {
		var sb strings.Builder
		for _, t := range r.Tokens[max(0, i-40):min(len(r.Tokens), i+40)] {
			sb.WriteRune(rune(t)) // the simulator's tokens are bytes
		}
		return strconv.Quote(sb.String())
	}
	return fmt.Sprintf("%d and %d tokens (%d and %d turns), first difference at token %d: %s against %s",
		len(a.Tokens), len(b.Tokens), a.Turns, b.Turns, i, window(a), window(b))
}
