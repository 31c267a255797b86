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
	"sync"
	"time"

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
	if m.Sync {
		cfg.SyncEvery = s.syncEveryOf(sc)
	}
	switch m.Without {
	case AblateKVAdmission:
		cfg.KVBudget = 0
	case AblateKVDispatch:
		cfg.DispatchKVBudget = 0
	case AblatePreemption:
		cfg.Preempt = false
	case AblateRankByTime:
		cfg.RankBy = priority.RankByTokens
	}
	return cfg
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
	seed    int // index into the plans
	res     virtual.Result
	err     error
	elapsed time.Duration
}

// runJobs runs jobs on every core; the first error names its run.
func (s Scheduling) runJobs(sc workload.Scenario, plans [][]workload.Trajectory, jobs []*job) error {
	work := make(chan *job)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for j := range work {
				start := time.Now()
				j.res, j.err = virtual.Run(j.cfg, plans[j.seed])
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
			return fmt.Errorf("bench %s/%s seed %d: %w", sc.Name, j.name, s.Seed+int64(j.seed), j.err)
		}
	}
	return nil
}

// runVirtual runs every chosen mode on sc with the virtual engine, once
// per seed, and sweeps each tuned mode's knob, the runs in parallel; the
// same settings give the same figures whatever the machine.
func (s Scheduling) runVirtual(sc workload.Scenario, modes []Mode, stderr io.Writer) ([]Result, error) {
	tasks := s.tasksOf(sc)
	seeds := max(s.Seeds, 1)
	replicas, slots := s.machine(sc)
	plans := make([][]workload.Trajectory, seeds)
	bounds := make([]virtual.Bound, seeds)
	for k := range seeds {
		plans[k] = sc.Generate(s.Seed+int64(k), tasks)
		bounds[k] = virtual.LowerBound(plans[k], virtual.Defaults(replicas, slots))
	}
	perSeed := func(name string, cfg virtual.Config) []*job {
		js := make([]*job, seeds)
		for k := range js {
			js[k] = &job{name: name, cfg: cfg, seed: k}
		}
		return js
	}
	// The fixed modes and each sweep's first settings run together; each
	// sweep then goes on while it finds better settings.
	fixed := make([][]*job, len(modes))
	var sweeps []*sweep
	var jobs []*job
	for i, m := range modes {
		if m.Tune == "" {
			fixed[i] = perSeed(m.Name, s.virtualConfig(m, sc, tasks))
			jobs = append(jobs, fixed[i]...)
			continue
		}
		sweeps = append(sweeps, newSweep(i, (tasks+replicas-1)/replicas))
	}
	for {
		for _, w := range sweeps {
			for _, v := range w.wave() {
				m := modes[w.mode]
				w.runs[v] = perSeed(fmt.Sprintf("%s@%d", m.Name, v), withKnob(s.virtualConfig(m, sc, tasks), m.Tune, v))
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
	row := func(m Mode, js []*job) Result {
		runs := make([]virtual.Result, len(js))
		for k, j := range js {
			runs[k] = j.res
		}
		r := aggregate(runs, bounds)
		r.Scenario, r.Mode, r.Engine = sc.Name, m.Name, EngineVirtual
		return r
	}
	out := make([]Result, len(modes))
	for i, m := range modes {
		if fixed[i] != nil {
			out[i] = row(m, fixed[i])
			out[i].WallS = wallOf(fixed[i])
		}
	}
	for _, w := range sweeps {
		best := w.best()
		r := row(modes[w.mode], w.runs[best])
		r.Cap = best
		for _, v := range slices.Sorted(maps.Keys(w.runs)) {
			r.Sweep = append(r.Sweep, [2]float64{float64(v), w.mean(v)})
			r.WallS += wallOf(w.runs[v])
		}
		out[w.mode] = r
	}
	ratios(out)
	if !s.JSON {
		fmt.Fprintf(stderr, "bench: %s: %d modes × %d seeds in %.1f s of CPU\n", sc.Name, len(modes), seeds, sumWall(out))
	}
	return out, nil
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
	mode   int   // index in the modes
	ladder []int // settings to try first, ascending
	next   int   // index in ladder of the next setting to try
	step   int   // the last refinement's step (0: none yet)
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

// mean is the mean makespan of setting v's runs.
func (w *sweep) mean(v int) float64 {
	sum := 0.0
	for _, j := range w.runs[v] {
		sum += j.res.MakespanS
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
		r.BoundS += bounds[k].S / n
		r.BoundWorkS += bounds[k].WorkS / n
		r.BoundPathS += bounds[k].PathS / n
		r.VsBound += v.MakespanS / bounds[k].S / n
		r.MeanLatencyS += v.MeanLatencyS / n
		r.P99LatencyS += v.P99LatencyS / n
		r.TokensPerS += v.TokensPerS / n
		r.Preemptions += v.Preemptions
		r.ResumedTokens += v.ResumedTokens
		r.Reprefilled += v.Reprefilled
		r.Retractions += v.Retractions
		r.PrefilledTokens += v.Prefilled
		r.CachedTokens += v.Cached
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
	r.Reprefilled /= int64(len(runs))
	r.Retractions /= int64(len(runs))
	r.PrefilledTokens /= int64(len(runs))
	r.CachedTokens /= int64(len(runs))
	r.Syncs /= len(runs)
	r.KVUseStepS, r.KVUseSeries = runs[0].KVUseStepS, runs[0].KVUseSeries
	return r
}

// Baselines is the rows a scenario's best tuned baseline is taken from.
var Baselines = []string{ModeTrajectoryTuned, ModeAsyncCappedTuned, "async"}

// ratios sets each row's makespan against the trajectory and async rows
// of its scenario and the best of its Baselines (0 when that row was not
// run).
func ratios(rs []Result) {
	ref := map[string]float64{}
	best, bestName := 0.0, ""
	for _, r := range rs {
		ref[r.Mode] = r.MakespanS
		if slices.Contains(Baselines, r.Mode) && (bestName == "" || r.MakespanS < best) {
			best, bestName = r.MakespanS, r.Mode
		}
	}
	for i := range rs {
		r := &rs[i]
		if v := ref["trajectory"]; v > 0 {
			r.SpeedupVsTrajectory = v / r.MakespanS
		}
		if v := ref["async"]; v > 0 {
			r.SpeedupVsAsync = v / r.MakespanS
		}
		if best > 0 {
			r.SpeedupVsBestTuned, r.BestTuned = best/r.MakespanS, bestName
		}
	}
}
