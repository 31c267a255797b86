package bench

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"runtime"
	"sync"
	"time"

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

// ModeClairvoyant names the clairvoyant reference's rows.
const ModeClairvoyant = "clairvoyant"

// ClairvoyantReserves are the shares of each trajectory's largest context
// the clairvoyant reference tries reserving; it reports the best.
var ClairvoyantReserves = []float64{0.7, 0.5, 0.35}

// virtualConfig is the engine configuration of mode m on scenario sc.
func (s Scheduling) virtualConfig(m Mode, sc workload.Scenario, tasks int) virtual.Config {
	replicas, slots := s.machine(sc)
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
	switch m.Kind {
	case virtual.KindTrajectory: // ACTLOOP_SCHEDULING=trajectory
	case virtual.KindAsync:
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

// runVirtual runs every chosen mode and the clairvoyant reference on sc
// with the virtual engine, once per seed, the runs in parallel; the same
// settings give the same figures whatever the machine.
func (s Scheduling) runVirtual(sc workload.Scenario, modes []Mode, stderr io.Writer) ([]Result, error) {
	tasks := s.tasksOf(sc)
	seeds := max(s.Seeds, 1)
	type job struct {
		mode    int // index in modes; len(modes) + k: the clairvoyant with reserve k
		seed    int
		res     virtual.Result
		err     error
		elapsed time.Duration
	}
	plans := make([][]workload.Trajectory, seeds)
	for k := range seeds {
		plans[k] = sc.Generate(s.Seed+int64(k), tasks)
	}
	var jobs []*job
	for k := range seeds {
		for m := range len(modes) + len(ClairvoyantReserves) {
			jobs = append(jobs, &job{mode: m, seed: k})
		}
	}
	work := make(chan *job)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for j := range work {
				var cfg virtual.Config
				if j.mode < len(modes) {
					cfg = s.virtualConfig(modes[j.mode], sc, tasks)
				} else {
					cfg = s.virtualConfig(Mode{Kind: virtual.KindClairvoyant, Policy: "fcfs"}, sc, tasks)
					cfg.Reserve = ClairvoyantReserves[j.mode-len(modes)]
				}
				start := time.Now()
				j.res, j.err = virtual.Run(cfg, plans[j.seed])
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
			name := ModeClairvoyant
			if j.mode < len(modes) {
				name = modes[j.mode].Name
			}
			return nil, fmt.Errorf("bench %s/%s seed %d: %w", sc.Name, name, s.Seed+int64(j.seed), j.err)
		}
	}
	// Per seed: the bound, and the best clairvoyant run.
	bounds := make([]virtual.Bound, seeds)
	clair := make([]*job, seeds)
	for k := range seeds {
		replicas, slots := s.machine(sc)
		bounds[k] = virtual.LowerBound(plans[k], virtual.Defaults(replicas, slots))
	}
	for _, j := range jobs {
		if j.mode >= len(modes) && (clair[j.seed] == nil || j.res.MakespanS < clair[j.seed].res.MakespanS) {
			clair[j.seed] = j
		}
	}
	rows := func(mode string, pick func(seed int) *job) Result {
		var runs []virtual.Result
		var wall float64
		for k := range seeds {
			j := pick(k)
			runs = append(runs, j.res)
			wall += j.elapsed.Seconds()
		}
		r := aggregate(runs, bounds)
		r.Scenario, r.Mode, r.Engine, r.WallS = sc.Name, mode, EngineVirtual, wall
		return r
	}
	var out []Result
	for m, mode := range modes {
		out = append(out, rows(mode.Name, func(k int) *job { return jobs[k*(len(modes)+len(ClairvoyantReserves))+m] }))
	}
	cr := rows(ModeClairvoyant, func(k int) *job { return clair[k] })
	for k := range seeds {
		cr.ClairvoyantReserve += ClairvoyantReserves[clair[k].mode-len(modes)] / float64(seeds)
	}
	out = append(out, cr)
	ratios(out)
	if !s.JSON {
		fmt.Fprintf(stderr, "bench: %s: %d modes × %d seeds in %.1f s of CPU\n", sc.Name, len(modes)+1, seeds, sumWall(out))
	}
	return out, nil
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

// ratios sets each row's makespan against the trajectory, async and
// clairvoyant rows of its scenario (0 when that row was not run).
func ratios(rs []Result) {
	ref := map[string]float64{}
	for _, r := range rs {
		ref[r.Mode] = r.MakespanS
	}
	for i := range rs {
		r := &rs[i]
		if v := ref["trajectory"]; v > 0 {
			r.SpeedupVsTrajectory = v / r.MakespanS
		}
		if v := ref["async"]; v > 0 {
			r.SpeedupVsAsync = v / r.MakespanS
		}
		if v := ref[ModeClairvoyant]; v > 0 {
			r.VsClairvoyant = r.MakespanS / v
			r.ClairvoyantS = v
		}
	}
}
