package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/actloop/actloop/internal/bench"
	"github.com/actloop/actloop/pkg/schema"
)

// outputFlags adds the flags every bench command shares.
func outputFlags(f *pflag.FlagSet, o *bench.Outputs, profiled string) {
	f.StringVar(&o.Log, "log", "", "write the services' log to this file")
	f.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of "+profiled+" to this file")
}

// checked returns a usage error naming the command for a settings problem.
func checked(name string, err error) error {
	if err != nil {
		return usageError(fmt.Errorf("%s: %w", name, err))
	}
	return nil
}

func newBenchCmd() *cobra.Command {
	var s bench.Scheduling
	cmd := &cobra.Command{
		Use:   "bench [--scenarios LIST|all] [--modes LIST] [flags]",
		Short: "Compare scheduling modes on simulated workloads",
		Long: `Run seeded simulated workloads under several scheduling modes and compare
makespan (against the batch's lower bound and the baselines: trajectory
and async as configured, and trajectory-tuned and async-capped-tuned with
their concurrency swept on each scenario for its best; every row shows its
speed-up over the best of them), latency, throughput, KV-pool use,
preemptions, re-prefilled tokens and retractions. The default mode is
actloop as it ships, with no setting made for the scenario.

The virtual engine (the default) is a discrete-event simulation that calls
the services' own scheduling code over an iteration-level model of SGLang's
continuous batching on the named model and GPU: the same settings give the
same figures on any machine, and --seeds N reports the mean and spread over
N seeds. The live engine (--engine live) runs each mode on a fresh
in-process stack against the inference simulator, at --time-scale wall
seconds per simulated second, and fails if two modes produced other tokens
for a trajectory. --json prints one JSON array; --charts DIR writes a PNG
per scenario (KV-pool or slot use over time, makespan by mode).`,
		Example: "  actloop bench --scenarios all --json --charts bench",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checked("bench", s.Validate()); err != nil {
				return err
			}
			return bench.RunScheduling(cmd.Context(), s, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&s.Scenarios, "scenarios", "swe-longtail", "comma-separated scenarios, or all: "+strings.Join(bench.ScenarioNames(), ", "))
	f.StringVar(&s.Modes, "modes", bench.DefaultModes, "comma-separated: "+strings.Join(bench.ModeNames(), ", "))
	f.StringVar(&s.Engine, "engine", bench.EngineVirtual, "virtual (discrete-event, deterministic) or live (the in-process stack in scaled wall time)")
	f.IntVar(&s.Seeds, "seeds", 1, "virtual engine: seeds per scenario (--seed, --seed+1, ...); figures are their mean")
	f.IntVar(&s.Tasks, "tasks", 0, "trajectories per scenario (0: the scenario's own, 96 for the small ones)")
	f.IntVar(&s.Replicas, "replicas", 0, "inference replicas (0: the scenario's own, 2 for the small ones)")
	f.IntVar(&s.Slots, "slots", 0, "each gen-worker's generation slots, and on the live engine each replica's running limit (0: the scenario's own, 8 for the small ones)")
	f.Float64Var(&s.TimeScale, "time-scale", 0.02, "live engine: wall seconds per simulated second (the pipeline's own latency counts 1/time-scale times over)")
	f.Int64Var(&s.Seed, "seed", 1, "workload and simulator seed: same seed, same batch")
	f.StringVar(&s.Machine, "machine", bench.MachineA100Llama8B, "virtual engine: the servers' model and GPUs, each calibrated in docs/calibration.md: "+strings.Join(bench.MachineNames(), ", "))
	f.Float64Var(&s.SyncEvery, "sync-every", 0, "simulated seconds between weight syncs in the -sync modes (0: the scenario's own, 60 for the small ones)")
	f.Float64Var(&s.PauseMS, "pause-ms", 0, "steady-state scenarios: a weight sync's pause in milliseconds (0: --sync-json's pause_p50_ms)")
	f.StringVar(&s.SyncJSON, "sync-json", bench.DefaultSyncJSON, "steady-state scenarios: bench-sync's JSON report to take the pause from")
	f.BoolVar(&s.JSON, "json", false, "print one JSON array instead of a table")
	f.StringVar(&s.Charts, "charts", "", "write a PNG chart per scenario (KV-pool or slot use over time, makespan by mode) into this directory")
	outputFlags(f, &s.Outputs, "the whole bench")
	return cmd
}

func newBenchSyncCmd() *cobra.Command {
	var s bench.Sync
	cmd := &cobra.Command{
		Use:   "bench-sync [flags]",
		Short: "Measure weight synchronisation: pause latency, tokens kept, throughput lost",
		Long: `Pause and resume many times with generations in flight, then run the same
workload without syncs: pause latency (trainer side), generations aborted and
tokens kept, re-prefilled tokens, and the makespan lost per weight sync.
--json prints one JSON object.`,
		Example: "  actloop bench-sync --json",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checked("bench-sync", s.Validate()); err != nil {
				return err
			}
			return bench.RunSync(cmd.Context(), s, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.IntVar(&s.Tasks, "tasks", 2600, "trajectories (more than slots, so queued steps keep the slots busy)")
	f.IntVar(&s.Replicas, "replicas", 4, "inference replicas")
	f.IntVar(&s.Slots, "slots", 320, "generation slots per replica")
	f.IntVar(&s.InFlight, "in-flight", 1000, "pause once this many generations are in flight")
	f.IntVar(&s.Pauses, "pauses", 10, "weight syncs")
	f.StringVar(&s.Mode, "mode", schema.PauseAbort, "pause mode: abort or drain")
	f.IntVar(&s.MaxTurns, "max-turns", 6, "the simulator's most turns for a trajectory")
	f.Float64Var(&s.TimeScale, "time-scale", 0.2, "wall seconds per simulated second")
	f.Int64Var(&s.Seed, "seed", 1, "simulator seed")
	f.BoolVar(&s.JSON, "json", false, "print one JSON object instead of a summary")
	outputFlags(f, &s.Outputs, "the run with syncs")
	return cmd
}

func newBenchPipelineCmd() *cobra.Command {
	var p bench.Pipeline
	cmd := &cobra.Command{
		Use:   "bench-pipeline [flags]",
		Short: "Measure the pipeline's own cost with backends that answer at once",
		Long: `Drive a batch through the whole pipeline with backends that answer at once:
actions per second, CPU per action, dispatch latency, Redis bytes per token,
Go heap per trajectory held. With --processes every service runs as its own
process ('actloop serve') and each one's resident memory and CPU are
reported. --json prints one JSON object.`,
		Example: "  actloop bench-pipeline --gen-workers 2 --env-workers 2 --json",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checked("bench-pipeline", p.Validate()); err != nil {
				return err
			}
			return bench.RunPipeline(cmd.Context(), p, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.IntVar(&p.Trajectories, "trajectories", 400, "trajectories")
	f.IntVar(&p.Turns, "turns", 20, "turns per trajectory")
	f.IntVar(&p.Tokens, "tokens", 50, "tokens per reply")
	f.IntVar(&p.GenWorkers, "gen-workers", 1, "gen-workers (one replica each)")
	f.IntVar(&p.EnvWorkers, "env-workers", 1, "env-workers")
	f.IntVar(&p.Slots, "slots", 64, "slots per gen-worker")
	f.StringVar(&p.Redis, "redis", "", "redis-server or in-process (default: redis-server when on PATH)")
	f.BoolVar(&p.Processes, "processes", false, "run each service as its own process ('actloop serve') and report each one's peak resident memory and CPU")
	f.BoolVar(&p.JSON, "json", false, "print one JSON object")
	outputFlags(f, &p.Outputs, "the run")
	return cmd
}

func newBenchCrossCheckCmd() *cobra.Command {
	s := bench.Scheduling{Engine: bench.EngineLive}
	cmd := &cobra.Command{
		Use:   "bench-crosscheck [--scenarios LIST] [--modes LIST] [flags]",
		Short: "Run small scenarios on both engines and compare their makespans",
		Long: `Run each small scenario under each mode on the live engine (the in-process
stack against the inference simulator running the same server model) and on
the virtual engine (one seed), and compare the makespans mode by mode. They
agree within 10 %, or the report says by how much they differ with the
figures that explain it (input tokens per call, re-prefilled tokens,
preemptions). --time-scale should leave the pipeline's latency well under
1 % of a step. --json prints one JSON array.`,
		Example: "  actloop bench-crosscheck --scenarios tool-fast --modes trajectory,action-fcfs --time-scale 0.2",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s.Engine = bench.EngineLive
			if err := checked("bench-crosscheck", s.Validate()); err != nil {
				return err
			}
			return bench.RunCrossCheck(cmd.Context(), s, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&s.Scenarios, "scenarios", "tool-fast", "comma-separated small scenarios")
	f.StringVar(&s.Modes, "modes", "trajectory,async,action-fcfs", "comma-separated: "+strings.Join(bench.ModeNames(), ", "))
	f.IntVar(&s.Tasks, "tasks", 0, "trajectories per scenario (0: 96)")
	f.IntVar(&s.Replicas, "replicas", 0, "inference replicas (0: 2)")
	f.IntVar(&s.Slots, "slots", 0, "each gen-worker's generation slots (0: 8)")
	f.Float64Var(&s.TimeScale, "time-scale", 0.2, "live engine: wall seconds per simulated second")
	f.Float64Var(&s.SyncEvery, "sync-every", 0, "simulated seconds between weight syncs in the -sync modes (0: 60)")
	f.Int64Var(&s.Seed, "seed", 1, "workload seed")
	f.BoolVar(&s.JSON, "json", false, "print one JSON array instead of a table")
	outputFlags(f, &s.Outputs, "the live runs")
	return cmd
}

func newBenchCalibrationCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "bench-calibration",
		Short: "Print the virtual engine's server cost model against the profiles it was fitted to",
		Long: `Print, as Markdown, the cost models the virtual engine's servers take an
iteration's time from, one per machine of bench --machine (Llama-3.1-8B on
an A100 80GB; CodeLlama-34B on two H100 80GB at tensor parallel 2), fitted
to Vidur's operator profiles: their parameters, their error by kind of
iteration, and every profiled iteration with the measured and modelled
throughput. This is docs/calibration.md.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return bench.WriteCalibration(cmd.OutOrStdout())
		},
	}
}
