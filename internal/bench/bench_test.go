package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/actloop/actloop/internal/batching"
	"github.com/actloop/actloop/internal/launch"
	"github.com/actloop/actloop/internal/virtual"
	"github.com/actloop/actloop/internal/workload"
	"github.com/actloop/actloop/pkg/priority"
	"github.com/actloop/actloop/pkg/schema"
)

// TestMain lets the test binary stand in for actloop when a test starts
// services as child processes ('actloop serve NAME', as RunPipeline does
// with Processes).
func TestMain(m *testing.M) {
	if len(os.Args) == 3 && os.Args[1] == "serve" {
		if err := launch.Run(os.Args[2]); err != nil {
			os.Stderr.WriteString("actloop: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The scheduling bench runs every mode to completion on the same workload
// and reports each; speed is what it measures, not what this test asserts.
func TestSchedulingRunsEveryMode(t *testing.T) {
	// A tiny batch of the fast scenario: the smoke version of the bench,
	// fidelity check included (every mode must produce the same tokens).
	// Syncs every third of the batch's lower bound, so the sync mode has
	// some whatever the machine's speed.
	sc, _ := workload.Lookup("tool-fast")
	charts := t.TempDir()
	bound := virtual.LowerBound(sc.Generate(1, 8), virtual.Defaults(2, 8))
	var live []string
	for _, m := range Modes {
		if m.Tune == "" && m.With == "" && m.Without != AblatePartialRollout {
			live = append(live, m.Name)
		}
	}
	s := Scheduling{Scenarios: "tool-fast", Modes: strings.Join(live, ","), Engine: EngineLive, Tasks: 8, Replicas: 2, Slots: 8,
		TimeScale: 0.002, SyncEvery: bound.S / 3, Seed: 1, JSON: true, Charts: charts}
	var out, errOut bytes.Buffer
	if err := RunScheduling(context.Background(), s, &out, &errOut); err != nil {
		t.Fatalf("bench: %v\n%s", err, errOut.String())
	}
	var got []Result
	if err := json.Unmarshal(bytes.TrimSpace(out.Bytes()), &got); err != nil {
		t.Fatalf("bench output %q: %v", out.String(), err)
	}
	if len(got) != len(live) {
		t.Fatalf("%d modes reported, want %d", len(got), len(live))
	}
	for _, r := range got {
		if r.Completed != 8 || r.MakespanS <= 0 || r.P99LatencyS < r.MeanLatencyS || r.MeanLatencyS <= 0 ||
			r.BoundS <= 0 || r.VsBound < 1 {
			t.Errorf("%s: %+v", r.Mode, r)
		}
		if len(r.SlotUseSeries) == 0 || r.SlotUse <= 0 || r.SlotUse > 1 {
			t.Errorf("%s: slot use %.2f from %d samples", r.Mode, r.SlotUse, len(r.SlotUseSeries))
		}
		if strings.HasSuffix(r.Mode, "-sync") != (r.Syncs > 0) {
			t.Errorf("%s: %d weight syncs", r.Mode, r.Syncs)
		}
	}
	f, err := os.Open(filepath.Join(charts, "tool-fast.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if img, err := png.Decode(f); err != nil || img.Bounds().Dx() < 1000 {
		t.Fatalf("chart: %v", err)
	}
}

// The virtual engine runs every mode on the same batches, gives the same
// figures twice, sweeps each tuned mode's knob, and sets each row against
// the baselines.
func TestVirtualSchedulingIsReproducible(t *testing.T) {
	s := Scheduling{Scenarios: "swe-longtail,tool-fast", Modes: strings.Join(ModeNames(), ","), Tasks: 24, Seeds: 2, Seed: 3,
		SyncEvery: 30, JSON: true}
	run := func() []Result {
		var out, errOut bytes.Buffer
		if err := RunScheduling(context.Background(), s, &out, &errOut); err != nil {
			t.Fatalf("bench: %v\n%s", err, errOut.String())
		}
		var got []Result
		if err := json.Unmarshal(bytes.TrimSpace(out.Bytes()), &got); err != nil {
			t.Fatal(err)
		}
		for i := range got {
			got[i].WallS = 0 // the only figure of the machine
		}
		return got
	}
	a, b := run(), run()
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two runs of the virtual engine differ")
	}
	if len(a) != 2*(len(Modes)-1) {
		t.Fatalf("%d rows, want every mode per scenario but trajectory-first-batch (drifting scenarios only)", len(a))
	}
	for _, r := range a {
		if r.Mode == ModeTrajectoryFirst {
			t.Fatalf("%s: a %s row on a scenario of one batch", r.Scenario, r.Mode)
		}
	}
	best := map[string]float64{}
	for _, r := range a {
		if slices.Contains(Baselines, r.Mode) && (best[r.Scenario] == 0 || r.MakespanS < best[r.Scenario]) {
			best[r.Scenario] = r.MakespanS
		}
	}
	for _, r := range a {
		if r.Engine != EngineVirtual || r.Seeds != 2 || r.Completed != 24 || r.MakespanS <= 0 || r.VsBound < 1 ||
			r.MakespanMinS > r.MakespanS || r.MakespanMaxS < r.MakespanS || r.SpeedupVsTrajectory <= 0 ||
			r.SpeedupVsAsync <= 0 || len(r.KVUseSeries) == 0 {
			t.Errorf("%s/%s: %+v", r.Scenario, r.Mode, r)
		}
		if r.Mode == "trajectory" && r.SpeedupVsTrajectory != 1 {
			t.Errorf("trajectory against itself: %v", r.SpeedupVsTrajectory)
		}
		if got := best[r.Scenario] / r.MakespanS; math.Abs(r.SpeedupVsBestTuned-got) > 1e-9 || r.BestTuned == "" {
			t.Errorf("%s/%s: %.3f × the best tuned (%s), want %.3f", r.Scenario, r.Mode, r.SpeedupVsBestTuned, r.BestTuned, got)
		}
		if strings.HasSuffix(r.Mode, "-sync") != (r.Syncs > 0) {
			t.Errorf("%s: %d weight syncs", r.Mode, r.Syncs)
		}
		m, _ := lookupMode(r.Mode)
		if m.Tune == "" {
			if r.Cap != 0 || r.Sweep != nil {
				t.Errorf("%s/%s: untuned with a setting %d, sweep %v", r.Scenario, r.Mode, r.Cap, r.Sweep)
			}
			continue
		}
		// The chosen setting is the sweep's best, and its row is its runs.
		if len(r.Sweep) < 3 {
			t.Errorf("%s/%s: swept %v", r.Scenario, r.Mode, r.Sweep)
		}
		for k, p := range r.Sweep {
			if k > 0 && p[0] <= r.Sweep[k-1][0] || p[1] < r.MakespanS-1e-6 {
				t.Errorf("%s/%s: sweep %v, chose %d at %.1f s", r.Scenario, r.Mode, r.Sweep, r.Cap, r.MakespanS)
			}
			if int(p[0]) == r.Cap && math.Abs(p[1]-r.MakespanS) > 1e-6 {
				t.Errorf("%s/%s: row %.1f s, its setting %d swept at %.1f s", r.Scenario, r.Mode, r.MakespanS, r.Cap, p[1])
			}
		}
	}
}

// The sweep climbs the ladder until the makespan has risen well past its
// best, then tries the settings between the best's neighbours.
func TestSweepFindsTheOptimumAndStopsPastTheCliff(t *testing.T) {
	// A made-up makespan by setting: best at 21, a cliff after 28.
	makespan := func(v int) float64 {
		if v > 28 {
			return 5000
		}
		return 1000 + 10*math.Abs(float64(v-21))
	}
	w := newSweep(0, 512)
	var tried []int
	for wave := w.wave(); wave != nil; wave = w.wave() {
		for _, v := range wave {
			tried = append(tried, v)
			w.runs[v] = []*job{{res: virtual.Result{MakespanS: makespan(v)}}}
		}
	}
	if w.best() != 21 {
		t.Errorf("best %d, want 21 (tried %v)", w.best(), tried)
	}
	if slices.Max(tried) > 48 {
		t.Errorf("climbed to %d past the cliff at 28: %v", slices.Max(tried), tried)
	}
	if want := []int{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48}; !reflect.DeepEqual(w.ladder[:len(want)], want) {
		t.Errorf("ladder %v", w.ladder)
	}
}

// Settings that cannot run are refused before anything starts, each
// problem naming its flag.
func TestValidate(t *testing.T) {
	okScheduling := Scheduling{Scenarios: "all", Modes: DefaultModes, Tasks: 1, Replicas: 1, Slots: 1, TimeScale: 1}
	okSync := Sync{Tasks: 10, Replicas: 1, Slots: 10, InFlight: 5, Pauses: 1, Mode: schema.PauseAbort, MaxTurns: 1, TimeScale: 1}
	okPipeline := Pipeline{Trajectories: 1, Turns: 1, Tokens: 1, GenWorkers: 1, EnvWorkers: 1, Slots: 1}
	tests := []struct {
		name string
		v    interface{ Validate() error }
		want []string // "" for valid
	}{
		{"scheduling", okScheduling, nil},
		{"unknown mode", func() Scheduling { s := okScheduling; s.Modes = "async,magic"; return s }(), []string{`--modes: unknown mode "magic"`}},
		{"unknown scenario", func() Scheduling { s := okScheduling; s.Scenarios = "nope"; return s }(), []string{`--scenarios: unknown scenario "nope"`}},
		{"scheduling numbers", func() Scheduling { s := okScheduling; s.Tasks, s.Seeds = -1, -1; return s }(), []string{"--tasks", "--seeds"}},
		{"live time scale", func() Scheduling {
			s := okScheduling
			s.Engine, s.Scenarios, s.TimeScale = EngineLive, "tool-fast", 0
			return s
		}(), []string{"--time-scale"}},
		{"unknown engine", func() Scheduling { s := okScheduling; s.Engine = "steam"; return s }(), []string{`--engine: unknown engine "steam"`}},
		{"live at RL scale", func() Scheduling {
			s := okScheduling
			s.Engine, s.Scenarios, s.Tasks = EngineLive, "swe-rl-64k", 0
			return s
		}(), []string{"swe-rl-64k is RL-scale"}},
		{"unknown machine", func() Scheduling { s := okScheduling; s.Machine = "tpu"; return s }(), []string{`--machine: unknown machine "tpu"`}},
		{"live on the second machine", func() Scheduling {
			s := okScheduling
			s.Engine, s.Scenarios, s.Machine = EngineLive, "tool-fast", MachineH100CodeLlama34BTP2
			return s
		}(), []string{"--machine: " + MachineH100CodeLlama34BTP2 + " is modelled by the virtual engine only"}},
		{"sync", okSync, nil},
		{"sync mode", func() Sync { s := okSync; s.Mode = "nap"; return s }(), []string{`--mode: "nap"`}},
		{"sync in flight", func() Sync { s := okSync; s.InFlight = 11; return s }(), []string{"--in-flight: 11 exceeds"}},
		{"sync pauses", func() Sync { s := okSync; s.Pauses = -1; return s }(), []string{"--pauses"}},
		{"pipeline", okPipeline, nil},
		{"pipeline numbers", func() Pipeline { p := okPipeline; p.Turns, p.EnvWorkers = 0, -1; return p }(), []string{"--turns", "--env-workers"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.v.Validate()
			if (err != nil) != (len(tt.want) > 0) {
				t.Fatalf("Validate() = %v, want problems %q", err, tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q lacks %q", err, w)
				}
			}
		})
	}
}

// The pipeline bench drives a batch through the whole pipeline, in one
// process and with every service in its own ('actloop serve'), and reports
// each service process's memory and CPU.
func TestPipeline(t *testing.T) {
	for _, processes := range []bool{false, true} {
		t.Run(fmt.Sprintf("processes=%v", processes), func(t *testing.T) {
			p := Pipeline{Trajectories: 6, Turns: 3, Tokens: 8, GenWorkers: 1, EnvWorkers: 1, Slots: 4,
				Redis: "in-process", Processes: processes, JSON: true}
			var out bytes.Buffer
			if err := RunPipeline(context.Background(), p, &out); err != nil {
				t.Fatalf("%+v: %v", p, err)
			}
			var b PipelineReport
			if err := json.Unmarshal(out.Bytes(), &b); err != nil {
				t.Fatalf("output %q: %v", out.String(), err)
			}
			if b.Actions != 18 || b.ActionsPerS <= 0 || b.CPUSPer1000 <= 0 || b.RedisBytesPer1kT <= 0 {
				t.Errorf("%+v", b)
			}
			if !processes {
				if len(b.Services) != 0 {
					t.Errorf("in one process, per-service figures: %+v", b.Services)
				}
				return
			}
			if len(b.Services) != 3 {
				t.Fatalf("services %+v, want coordinator, gen-worker and env-worker", b.Services)
			}
			for _, s := range b.Services {
				if s.PeakRSSMB <= 0 || s.IdleRSSMB <= 0 || s.PeakRSSMB < s.IdleRSSMB || s.CPUSPer1000 <= 0 {
					t.Errorf("%s: %+v", s.Name, s)
				}
			}
		})
	}
}

// The weight-sync bench pauses and resumes as often as asked with
// generations in flight, and every trajectory of both runs completes.
func TestSync(t *testing.T) {
	s := Sync{Tasks: 16, Replicas: 1, Slots: 8, InFlight: 2, Pauses: 2, Mode: schema.PauseAbort, MaxTurns: 2,
		TimeScale: 0.05, Seed: 1, JSON: true}
	var out, errOut bytes.Buffer
	if err := RunSync(context.Background(), s, &out, &errOut); err != nil {
		t.Fatalf("%+v: %v\n%s", s, err, errOut.String())
	}
	var r SyncReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("output %q: %v", out.String(), err)
	}
	if len(r.PauseMS) != 2 || len(r.InFlightAtPause) != 2 || r.WithSyncs.Syncs != 2 || r.PauseP99MS < r.PauseP50MS {
		t.Errorf("syncs: %+v", r)
	}
	for _, run := range []SyncRun{r.WithSyncs, r.WithoutSyncs} {
		if run.Completed != 16 || run.Trajectories != 16 || run.MakespanS <= 0 {
			t.Errorf("run %+v: want 16 of 16 completed", run)
		}
	}
}

// docs/calibration.md is what bench-calibration writes (make docs).
func TestCalibrationDocIsCurrent(t *testing.T) {
	var b bytes.Buffer
	if err := WriteCalibration(&b); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/calibration.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(doc, b.Bytes()) {
		t.Fatal("docs/calibration.md is out of date: run make docs")
	}
}

// The cross-check runs each mode on both engines and reports the two
// makespans side by side; whether they agree depends on the machine, so
// only the report's consistency is checked.
func TestCrossCheckReportsBothEngines(t *testing.T) {
	s := Scheduling{Scenarios: "tool-fast", Modes: "trajectory,action-fcfs", Tasks: 6, TimeScale: 0.01, Seed: 1, JSON: true}
	var out, errOut bytes.Buffer
	if err := RunCrossCheck(context.Background(), s, &out, &errOut); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	var got []CrossCheck
	if err := json.Unmarshal(bytes.TrimSpace(out.Bytes()), &got); err != nil {
		t.Fatalf("%q: %v", out.String(), err)
	}
	if len(got) != 2 {
		t.Fatalf("%d rows, want one per mode", len(got))
	}
	for _, c := range got {
		if c.LiveS <= 0 || c.VirtualS <= 0 || c.Ratio != c.LiveS/c.VirtualS || c.Agree != (math.Abs(c.Ratio-1) <= CrossCheckTolerance) ||
			(c.Why == "") != c.Agree || c.LiveInputPerCall <= 0 || c.VirtualInputPerCall <= 0 {
			t.Errorf("%+v", c)
		}
	}
}

// On a drifting scenario, trajectory-first-batch is swept on the first
// batch only and runs every batch at that setting, while trajectory-tuned
// is swept again on every batch; both rows sum the batches.
func TestFirstBatchCapIsChosenOnBatchOneAndHeld(t *testing.T) {
	s := Scheduling{Scenarios: "swe-rl-drift", Modes: "trajectory-first-batch,trajectory-tuned,trajectory", Tasks: 24, Replicas: 1, Slots: 2,
		Seeds: 1, Seed: 2, JSON: true}
	var out, errOut bytes.Buffer
	if err := RunScheduling(context.Background(), s, &out, &errOut); err != nil {
		t.Fatalf("bench: %v\n%s", err, errOut.String())
	}
	var got []Result
	if err := json.Unmarshal(bytes.TrimSpace(out.Bytes()), &got); err != nil {
		t.Fatal(err)
	}
	first, tuned, fixed := got[0], got[1], got[2]
	for _, r := range got {
		if r.Batches != 4 || r.Trajectories != 4*24 || r.Completed != 4*24 {
			t.Fatalf("%s: %d batches, %d of %d trajectories; want 4 batches of 24", r.Mode, r.Batches, r.Completed, r.Trajectories)
		}
	}
	if len(first.BatchCaps) != 4 || slices.ContainsFunc(first.BatchCaps, func(c int) bool { return c != first.Cap }) {
		t.Errorf("first batch: caps %v, want %d held on every batch", first.BatchCaps, first.Cap)
	}
	if len(tuned.BatchCaps) != 4 || tuned.BatchCaps[0] != first.Cap || !reflect.DeepEqual(tuned.Sweep, first.Sweep) {
		t.Errorf("the first batch's sweep differs: tuned caps %v sweep %v, first-batch cap %d sweep %v", tuned.BatchCaps, tuned.Sweep, first.Cap, first.Sweep)
	}
	if fixed.Cap != 0 || fixed.BatchCaps != nil || fixed.BoundS <= 0 {
		t.Errorf("trajectory: cap %d, caps %v, bound %.0f", fixed.Cap, fixed.BatchCaps, fixed.BoundS)
	}
}

// On a steady-state scenario rows are compared by trainable trajectories
// per GPU-hour, the best tuned baseline being the one with the most.
func TestSteadyRowsCompareByTrainableThroughput(t *testing.T) {
	rs := []Result{
		{Mode: ModeDefault, MakespanS: 900, TrainablePerGPUHour: 150, TrainerBatches: 8},
		{Mode: ModeTrajectoryTuned, MakespanS: 1000, TrainablePerGPUHour: 120, TrainerBatches: 8},
		{Mode: "async", MakespanS: 800, TrainablePerGPUHour: 100, TrainerBatches: 8},
		{Mode: "trajectory", MakespanS: 700, TrainablePerGPUHour: 0, TrainerBatches: 8},
	}
	ratios(rs)
	if rs[0].BestTuned != ModeTrajectoryTuned || math.Abs(rs[0].SpeedupVsBestTuned-1.25) > 1e-9 || math.Abs(rs[0].SpeedupVsAsync-1.5) > 1e-9 {
		t.Errorf("default: %s %.3f×, %.3f× async; want trajectory-tuned 1.25×, 1.5×", rs[0].BestTuned, rs[0].SpeedupVsBestTuned, rs[0].SpeedupVsAsync)
	}
	if rs[3].SpeedupVsBestTuned != 0 || rs[0].SpeedupVsTrajectory != 0 {
		t.Errorf("a row with nothing trainable: %.3f×, and against it %.3f×; want 0", rs[3].SpeedupVsBestTuned, rs[0].SpeedupVsTrajectory)
	}
}

// The steady-state scenario takes its pause from bench-sync's report, or
// says what is missing.
func TestPauseFromBenchSync(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "sync.json"), filepath.Join(dir, "bad.json")
	if err := errors.Join(os.WriteFile(good, []byte(`{"pause_p50_ms":131.5,"pause_p99_ms":170}`), 0o600),
		os.WriteFile(bad, []byte(`{"pause_p99_ms":170}`), 0o600)); err != nil {
		t.Fatal(err)
	}
	if ms, err := pauseFrom(good); err != nil || ms != 131.5 {
		t.Errorf("good: %v ms, %v", ms, err)
	}
	for _, p := range []string{bad, filepath.Join(dir, "none.json")} {
		if _, err := pauseFrom(p); err == nil || !strings.Contains(err.Error(), "--sync-json") || !strings.Contains(err.Error(), "--pause-ms") && p == bad {
			t.Errorf("%s: %v", p, err)
		}
	}
	s := Scheduling{Scenarios: "swe-rl-steady,swe-rl-drift", Modes: "default", Engine: EngineLive, Tasks: 4, TimeScale: 1, PauseMS: -1}
	err := s.Validate()
	for _, want := range []string{"swe-rl-steady is steady-state", "swe-rl-drift drifts", "--pause-ms"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("validate: %v, want %q", err, want)
		}
	}
}

// A "-hicache" scenario puts the host tier on every mode's servers, its
// lower bound included, so that the rows compare alike; the scenario it
// varies has none. Only the kv-residency rows admit by running KV, and the
// live engine refuses server options it does not run.
func TestHiCacheScenarioIsOnForEveryMode(t *testing.T) {
	var s Scheduling
	for _, name := range []string{"swe-rl-64k", "swe-rl-64k" + workload.HiCacheSuffix, "swe-rl-steady" + workload.HiCacheSuffix} {
		sc, ok := workload.Lookup(name)
		if !ok {
			t.Fatalf("no scenario %s", name)
		}
		on := strings.HasSuffix(name, workload.HiCacheSuffix)
		for _, m := range Modes {
			cfg := s.virtualConfig(m, sc, sc.Tasks)
			if (cfg.Server.HostTokens > 0) != on {
				t.Errorf("%s/%s: host tier of %d tokens", name, m.Name, cfg.Server.HostTokens)
			}
			if on && cfg.Server.HostTokens != 2*cfg.Server.MaxTotalTokens {
				t.Errorf("%s/%s: host pool %d tokens for a device pool of %d, want --hicache-ratio 2", name, m.Name, cfg.Server.HostTokens, cfg.Server.MaxTotalTokens)
			}
			if cfg.KVResidency != (m.With == WithKVResidency) {
				t.Errorf("%s/%s: KVResidency %v", name, m.Name, cfg.KVResidency)
			}
		}
	}
	live := Scheduling{Scenarios: "swe-rl-64k" + workload.HiCacheSuffix, Modes: "default", Engine: EngineLive, Tasks: 4, TimeScale: 1}
	if err := live.Validate(); err == nil || !strings.Contains(err.Error(), "server options") {
		t.Errorf("live engine on a -hicache scenario: %v", err)
	}
	live = Scheduling{Scenarios: "tool-fast", Modes: ModeDefault + "-kv-residency", Engine: EngineLive, Tasks: 4, TimeScale: 1}
	if err := live.Validate(); err == nil || !strings.Contains(err.Error(), WithKVResidency) {
		t.Errorf("live engine with a mode the services do not have: %v", err)
	}
}

// The no-partial-rollout row is the shipped default with only the
// trainer's syncs discarding their aborted partials: on a steady-state
// scenario its trainer has DiscardPartials and nothing else differs from
// default's; elsewhere (no trainer) it is default's configuration; the live
// engine, whose services cannot discard them, refuses it.
func TestNoPartialRolloutModeDiscardsAtTheBatchEnd(t *testing.T) {
	m, ok := lookupMode(ModeDefault + "-no-partial-rollout")
	d, _ := lookupMode(ModeDefault)
	if !ok || !m.Shipped || m.Without != AblatePartialRollout {
		t.Fatalf("mode %+v, want the shipped default without partial rollout", m)
	}
	var s Scheduling
	for _, name := range []string{"swe-rl-steady", "swe-rl-steady" + workload.HiCacheSuffix, "swe-longtail"} {
		sc, _ := workload.Lookup(name)
		got, want := s.virtualConfig(m, sc, s.tasksOf(sc)), s.virtualConfig(d, sc, s.tasksOf(sc))
		if (sc.Steady != nil) != (got.Trainer != nil) || got.Trainer != nil && !got.Trainer.DiscardPartials || want.Trainer != nil && want.Trainer.DiscardPartials {
			t.Errorf("%s: trainer %+v (default's %+v), want DiscardPartials on a steady-state scenario only, for this mode only", name, got.Trainer, want.Trainer)
		}
		if got.Trainer != nil {
			tr := *got.Trainer
			tr.DiscardPartials = false
			got.Trainer = &tr
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %+v, want default's %+v but the trainer's DiscardPartials", name, got, want)
		}
	}
	live := Scheduling{Scenarios: "tool-fast", Modes: m.Name, Engine: EngineLive, Tasks: 4, TimeScale: 1}
	if err := live.Validate(); err == nil || !strings.Contains(err.Error(), AblatePartialRollout) {
		t.Errorf("live engine without partial rollout: %v", err)
	}
}

func TestReferenceModeSchedulesAsTheReferenceLoop(t *testing.T) {
	m, ok := lookupMode(ModeReference)
	if !ok {
		t.Fatalf("no %s mode", ModeReference)
	}
	if m.Shipped || m.Tune != "" || m.Kind != virtual.KindAction || m.Policy != priority.NameFCFS {
		t.Fatalf("%s: %+v, want an action-level fcfs comparison row, neither shipped nor tuned", m.Name, m)
	}
	for _, name := range []string{"swe-uniform", "swe-rl-64k"} {
		sc, ok := workload.Lookup(name)
		if !ok {
			t.Fatalf("no scenario %s", name)
		}
		s := Scheduling{}
		replicas, slots := s.machine(sc)
		cfg := s.virtualConfig(m, sc, 1000)
		floor, ceiling := priority.ActiveBounds(priority.SchedulingAction, cfg.Slots, cfg.Replicas, cfg.MaxActive, cfg.MaxActiveCeiling)
		if want := 3 * slots / 2 * replicas; cfg.Slots != slots || floor != want || ceiling != want {
			t.Errorf("%s: %d slots, admission %d to %d, want %d slots and %d fixed (1.5 × slots a replica)", name, cfg.Slots, floor, ceiling, slots, want)
		}
		if cfg.KVBudget != 0 || cfg.Dispatch != virtual.DispatchReference || !cfg.Preempt {
			t.Errorf("%s: KV budget %g, dispatch %q, preempt %v; want admission by count, the reference's dispatch order and preemption", name, cfg.KVBudget, cfg.Dispatch, cfg.Preempt)
		}
	}
}

// --machine sets every mode's server model, the bound's and the scenario's
// server options on top of it: the H100 machine's cost model, pool, KV bytes
// and GPUs, with its own host link under the hierarchical cache.
func TestMachineSetsTheServerModel(t *testing.T) {
	tests := []struct {
		machine  string
		wantCost string
		wantGPUs int
		wantGBps float64
	}{
		{"", batching.A100Llama8B.Name, 1, batching.PCIeGen4GBps},
		{MachineA100Llama8B, batching.A100Llama8B.Name, 1, batching.PCIeGen4GBps},
		{MachineH100CodeLlama34BTP2, batching.H100CodeLlama34BTP2.Name, 2, batching.PCIeGen5GBps},
	}
	for _, tt := range tests {
		t.Run(tt.machine, func(t *testing.T) {
			s := Scheduling{Machine: tt.machine}
			want, err := machineServer(tt.machine)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"swe-rl-64k", "swe-rl-64k" + workload.HiCacheSuffix} {
				sc, _ := workload.Lookup(name)
				for _, m := range Modes {
					cfg := s.virtualConfig(m, sc, sc.Tasks)
					srv := cfg.Server
					if srv.Cost.Name != tt.wantCost || srv.GPUs() != tt.wantGPUs || srv.MaxTotalTokens != want.MaxTotalTokens || srv.KVBytes != want.KVBytes {
						t.Errorf("%s/%s: server %s on %d GPUs, pool %d, %d bytes a token; want %s on %d, %d, %d",
							name, m.Name, srv.Cost.Name, srv.GPUs(), srv.MaxTotalTokens, srv.KVBytes, tt.wantCost, tt.wantGPUs, want.MaxTotalTokens, want.KVBytes)
					}
					if srv.HostTokens > 0 && srv.HostLoadGBps != tt.wantGBps {
						t.Errorf("%s/%s: host link %g GB/s, want %g", name, m.Name, srv.HostLoadGBps, tt.wantGBps)
					}
				}
			}
		})
	}
}
