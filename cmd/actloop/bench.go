package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/actloop/actloop/internal/devstack"
	"github.com/actloop/actloop/internal/predictor"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/pkg/bus"
	"github.com/actloop/actloop/pkg/schema"
	"github.com/actloop/actloop/pkg/sim"
)

// benchMode is one scheduling configuration the bench compares.
type benchMode struct {
	Name, Policy, Predictor string
}

var benchModes = map[string]benchMode{
	"fcfs":        {"fcfs", "fcfs", ""},
	"lpt-history": {"lpt-history", "lpt", predictor.BackendHistory},
	"lpt-oracle":  {"lpt-oracle", "lpt", predictor.BackendOracle},
	"sjf-history": {"sjf-history", "sjf", predictor.BackendHistory},
}

// benchResult is one mode's measurements, in simulated seconds.
type benchResult struct {
	Mode          string  `json:"mode"`
	Trajectories  int     `json:"trajectories"`
	Completed     int     `json:"completed"`
	MakespanS     float64 `json:"makespan_s"`
	VsFirst       float64 `json:"makespan_vs_first"`
	MeanLatencyS  float64 `json:"mean_latency_s"`
	P99LatencyS   float64 `json:"p99_latency_s"`
	TokensPerS    float64 `json:"generated_tokens_per_s"`
	SlotUse       float64 `json:"decode_slot_use"`
	Preemptions   int64   `json:"preemptions"`
	ResumedTokens int64   `json:"resumed_tokens"`
	WastedTokens  int64   `json:"wasted_tokens"`
	Reprefilled   int64   `json:"reprefilled_tokens"`
	WallS         float64 `json:"wall_s"`
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	modes := fs.String("modes", "fcfs,lpt-history,lpt-oracle", "comma-separated: fcfs, lpt-history, lpt-oracle, sjf-history")
	tasks := fs.Int("tasks", 96, "trajectories per mode (groups of 4 rollouts of one prompt)")
	replicas := fs.Int("replicas", 2, "inference replicas")
	slots := fs.Int("slots", 4, "generation slots per replica")
	maxTurns := fs.Int("max-turns", 16, "the simulator's most turns for a trajectory")
	timeScale := fs.Float64("time-scale", 0.02, "wall seconds per simulated second")
	seed := fs.Int64("seed", 1, "simulator seed: same seed, same workload")
	asJSON := fs.Bool("json", false, "print one JSON array instead of a table")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var chosen []benchMode
	for _, m := range strings.Split(*modes, ",") {
		bm, ok := benchModes[strings.TrimSpace(m)]
		if !ok {
			return &exitError{2, fmt.Errorf("bench: unknown mode %q", m)}
		}
		chosen = append(chosen, bm)
	}
	if *tasks < 1 || *replicas < 1 || *slots < 1 || *maxTurns < 1 || *timeScale <= 0 {
		return &exitError{2, errors.New("bench: tasks, replicas, slots, max-turns and time-scale must be positive")}
	}
	var results []benchResult
	for _, m := range chosen {
		if !*asJSON {
			fmt.Fprintf(stderr, "bench: %s ...\n", m.Name)
		}
		r, err := benchOne(ctx, m, *tasks, *replicas, *slots, *maxTurns, *timeScale, *seed)
		if err != nil {
			return fmt.Errorf("bench %s: %w", m.Name, err)
		}
		if len(results) > 0 && results[0].MakespanS > 0 {
			r.VsFirst = r.MakespanS / results[0].MakespanS
		} else {
			r.VsFirst = 1
		}
		results = append(results, r)
	}
	if *asJSON {
		b, _ := json.Marshal(results)
		_, err := fmt.Fprintln(stdout, string(b))
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tdone\tmakespan s\tvs first\tmean lat s\tp99 lat s\ttok/s\tslot use\tpreempt\tresumed tok\twasted tok\tre-prefill tok\twall s\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%d/%d\t%.0f\t%.2f\t%.0f\t%.0f\t%.0f\t%.2f\t%d\t%d\t%d\t%d\t%.1f\t\n", r.Mode, r.Completed,
			r.Trajectories, r.MakespanS, r.VsFirst, r.MeanLatencyS, r.P99LatencyS, r.TokensPerS, r.SlotUse,
			r.Preemptions, r.ResumedTokens, r.WastedTokens, r.Reprefilled, r.WallS)
	}
	return tw.Flush()
}

// benchOne runs the workload under one mode on a fresh stack.
func benchOne(ctx context.Context, m benchMode, tasks, replicas, slots, maxTurns int, timeScale float64, seed int64) (benchResult, error) {
	dir, err := os.MkdirTemp("", "actloop-bench-")
	if err != nil {
		return benchResult{}, err
	}
	defer os.RemoveAll(dir)
	common := service.CommonDefaults()
	common.PullWait = 100 * time.Millisecond
	simCfg := sim.Config{TimeScale: timeScale, MaxTurns: maxTurns, Seed: seed}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	st, err := devstack.StartInfra(sctx, devstack.Options{Dir: dir, Replicas: replicas, Slots: slots, EnvSlots: 256,
		Sim: simCfg, Common: common, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		return benchResult{}, err
	}
	defer st.Close()
	defer func() { stop(); _ = st.Wait() }()

	cc := st.CoordinatorConfig()
	cc.Policy = m.Policy
	if m.Predictor == "" {
		cc.PredictTimeout = 0
	}
	if _, err := st.StartCoordinator(sctx, cc); err != nil {
		return benchResult{}, err
	}
	for _, r := range st.Replicas {
		if _, err := st.StartGenWorker(sctx, r, nil); err != nil {
			return benchResult{}, err
		}
	}
	if _, err := st.StartEnvWorker(sctx, st.EnvWorkerConfig("env-0")); err != nil {
		return benchResult{}, err
	}
	if m.Predictor != "" {
		pc := st.PredictorConfig()
		pc.Backend, pc.OracleURL = m.Predictor, st.SimURLs[st.Replicas[0]]
		if err := st.StartPredictorWith(sctx, pc); err != nil {
			return benchResult{}, err
		}
	}
	d, err := st.Deps(ctx, "bench")
	if err != nil {
		return benchResult{}, err
	}
	defer d.Close()
	start := time.Now()
	for i := range tasks {
		g := i / 4
		s := schema.Sample{V: schema.Version, ID: fmt.Sprintf("b%04d", i), GroupID: fmt.Sprintf("g%03d", g),
			GroupIndex: i % 4, GroupSize: 4, Family: "bench", Task: fmt.Sprintf("benchmark task %d", g),
			Env:      schema.Env{Backend: schema.BackendSim, Eval: "exit 0"},
			Sampling: schema.Sampling{MaxNewTokens: 4096}}
		s.Normalize()
		if err := d.Pub.Publish(ctx, bus.SubjectSamples, s.ID, s); err != nil {
			return benchResult{}, err
		}
	}
	results, err := collect(ctx, d.JS, tasks, func(int) {})
	if err != nil {
		return benchResult{}, err
	}
	wall := time.Since(start)
	r := benchResult{Mode: m.Name, Trajectories: tasks, WallS: wall.Seconds()}
	var lat []float64
	var last time.Time
	var tokens int
	for _, res := range results {
		if res.Status == schema.StatusCompleted {
			r.Completed++
		}
		tokens += res.GenTokens
		lat = append(lat, res.FinishedAt.Sub(start).Seconds()/timeScale)
		if res.FinishedAt.After(last) {
			last = res.FinishedAt
		}
	}
	slices.Sort(lat)
	r.MakespanS = last.Sub(start).Seconds() / timeScale
	for _, l := range lat {
		r.MeanLatencyS += l / float64(len(lat))
	}
	r.P99LatencyS = lat[min(len(lat)-1, len(lat)*99/100)]
	r.TokensPerS = float64(tokens) / r.MakespanS
	decodeRate := float64(sim.DefaultDecodeTokensPerSec)
	r.SlotUse = float64(tokens) / decodeRate / (float64(replicas*slots) * r.MakespanS)
	for _, rep := range st.Replicas {
		if w := st.GenWorker(rep); w != nil {
			s := w.Stats()
			r.Preemptions += s.Preemptions
			r.ResumedTokens += s.ResumedTokens
			r.WastedTokens += s.WastedTokens
			r.Reprefilled += s.ReprefilledTokens
		}
	}
	return r, nil
}
