package bench

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"math"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/actloop/actloop/internal/batching"
	"github.com/actloop/actloop/internal/genworker"
	"github.com/actloop/actloop/internal/predictor"
	"github.com/actloop/actloop/internal/virtual"
	"github.com/actloop/actloop/internal/workload"
	"github.com/actloop/actloop/pkg/priority"
)

// Engines.
const (
	EngineVirtual = "virtual" // discrete-event simulation over the services' scheduling code
	EngineLive    = "live"    // the in-process stack against the inference simulator
)

// virtualConfig is the engine configuration of mode m on scenario sc.
func (s Scheduling) virtualConfig(m Mode, sc workload.Scenario, tasks int) virtual.Config {
	replicas, slots := s.machine(sc)
	if m.Shipped {
		slots = shippedSlots()
	}
	cfg := virtual.Defaults(replicas, slots)
	cfg.Server = s.serverOf(sc)
	cfg.Kind, cfg.Policy = m.Kind, m.Policy
	switch m.Predictor {
	case predictor.BackendHistory:
		cfg.Predictor = virtual.PredictHistory
	case predictor.BackendOracle:
		cfg.Predictor = virtual.PredictOracle
	case predictor.BackendLearned:
		cfg.Predictor = virtual.PredictLearned
	}
	switch {
	case m.Shipped: // the services' own floor and ceiling
	case m.Kind == virtual.KindTrajectory: // ACTLOOP_SCHEDULING=trajectory
	case m.Kind == virtual.KindAsync:
		cfg.MaxActive, cfg.MaxActiveCeiling = tasks, tasks
	default: // adapts from the default floor up to the whole batch
		cfg.MaxActiveCeiling = tasks
	}
	if st := sc.Steady; st != nil { // the trainer's syncs, the same for every mode
		cfg.Trainer = &virtual.Trainer{BatchSize: st.BatchSize, Batches: st.Batches, WarmupBatches: st.WarmupBatches,
			MaxStaleness: st.MaxStaleness, DiscardPartials: m.Without == AblatePartialRollout}
		cfg.SyncPauseS = s.PauseMS / 1000
	} else if m.Sync {
		cfg.SyncEvery = s.syncEveryOf(sc)
	}
	switch m.Without {
	case AblateKVAdmission:
		cfg.KVBudget = 0
	case AblateKVDispatch:
		cfg.DispatchKVBudget = 0
	case AblateHold:
		cfg.Hold = false
	case AblateRankByTime:
		cfg.RankBy = priority.RankByTokens
	}
	cfg.KVResidency = m.With == WithKVResidency
	cfg.Preempt = m.Kind == virtual.KindAction && (m.With == WithPreemption || m.With == WithReferenceLoop)
	if m.With == WithReferenceLoop {
		// A semaphore a replica, over-subscribed 1.5 × (async_factor),
		// fixed and by count; the slots and the preemption of the newest
		// low generation are the gen-workers'.
		cfg.Dispatch = virtual.DispatchReference
		cfg.MaxActive = 3 * slots / 2 * replicas
		cfg.MaxActiveCeiling = cfg.MaxActive
		cfg.KVBudget = 0
	}
	return cfg
}

// Machines the virtual engine's servers model (--machine): a model on its
// GPUs, each a calibrated cost model (docs/calibration.md) and SGLang's
// configuration for it.
const (
	// MachineA100Llama8B is Llama-3.1-8B on one A100 80GB
	// (batching.DefaultConfig); the default.
	MachineA100Llama8B = "a100-llama8b"
	// MachineH100CodeLlama34BTP2 is CodeLlama-34B on two H100 80GB at
	// tensor parallel 2 (batching.H100CodeLlama34BTP2Config): a replica is
	// two GPUs.
	MachineH100CodeLlama34BTP2 = "h100-codellama34b-tp2"
)

// MachineNames are the machines --machine takes.
func MachineNames() []string {
	return []string{MachineA100Llama8B, MachineH100CodeLlama34BTP2}
}

// machineServer is the server model of machine name ("" for the default).
func machineServer(name string) (batching.Config, error) {
	switch name {
	case "", MachineA100Llama8B:
		return batching.DefaultConfig(), nil
	case MachineH100CodeLlama34BTP2:
		return batching.H100CodeLlama34BTP2Config(), nil
	}
	return batching.Config{}, fmt.Errorf("--machine: unknown machine %q (want %s)", name, strings.Join(MachineNames(), " or "))
}

// serverOf is the server model of scenario sc: the machine's defaults with
// its server options (workload.ServerOptions), which plan has checked.
func (s Scheduling) serverOf(sc workload.Scenario) batching.Config {
	base, err := machineServer(s.Machine)
	if err != nil {
		panic(err)
	}
	c, err := base.WithKVDtype(sc.Server.KVDtype)
	if err != nil {
		panic(fmt.Sprintf("scenario %s: %v", sc.Name, err))
	}
	if sc.Server.HiCache {
		if c, err = c.WithHiCache(batching.DefaultHiCacheRatio, 0, batching.WriteThrough, c.HostLoadGBps); err != nil {
			panic(fmt.Sprintf("scenario %s: %v", sc.Name, err))
		}
	}
	return c
}

// withKnob is cfg with a tuned mode's knob set to v per replica.
func withKnob(cfg virtual.Config, tune string, v int) virtual.Config {
	switch tune {
	case TuneSlots:
		cfg.Slots = v // the admission limit is slots × replicas
	case TuneCap:
		cfg.MaxActive, cfg.MaxActiveCeiling = v*cfg.Replicas, v*cfg.Replicas
	}
	return cfg
}

// shippedSlots is the gen-workers' default ACTLOOP_SLOTS.
func shippedSlots() int {
	f, _ := reflect.TypeFor[genworker.Config]().FieldByName("Slots")
	n, err := strconv.Atoi(f.Tag.Get("default"))
	if err != nil {
		panic(fmt.Sprintf("genworker.Config.Slots: default %q: %v", f.Tag.Get("default"), err))
	}
	return n
}

// machine is the replicas and slots of a scenario: its own unless the
// flags say otherwise.
func (s Scheduling) machine(sc workload.Scenario) (replicas, slots int) {
	return cmp.Or(s.Replicas, sc.Replicas, 2), cmp.Or(s.Slots, sc.Slots, 8)
}

// syncEveryOf is the seconds between weight syncs on sc: --sync-every,
// else the scenario's own, else 60.
func (s Scheduling) syncEveryOf(sc workload.Scenario) float64 {
	switch {
	case s.SyncEvery > 0:
		return s.SyncEvery
	case sc.SyncEvery > 0:
		return sc.SyncEvery
	}
	return 60
}

// tasksOf is the batch size of a scenario: its own unless --tasks says.
func (s Scheduling) tasksOf(sc workload.Scenario) int {
	return cmp.Or(s.Tasks, sc.Tasks, 96)
}

// job is one run of the virtual engine.
type job struct {
	name    string // mode, and the knob's setting of a tuned mode
	cfg     virtual.Config
	batch   int // the scenario's batch (0 unless it drifts)
	seed    int // index into the plans
	res     virtual.Result
	err     error
	elapsed time.Duration
}

// runJobs runs jobs on every core; the first error names its run.
func (s Scheduling) runJobs(sc workload.Scenario, plans [][][]workload.Trajectory, jobs []*job) error {
	work := make(chan *job)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for j := range work {
				start := time.Now()
				j.res, j.err = virtual.Run(j.cfg, plans[j.batch][j.seed])
				j.elapsed = time.Since(start)
			}
		})
	}
	for _, j := range jobs {
		work <- j
	}
	close(work)
	wg.Wait()
	for _, j := range jobs {
		if j.err != nil {
			return fmt.Errorf("bench %s/%s batch %d seed %d: %w", sc.Name, j.name, j.batch+1, s.Seed+int64(j.seed), j.err)
		}
	}
	return nil
}

// score is what a tuned mode's sweep minimises on sc: the makespan, or on
// a steady-state scenario the GPU-seconds per trainable trajectory.
func score(sc workload.Scenario) func(virtual.Result) float64 {
	if sc.Steady == nil {
		return func(r virtual.Result) float64 { return r.MakespanS }
	}
	return func(r virtual.Result) float64 {
		if r.Trainer == nil || r.Trainer.TrainablePerGPUHour <= 0 {
			return math.MaxFloat64
		}
		return 3600 / r.Trainer.TrainablePerGPUHour
	}
}

// runVirtual runs every chosen mode on sc with the virtual engine, once
// per seed (and per batch of a drifting scenario), and sweeps each tuned
// mode's knob, the runs in parallel; the same settings give the same
// figures whatever the machine. A tuned mode is swept on every batch
// (re-tuned as the workload drifts), or with Mode.FirstBatch on the first
// batch only, its setting then held for the others.
func (s Scheduling) runVirtual(sc workload.Scenario, modes []Mode, stderr io.Writer) ([]Result, error) {
	tasks := s.tasksOf(sc)
	seeds := max(s.Seeds, 1)
	replicas, slots := s.machine(sc)
	nb := sc.Batches()
	plans := make([][][]workload.Trajectory, nb) // [batch][seed]
	bounds := make([][]virtual.Bound, nb)
	for b := range nb {
		bs := sc.Batch(b)
		for k := range seeds {
			p := bs.Generate(workload.BatchSeed(s.Seed+int64(k), b), tasks)
			plans[b] = append(plans[b], p)
			if sc.Steady == nil { // a steady run stops before its supply is done: no bound
				bc := virtual.Defaults(replicas, slots)
				bc.Server = s.serverOf(sc)
				bounds[b] = append(bounds[b], virtual.LowerBound(p, bc))
			} else {
				bounds[b] = append(bounds[b], virtual.Bound{})
			}
		}
	}
	perSeed := func(name string, cfg virtual.Config, b int) []*job {
		js := make([]*job, seeds)
		for k := range js {
			js[k] = &job{name: name, cfg: cfg, batch: b, seed: k}
		}
		return js
	}
	// The fixed modes and each sweep's first settings run together; each
	// sweep then goes on while it finds better settings.
	fixed := make([][][]*job, len(modes)) // [mode][batch][seed]
	var sweeps []*sweep
	var jobs []*job
	for i, m := range modes {
		if m.Tune == "" {
			for b := range nb {
				js := perSeed(m.Name, s.virtualConfig(m, sc, tasks), b)
				fixed[i] = append(fixed[i], js)
				jobs = append(jobs, js...)
			}
			continue
		}
		for b := range nb {
			if b > 0 && m.FirstBatch {
				break
			}
			w := newSweep(i, (tasks+replicas-1)/replicas)
			w.batch, w.score = b, score(sc)
			sweeps = append(sweeps, w)
		}
	}
	for {
		for _, w := range sweeps {
			for _, v := range w.wave() {
				m := modes[w.mode]
				w.runs[v] = perSeed(fmt.Sprintf("%s@%d", m.Name, v), withKnob(s.virtualConfig(m, sc, tasks), m.Tune, v), w.batch)
				jobs = append(jobs, w.runs[v]...)
			}
		}
		if len(jobs) == 0 {
			break
		}
		if err := s.runJobs(sc, plans, jobs); err != nil {
			return nil, err
		}
		jobs = nil
	}
	// A mode tuned on the first batch runs the others at its setting.
	held := map[int][][]*job{} // mode → [batch][seed], batch 0 the sweep's
	for _, w := range sweeps {
		m := modes[w.mode]
		if !m.FirstBatch {
			continue
		}
		best := w.best()
		held[w.mode] = [][]*job{w.runs[best]}
		for b := 1; b < nb; b++ {
			js := perSeed(fmt.Sprintf("%s@%d", m.Name, best), withKnob(s.virtualConfig(m, sc, tasks), m.Tune, best), b)
			held[w.mode] = append(held[w.mode], js)
			jobs = append(jobs, js...)
		}
	}
	if err := s.runJobs(sc, plans, jobs); err != nil {
		return nil, err
	}
	// row is the mean over the seeds of each seed's batches run one after
	// the other (byBatch: [batch][seed]).
	row := func(m Mode, byBatch [][]*job) Result {
		runs := make([]virtual.Result, seeds)
		bs := make([]virtual.Bound, seeds)
		for k := range seeds {
			parts := make([]virtual.Result, nb)
			for b := range nb {
				parts[b] = byBatch[b][k].res
				bs[k] = addBounds(bs[k], bounds[b][k])
			}
			runs[k] = inSequence(parts)
		}
		r := aggregate(runs, bs)
		r.Scenario, r.Mode, r.Engine, r.Machine = sc.Name, m.Name, EngineVirtual, cmp.Or(s.Machine, MachineA100Llama8B)
		if nb > 1 {
			r.Batches = nb
		}
		for _, js := range byBatch {
			r.WallS += wallOf(js)
		}
		return r
	}
	out := make([]Result, len(modes))
	for i, m := range modes {
		if fixed[i] != nil {
			out[i] = row(m, fixed[i])
		}
	}
	bySweepMode := map[int][]*sweep{}
	for _, w := range sweeps {
		bySweepMode[w.mode] = append(bySweepMode[w.mode], w)
	}
	for i, ws := range bySweepMode {
		var byBatch [][]*job
		if js, ok := held[i]; ok {
			byBatch = js
		} else {
			for _, w := range ws {
				byBatch = append(byBatch, w.runs[w.best()])
			}
		}
		r := row(modes[i], byBatch)
		r.Cap = ws[0].best()
		for _, v := range slices.Sorted(maps.Keys(ws[0].runs)) {
			r.Sweep = append(r.Sweep, [2]float64{float64(v), ws[0].mean(v)})
		}
		for b := 0; nb > 1 && b < nb; b++ {
			if held[i] != nil { // the first batch's, held
				r.BatchCaps = append(r.BatchCaps, r.Cap)
			} else {
				r.BatchCaps = append(r.BatchCaps, ws[b].best())
			}
		}
		for _, w := range ws {
			for v, js := range w.runs {
				if v != w.best() { // the best's are in the row's already
					r.WallS += wallOf(js)
				}
			}
		}
		out[i] = r
	}
	ratios(out)
	if !s.JSON {
		fmt.Fprintf(stderr, "bench: %s: %d modes × %d seeds × %d batches in %.1f s of CPU\n", sc.Name, len(modes), seeds, nb, sumWall(out))
	}
	return out, nil
}

// addBounds is the bound of two batches run one after the other.
func addBounds(a, b virtual.Bound) virtual.Bound {
	return virtual.Bound{DecodeS: a.DecodeS + b.DecodeS, PrefillS: a.PrefillS + b.PrefillS, WorkS: a.WorkS + b.WorkS,
		PathS: a.PathS + b.PathS, S: a.S + b.S}
}

// inSequence is the result of batches run one after the other: makespans
// and counters add up, means are weighted by trajectories (per-trajectory
// figures) or by makespan (shares of time), the last batch says what
// finished last.
func inSequence(parts []virtual.Result) virtual.Result {
	if len(parts) == 1 {
		return parts[0]
	}
	var r virtual.Result
	var trajs float64
	for _, p := range parts {
		trajs += float64(p.Completed)
		r.MakespanS += p.MakespanS
	}
	for _, p := range parts {
		wn, wt := float64(p.Completed)/trajs, p.MakespanS/r.MakespanS
		r.Trajectories += p.Trajectories
		r.Completed += p.Completed
		r.GeneratedTokens += p.GeneratedTokens
		r.Preemptions += p.Preemptions
		r.ResumedTokens += p.ResumedTokens
		r.DiscardedTokens += p.DiscardedTokens
		r.Reprefilled += p.Reprefilled
		r.Retractions += p.Retractions
		r.Holds += p.Holds
		r.Prefilled += p.Prefilled
		r.Cached += p.Cached
		r.Evicted += p.Evicted
		r.Loaded += p.Loaded
		r.LoadS += p.LoadS
		r.Iterations += p.Iterations
		r.Syncs += p.Syncs
		r.PeakActive = max(r.PeakActive, p.PeakActive)
		r.VersionSpreadX = max(r.VersionSpreadX, p.VersionSpreadX)
		r.VersionSpread += wn * p.VersionSpread
		r.MeanLatencyS += wn * p.MeanLatencyS
		r.P99LatencyS += wn * p.P99LatencyS
		r.MeanAdmitWaitS += wn * p.MeanAdmitWaitS
		r.MeanStretch += wn * p.MeanStretch
		r.MeanGenQueueS += wn * p.MeanGenQueueS
		r.MeanServerS += wn * p.MeanServerS
		r.MeanEnvS += wn * p.MeanEnvS
		r.InputPerCall += wn * p.InputPerCall
		r.PredCoverage += wn * p.PredCoverage
		r.PredMAE += wn * p.PredMAE
		r.PredRankCorr += wn * p.PredRankCorr
		r.KVUse += wt * p.KVUse
		r.BusyShare += wt * p.BusyShare
		r.KVUseStepS = p.KVUseStepS
		r.KVUseSeries = append(r.KVUseSeries, p.KVUseSeries...)
		r.LastAdmitS, r.LastRunS, r.LastPathS = p.LastAdmitS, p.LastRunS, p.LastPathS
	}
	r.TokensPerS = float64(r.GeneratedTokens) / r.MakespanS
	return r
}

// wallOf is the seconds js took to run, summed.
func wallOf(js []*job) float64 {
	w := 0.0
	for _, j := range js {
		w += j.elapsed.Seconds()
	}
	return w
}

// sweep finds the setting of a tuned mode's knob with the least mean
// makespan: first up a ladder of settings (1, 2, 3, 4, 6, 8, 12, 16, 24,
// ..., up to the batch per replica), two at a time, until the makespan has
// risen well past the best (the cliff); then at up to seven settings evenly
// spaced between the best's neighbours, and again around the new best with
// a finer step, down to a step of one.
type sweep struct {
	mode   int                          // index in the modes
	batch  int                          // the scenario's batch it is swept on
	score  func(virtual.Result) float64 // what it minimises (nil: the makespan)
	ladder []int                        // settings to try first, ascending
	next   int                          // index in ladder of the next setting to try
	step   int                          // the last refinement's step (0: none yet)
	runs   map[int][]*job
}

// sweepCliff ends the climb up the ladder: a setting whose mean makespan is
// this many times the best one's, on the far side of the best.
const sweepCliff = 1.5

func newSweep(mode, most int) *sweep {
	w := &sweep{mode: mode, runs: map[int][]*job{}}
	for v := 1; v < most; v = ladderNext(v) {
		w.ladder = append(w.ladder, v)
	}
	w.ladder = append(w.ladder, most)
	return w
}

// ladderNext is the ladder's step after v: 1, 2, 3, 4, 6, 8, 12, 16, 24, ...
func ladderNext(v int) int {
	if v < 4 {
		return v + 1
	}
	if v&(v-1) == 0 { // a power of two
		return v + v/2
	}
	return v + v/3
}

// mean is the mean score (makespan) of setting v's runs.
func (w *sweep) mean(v int) float64 {
	sum := 0.0
	for _, j := range w.runs[v] {
		if w.score != nil {
			sum += w.score(j.res)
		} else {
			sum += j.res.MakespanS
		}
	}
	return sum / float64(len(w.runs[v]))
}

// best is the setting tried with the least mean makespan (the smaller on
// a tie).
func (w *sweep) best() int {
	best := -1
	for _, v := range slices.Sorted(maps.Keys(w.runs)) {
		if best < 0 || w.mean(v) < w.mean(best) {
			best = v
		}
	}
	return best
}

// wave is the settings to try next, none when the sweep is done.
func (w *sweep) wave() []int {
	if w.next > 0 && w.next < len(w.ladder) {
		last := w.ladder[w.next-1]
		if best := w.best(); last > best && w.mean(last) > sweepCliff*w.mean(best) {
			w.next = len(w.ladder) // past the cliff
		}
	}
	if w.next < len(w.ladder) {
		wave := w.ladder[w.next:min(w.next+2, len(w.ladder))]
		w.next += len(wave)
		return wave
	}
	best := w.best()
	var lo, hi int
	switch w.step {
	case 1:
		return nil
	case 0: // between the best's neighbours on the ladder, as far as tried
		k := slices.Index(w.ladder, best)
		lo, hi = w.ladder[max(k-1, 0)], best
		if k+1 < len(w.ladder) && w.runs[w.ladder[k+1]] != nil {
			hi = w.ladder[k+1]
		}
	default:
		lo, hi = max(best-w.step, 1), min(best+w.step, w.ladder[len(w.ladder)-1])
	}
	w.step = max(1, (hi-lo+7)/8)
	var wave []int
	for v := lo + w.step; v < hi; v += w.step {
		if w.runs[v] == nil {
			wave = append(wave, v)
		}
	}
	if len(wave) == 0 && w.step > 1 {
		return w.wave()
	}
	return wave
}

func sumWall(rs []Result) float64 {
	w := 0.0
	for _, r := range rs {
		w += r.WallS
	}
	return w
}

// aggregate is the mean of runs (one per seed) as a Result, with the
// makespan's spread.
func aggregate(runs []virtual.Result, bounds []virtual.Bound) Result {
	n := float64(len(runs))
	r := Result{Trajectories: runs[0].Trajectories, Seeds: len(runs), MakespanMinS: math.Inf(1)}
	for k, v := range runs {
		r.Completed += v.Completed
		r.MakespanS += v.MakespanS / n
		r.MakespanMinS = min(r.MakespanMinS, v.MakespanS)
		r.MakespanMaxS = max(r.MakespanMaxS, v.MakespanS)
		if bounds[k].S > 0 {
			r.BoundS += bounds[k].S / n
			r.BoundWorkS += bounds[k].WorkS / n
			r.BoundPathS += bounds[k].PathS / n
			r.VsBound += v.MakespanS / bounds[k].S / n
		}
		if tr := v.Trainer; tr != nil {
			r.TrainablePerGPUHour += tr.TrainablePerGPUHour / n
			r.MeanStaleness += tr.MeanStaleness / n
			r.DroppedStale += tr.Dropped
			r.TrainerBatches = len(tr.Batches)
		}
		r.MeanLatencyS += v.MeanLatencyS / n
		r.P99LatencyS += v.P99LatencyS / n
		r.TokensPerS += v.TokensPerS / n
		r.Preemptions += v.Preemptions
		r.ResumedTokens += v.ResumedTokens
		r.WastedTokens += v.DiscardedTokens
		r.Reprefilled += v.Reprefilled
		r.Retractions += v.Retractions
		r.Holds += v.Holds
		r.PrefilledTokens += v.Prefilled
		r.CachedTokens += v.Cached
		r.LoadedTokens += v.Loaded
		r.LoadS += v.LoadS / n
		r.Syncs += v.Syncs
		r.VersionSpread += v.VersionSpread / n
		r.VersionSpreadX = max(r.VersionSpreadX, int32(v.VersionSpreadX))
		r.KVUse += v.KVUse / n
		r.BusyShare += v.BusyShare / n
		r.LastAdmitS += v.LastAdmitS / n
		r.LastRunS += v.LastRunS / n
		r.LastPathS += v.LastPathS / n
		r.MeanAdmitWaitS += v.MeanAdmitWaitS / n
		r.MeanStretch += v.MeanStretch / n
		r.MeanGenQueueS += v.MeanGenQueueS / n
		r.MeanServerS += v.MeanServerS / n
		r.MeanEnvS += v.MeanEnvS / n
		r.InputPerCall += v.InputPerCall / n
		r.PredCoverage += v.PredCoverage / n
		r.PredMAE += v.PredMAE / n
		r.PredRankCorr += v.PredRankCorr / n
	}
	r.Completed /= len(runs) // per seed, as Trajectories
	// Counters are per seed too.
	r.Preemptions /= int64(len(runs))
	r.ResumedTokens /= int64(len(runs))
	r.WastedTokens /= int64(len(runs))
	r.Reprefilled /= int64(len(runs))
	r.Retractions /= int64(len(runs))
	r.Holds /= int64(len(runs))
	r.PrefilledTokens /= int64(len(runs))
	r.CachedTokens /= int64(len(runs))
	r.LoadedTokens /= int64(len(runs))
	r.Syncs /= len(runs)
	r.DroppedStale /= len(runs)
	r.KVUseStepS, r.KVUseSeries = runs[0].KVUseStepS, runs[0].KVUseSeries
	return r
}

// Baselines is the rows a scenario's best tuned baseline is taken from.
var Baselines = []string{ModeTrajectoryTuned, ModeAsyncCappedTuned, "async"}

// ratios sets each row against the trajectory and async rows of its
// scenario and the best of its Baselines (0 when that row was not run): by
// makespan, or on a steady-state scenario (rows with a trainer) by
// trainable trajectories per GPU-hour.
func ratios(rs []Result) {
	steady := slices.ContainsFunc(rs, func(r Result) bool { return r.TrainerBatches > 0 })
	// cost is lower for a better row.
	cost := func(r Result) float64 {
		if !steady {
			return r.MakespanS
		}
		if r.TrainablePerGPUHour <= 0 {
			return math.Inf(1)
		}
		return 1 / r.TrainablePerGPUHour
	}
	ref := map[string]float64{}
	best, bestName := 0.0, ""
	for _, r := range rs {
		ref[r.Mode] = cost(r)
		if slices.Contains(Baselines, r.Mode) && (bestName == "" || cost(r) < best) {
			best, bestName = cost(r), r.Mode
		}
	}
	over := func(v float64, r Result) float64 {
		if math.IsInf(v, 1) || math.IsInf(cost(r), 1) {
			return 0
		}
		return v / cost(r)
	}
	for i := range rs {
		r := &rs[i]
		if v, ok := ref["trajectory"]; ok {
			r.SpeedupVsTrajectory = over(v, *r)
		}
		if v, ok := ref["async"]; ok {
			r.SpeedupVsAsync = over(v, *r)
		}
		if bestName != "" {
			r.SpeedupVsBestTuned, r.BestTuned = over(best, *r), bestName
		}
	}
}
