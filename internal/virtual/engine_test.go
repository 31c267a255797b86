package virtual

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/coordinator"
	"github.com/actloop/actloop/internal/genworker"
	"github.com/actloop/actloop/internal/workload"
	"github.com/actloop/actloop/pkg/priority"
)

// modes are the bench's kinds of run on a machine of replicas × slots for
// a batch of tasks.
func modes(replicas, slots, tasks int) map[string]Config {
	base := Defaults(replicas, slots)
	traj := base
	traj.Kind = KindTrajectory
	async := base
	async.Kind, async.MaxActive, async.MaxActiveCeiling = KindAsync, tasks, tasks
	fcfs := base
	fcfs.MaxActiveCeiling = tasks
	lpt := fcfs
	lpt.Policy, lpt.Predictor = "lpt", PredictOracle
	hist := fcfs
	hist.Policy, hist.Predictor = "lpt", PredictHistory
	sync := hist
	sync.SyncEvery, sync.SyncPauseS = 40, 2
	return map[string]Config{"trajectory": traj, "async": async, "action-fcfs": fcfs,
		"action-lpt-oracle": lpt, "action-lpt-history": hist, "action-lpt-history-sync": sync}
}

// replies is every token a batch generates: each reply and its end.
func replies(plans []workload.Trajectory) int64 {
	var n int64
	for _, p := range plans {
		for _, t := range p.Tokens {
			n += int64(t + replyEndTokens)
		}
	}
	return n
}

// Every mode finishes every trajectory with every token of its plan (a
// schedule changes when, never what), reproducibly, never faster than the
// lower bound; only action-level runs preempt, and a trajectory-level run
// never has more trajectories than slots.
func TestEveryModeRunsTheWholeBatch(t *testing.T) {
	for _, name := range []string{"swe-longtail", "tool-fast"} {
		sc, _ := workload.Lookup(name)
		plans := sc.Generate(2, 48)
		for mode, cfg := range modes(2, 4, 48) {
			r, err := Run(cfg, plans)
			if err != nil {
				t.Fatalf("%s/%s: %v", name, mode, err)
			}
			if r.Completed != 48 || r.GeneratedTokens != replies(plans) {
				t.Errorf("%s/%s: %d finished, %d tokens generated of %d", name, mode, r.Completed, r.GeneratedTokens, replies(plans))
			}
			if b := LowerBound(plans, cfg); r.MakespanS < b.S {
				t.Errorf("%s/%s: makespan %.1f s under the lower bound %.1f s", name, mode, r.MakespanS, b.S)
			}
			if cfg.Kind != KindAction && r.Preemptions > 0 {
				t.Errorf("%s/%s: %d preemptions", name, mode, r.Preemptions)
			}
			if cfg.Kind == KindTrajectory && r.PeakActive > 2*4 {
				t.Errorf("%s/%s: %d trajectories at once on 8 slots", name, mode, r.PeakActive)
			}
			if (cfg.SyncEvery > 0) != (r.Syncs > 0) || (r.Syncs > 0) != (r.VersionSpreadX > 0) {
				t.Errorf("%s/%s: %d syncs, version spread up to %d", name, mode, r.Syncs, r.VersionSpreadX)
			}
			again, _ := Run(cfg, plans)
			if !reflect.DeepEqual(r, again) {
				t.Errorf("%s/%s: the same run twice gave other figures", name, mode)
			}
		}
	}
}

// Under memory pressure over-admission costs re-prefill: async, which
// admits everything, re-prefills more than trajectory-level, which keeps
// only as many trajectories as slots.
func TestOverAdmissionThrashesTheCache(t *testing.T) {
	sc, _ := workload.Lookup("swe-rl-64k")
	plans := sc.Generate(1, 128)
	ms := modes(2, 4, 128)
	for name, cfg := range ms {
		cfg.Server.MaxTotalTokens = 120_000 // four or five whole contexts
		ms[name] = cfg
	}
	traj, err := Run(ms["trajectory"], plans)
	if err != nil {
		t.Fatal(err)
	}
	async, err := Run(ms["async"], plans)
	if err != nil {
		t.Fatal(err)
	}
	if async.Reprefilled <= 2*traj.Reprefilled || async.Evicted <= traj.Evicted {
		t.Errorf("async re-prefilled %d (evicted %d), trajectory-level %d (evicted %d)", async.Reprefilled, async.Evicted,
			traj.Reprefilled, traj.Evicted)
	}
}

// Under a staleness bound no more trajectories are admitted than
// (max_staleness + version + 1) × the train batch, so with no weight sync
// a batch larger than that never finishes, and with syncs it does (24
// trajectories in batches of 8 need two new versions).
func TestStalenessBoundsAdmission(t *testing.T) {
	sc, _ := workload.Lookup("tool-fast")
	plans := sc.Generate(1, 24)
	cfg := modes(2, 4, 24)["action-fcfs"]
	cfg.TrainBatchSize, cfg.MaxStaleness = 8, 0
	if _, err := Run(cfg, plans); err == nil || !strings.Contains(err.Error(), "8 of 24") {
		t.Fatalf("without syncs: %v, want a stall after 8 of 24", err)
	}
	cfg.SyncEvery = 30
	r, err := Run(cfg, plans)
	if err != nil || r.Completed != 24 || r.Syncs < 2 || r.MeanAdmitWaitS <= 0 {
		t.Fatalf("with syncs: %+v, %v", r, err)
	}
}

// A trajectory that cannot fit a server is refused before anything runs,
// naming it and the limit.
func TestLimitsAreCheckedAtStart(t *testing.T) {
	sc, _ := workload.Lookup("swe-rl-128k")
	plans := sc.Generate(1, 16)
	cfg := Defaults(1, 4)
	cfg.Server.MaxTotalTokens = 50_000
	_, err := Run(cfg, plans)
	if err == nil || !strings.Contains(err.Error(), "max_total_num_tokens") || !strings.Contains(err.Error(), "swe-rl-128k-") {
		t.Fatalf("err = %v", err)
	}
	cfg = Defaults(1, 4)
	cfg.MaxNew = 10
	if _, err := Run(cfg, plans); err == nil || !strings.Contains(err.Error(), "max_new_tokens") {
		t.Fatalf("err = %v", err)
	}
	if _, err := Run(Config{}, plans); err == nil {
		t.Fatal("an empty configuration ran")
	}
	if _, err := Run(Defaults(1, 4), nil); err == nil {
		t.Fatal("an empty batch ran")
	}
}

// The engine's defaults are the services' own.
func TestDefaultsAreTheServices(t *testing.T) {
	d := Defaults(1, 1)
	durations := []struct {
		typ   reflect.Type
		field string
		got   time.Duration
	}{
		{reflect.TypeOf(coordinator.Config{}), "AdaptInterval", d.AdaptInterval},
		{reflect.TypeOf(coordinator.Config{}), "SnapshotInterval", d.SnapshotInterval},
		{reflect.TypeOf(coordinator.Config{}), "AgeLimit", d.AgeLimit},
		{reflect.TypeOf(genworker.Config{}), "PreemptCooldown", d.PreemptCooldown},
	}
	for _, c := range durations {
		f, _ := c.typ.FieldByName(c.field)
		want, err := time.ParseDuration(f.Tag.Get("default"))
		if err != nil || want != c.got {
			t.Errorf("%s.%s: the service's default is %q, the engine's %v", c.typ.Name(), c.field, f.Tag.Get("default"), c.got)
		}
	}
	tags := []struct {
		typ   reflect.Type
		field string
		got   string
	}{
		{reflect.TypeOf(coordinator.Config{}), "ReprefillLimit", fmt.Sprint(d.ReprefillLimit)},
		{reflect.TypeOf(coordinator.Config{}), "KVBudget", fmt.Sprint(d.KVBudget)},
		{reflect.TypeOf(genworker.Config{}), "KVBudget", fmt.Sprint(d.DispatchKVBudget)},
		{reflect.TypeOf(genworker.Config{}), "Preempt", fmt.Sprint(d.Preempt)},
		{reflect.TypeOf(coordinator.Config{}), "RankBy", d.RankBy},
	}
	for _, c := range tags {
		if f, _ := c.typ.FieldByName(c.field); f.Tag.Get("default") != c.got {
			t.Errorf("%s.%s: the service's default is %q, the engine's %s", c.typ.Name(), c.field, f.Tag.Get("default"), c.got)
		}
	}
	cc := coordinator.Config{Slots: 8, Replicas: []string{"a", "b", "c"}}
	ec := Defaults(3, 8)
	if cc.ActiveFloor() != ec.floor() || cc.ActiveCeiling() != ec.ceiling() {
		t.Errorf("admission floor/ceiling %d/%d, the coordinator's %d/%d", ec.floor(), ec.ceiling(), cc.ActiveFloor(), cc.ActiveCeiling())
	}
	cc.Scheduling, ec.Kind = priority.SchedulingTrajectory, KindTrajectory
	if cc.ActiveFloor() != ec.floor() || cc.ActiveCeiling() != ec.ceiling() || ec.floor() != 24 {
		t.Errorf("trajectory-level floor/ceiling %d/%d, the coordinator's %d/%d", ec.floor(), ec.ceiling(), cc.ActiveFloor(), cc.ActiveCeiling())
	}
	if err := d.Validate(); err != nil {
		t.Error(err)
	}
	bad := d
	bad.Kind, bad.Predictor = "fast", "psychic"
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "kind") || !strings.Contains(err.Error(), "predictor") {
		t.Errorf("Validate() = %v", err)
	}
}

// BenchmarkEngine measures the engine's speed: simulated trajectories per
// wall second, on a batch of the RL-scale shape.
func BenchmarkEngine(b *testing.B) {
	sc, _ := workload.Lookup("swe-rl-64k")
	plans := sc.Generate(1, 512)
	for _, mode := range []string{"trajectory", "async", "action-lpt-oracle"} {
		b.Run(mode, func(b *testing.B) {
			cfg := modes(1, 16, 512)[mode]
			for b.Loop() {
				if _, err := Run(cfg, plans); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(plans)*b.N)/b.Elapsed().Seconds(), "trajectories/s")
		})
	}
}

func TestPredictionError(t *testing.T) {
	mae, rho := predictionError([][2]float64{{10, 12}, {20, 18}, {30, 40}, {40, 30}})
	if mae != 6 {
		t.Errorf("MAE = %v, want 6", mae)
	}
	// ranks 1 2 3 4 against 1 2 4 3: 1 − 6·2 / (4·15) = 0.8
	if math.Abs(rho-0.8) > 1e-12 {
		t.Errorf("rank correlation = %v, want 0.8", rho)
	}
	if got := ranks([]float64{5, 1, 5, 2}); !slices.Equal(got, []float64{3.5, 1, 3.5, 2}) {
		t.Errorf("ranks with ties = %v", got)
	}
}
