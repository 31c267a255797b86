// Package workload generates benchmark batches of SWE-agent-like
// trajectories, deterministically from a seed: long-tailed turn counts and
// tokens per turn, groups of rollouts per prompt with correlated lengths,
// prompt and observation sizes, sandbox start-up, command run times and an
// eval; small scenarios and RL-scale ones (512 prompts × 8 rollouts at 64k
// and 128k contexts). The virtual-time engine plays a trajectory's plan
// directly; on the live stack each trajectory becomes a sample whose task
// carries a sim.Directive, so the simulator and the simulated sandbox play
// exactly the drawn lengths through every real path.
package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/actloop/actloop/internal/sim"
	"github.com/actloop/actloop/pkg/schema"
)

// Dist is a distribution of non-negative values.
type Dist interface {
	Draw(r *rand.Rand) float64
	String() string
	// Scaled is the distribution of f times a draw (its bounds scaled
	// too, except where a bound is a limit the scenario sets elsewhere:
	// see Growth).
	Scaled(f float64) Dist
}

// LogNormal has median Median and shape Sigma (of the log), clipped to
// [Min, Max].
type LogNormal struct{ Median, Sigma, Min, Max float64 }

func (d LogNormal) Draw(r *rand.Rand) float64 {
	return clip(d.Median*math.Exp(d.Sigma*r.NormFloat64()), d.Min, d.Max)
}

// Scaled moves the median and the lower bound by f; the upper bound stays,
// as it is a cap (a step limit, max_new_tokens) rather than a shape.
func (d LogNormal) Scaled(f float64) Dist {
	return LogNormal{Median: d.Median * f, Sigma: d.Sigma, Min: d.Min * f, Max: max(d.Max, d.Min*f)}
}

func (d LogNormal) String() string {
	return fmt.Sprintf("lognormal(median %g, σ %g) in [%g, %g]", d.Median, d.Sigma, d.Min, d.Max)
}

// Uniform is uniform in [Min, Max].
type Uniform struct{ Min, Max float64 }

func (d Uniform) Draw(r *rand.Rand) float64 { return d.Min + (d.Max-d.Min)*r.Float64() }
func (d Uniform) String() string            { return fmt.Sprintf("uniform[%g, %g]", d.Min, d.Max) }

// Scaled scales both ends by f.
func (d Uniform) Scaled(f float64) Dist { return Uniform{Min: d.Min * f, Max: d.Max * f} }

// Mixture draws from Parts[i] with probability Weights[i] (normalised).
type Mixture struct {
	Weights []float64
	Parts   []Dist
}

func (d Mixture) Draw(r *rand.Rand) float64 {
	total := 0.0
	for _, w := range d.Weights {
		total += w
	}
	u := r.Float64() * total
	for i, w := range d.Weights {
		if u < w {
			return d.Parts[i].Draw(r)
		}
		u -= w
	}
	return d.Parts[len(d.Parts)-1].Draw(r)
}

// Scaled scales every part by f.
func (d Mixture) Scaled(f float64) Dist {
	parts := make([]Dist, len(d.Parts))
	for i, p := range d.Parts {
		parts[i] = p.Scaled(f)
	}
	return Mixture{Weights: d.Weights, Parts: parts}
}

func (d Mixture) String() string {
	s := "mixture("
	for i, p := range d.Parts {
		if i > 0 {
			s += "; "
		}
		s += fmt.Sprintf("%g: %s", d.Weights[i], p)
	}
	return s + ")"
}

func clip(x, lo, hi float64) float64 { return min(max(x, lo), hi) }

// Scenario is a named workload.
type Scenario struct {
	Name, About string
	// GroupSize rollouts share a prompt. A group draws its turns once;
	// each rollout scales them by a lognormal factor of shape GroupSpread
	// (0: identical), so siblings' lengths are correlated but not equal.
	GroupSize   int
	GroupSpread float64
	Turns       Dist // turns of a trajectory (rounded, at least 1)
	TurnTokens  Dist // tokens of one reply
	Startup     Dist // sandbox start-up, seconds (the eval's sandbox too)
	Exec        Dist // one command's run time, seconds
	Eval        Dist // the eval command's run time, seconds
	// Prompt is the tokens of a group's first input (system prompt, task
	// and template), which its rollouts share; Obs the tokens of one
	// observation (a command's output with its template). Only the
	// virtual-time engine plays them: on the live stack the prompt and the
	// observations are what the agent templates and the simulated sandbox
	// make. nil: DefaultPrompt and DefaultObs.
	Prompt, Obs Dist
	// StepLimit caps a trajectory's turns (0: none); ContextLimit ends a
	// trajectory at the turn whose reply would take its context past it, as
	// a run that reaches its context window ends (0: none).
	StepLimit, ContextLimit int
	// Tasks, Replicas and Slots are the batch and machine the scenario is
	// meant for (0: the bench's flags decide).
	Tasks, Replicas, Slots int
	// SyncEvery is the seconds between weight syncs in the bench's -sync
	// modes: about one trainer step on the batch (0: the bench's flag).
	SyncEvery float64

	// Drift makes the scenario len(Drift) consecutive batches of Tasks
	// trajectories each, as synchronous RL training runs them one after
	// the other: batch k draws its turns and reply lengths from Turns and
	// TurnTokens scaled by Drift[k] (Batch). nil: one batch.
	Drift []Growth

	// Steady, when set, makes the scenario steady-state asynchronous RL: a
	// trainer takes batches of trajectories as they finish and a weight
	// sync follows each (see Steady). Tasks is then the supply of samples
	// to draw from, more than the run consumes.
	Steady *Steady

	// Server is what the scenario sets on its inference servers beyond
	// their defaults, for every mode alike.
	Server ServerOptions
}

// ServerOptions are inference-server settings a scenario runs with.
type ServerOptions struct {
	// HiCache turns on SGLang's hierarchical cache with its defaults
	// (--enable-hierarchical-cache, a host pool of --hicache-ratio 2 × the
	// device pool, --hicache-write-policy write_through), its loads back
	// to the device over PCIe 4.0.
	HiCache bool
	// KVDtype is --kv-cache-dtype: "" (auto: the model's bf16) or
	// fp8_e4m3.
	KVDtype string
}

// Growth is how much longer a batch's trajectories are than the first
// batch's: its median turns and its median reply tokens, as factors.
type Growth struct{ Turns, Reply float64 }

// Steady is the trainer of a steady-state asynchronous RL run: it takes
// finished trajectories in the order they finish, BatchSize at a time; a
// weight sync follows each batch; a trajectory whose oldest token is more
// than MaxStaleness weight versions behind when the trainer takes it is
// dropped (not trainable). The run ends when Batches batches are taken;
// the first WarmupBatches are its warm-up and are not measured.
type Steady struct {
	BatchSize, Batches, WarmupBatches int
	MaxStaleness                      int64
}

// Batches is how many consecutive batches sc is (1 without Drift).
func (sc Scenario) Batches() int { return max(len(sc.Drift), 1) }

// Batch is sc's batch k (0-based) as a scenario of its own: named
// "<name>-b<k+1>", with turns and reply tokens grown by Drift[k]. Without
// Drift it is sc.
func (sc Scenario) Batch(k int) Scenario {
	if len(sc.Drift) == 0 {
		return sc
	}
	g := sc.Drift[k]
	b := sc
	b.Name = fmt.Sprintf("%s-b%d", sc.Name, k+1)
	b.Turns, b.TurnTokens = sc.Turns.Scaled(g.Turns), sc.TurnTokens.Scaled(g.Reply)
	b.Drift = nil
	return b
}

// BatchSeed is the seed batch k of a run seeded with seed draws from, so
// that each batch draws tasks of its own.
func BatchSeed(seed int64, k int) int64 { return seed + 1_000_003*int64(k) }

// Template tokens around each turn's text in a ChatML context:
// "<|im_start|>user\n" … "<|im_end|>\n" around an observation followed by
// the generation prompt "<|im_start|>assistant\n", and the <|im_end|> that
// ends a reply.
const (
	ObsTemplateTokens = 8
	ReplyEndTokens    = 1
)

// DefaultPrompt and DefaultObs are the prompt and observation sizes of a
// scenario that sets none: about what the live stack's are in Qwen3
// tokens, mini-swe-agent's system and instance templates around a short
// task, and its observation template around a command that prints nothing.
var (
	DefaultPrompt Dist = Uniform{Min: 850, Max: 1150}
	DefaultObs    Dist = LogNormal{Median: 25, Sigma: 0.5, Min: 5, Max: 2000}
)

// Scenarios are the named workloads, the small ones first; docs/benchmarks.md
// says where each shape comes from.
var Scenarios = slices.Concat(smallScenarios, rlScenarios, trainingScenarios)

// Variants are scenarios of Scenarios on other servers, run when named
// (not by the bench's "all"): swe-rl-64k, swe-rl-128k and swe-rl-steady on
// servers with SGLang's hierarchical cache (a host-memory KV tier), named
// with the suffix HiCacheSuffix. The same seed draws the same plans as the
// scenario varied, and every mode runs on the same servers.
var Variants = func() []Scenario {
	var out []Scenario
	for _, sc := range slices.Concat(rlScenarios, trainingScenarios) {
		if sc.Name == "swe-rl-drift" {
			continue
		}
		sc.Name += HiCacheSuffix
		sc.About += "; servers with a host-memory KV tier (SGLang's hierarchical cache, host pool 2 × the device pool, write-through)"
		sc.Server.HiCache = true
		out = append(out, sc)
	}
	return out
}()

// HiCacheSuffix names a scenario's variant on servers with a host tier.
const HiCacheSuffix = "-hicache"

// smallScenarios are the shapes of a small batch (the bench's --tasks) on
// a small machine.
var smallScenarios = []Scenario{
	{
		Name:      "swe-longtail",
		About:     "SWE-bench-like repair tasks: most trajectories take a dozen turns, a few run to the step limit; commands are mostly quick, some run test suites",
		GroupSize: 4, GroupSpread: 0.3,
		Turns:      LogNormal{Median: 10, Sigma: 0.8, Min: 2, Max: 60},
		TurnTokens: LogNormal{Median: 200, Sigma: 0.6, Min: 40, Max: 2000},
		Startup:    Uniform{Min: 5, Max: 40},
		Exec: Mixture{Weights: []float64{0.7, 0.25, 0.05}, Parts: []Dist{
			LogNormal{Median: 0.2, Sigma: 0.8, Min: 0.01, Max: 5},
			LogNormal{Median: 3, Sigma: 0.6, Min: 0.5, Max: 30},
			LogNormal{Median: 20, Sigma: 0.5, Min: 5, Max: 60},
		}},
		Eval: Uniform{Min: 10, Max: 60},
	},
	{
		Name:      "swe-uniform",
		About:     "the same kind of task with little spread: what scheduling gains when lengths hardly vary",
		GroupSize: 4, GroupSpread: 0.1,
		Turns:      Uniform{Min: 8, Max: 14},
		TurnTokens: Uniform{Min: 150, Max: 300},
		Startup:    Uniform{Min: 8, Max: 12},
		Exec:       LogNormal{Median: 1, Sigma: 0.5, Min: 0.1, Max: 5},
		Eval:       Uniform{Min: 15, Max: 25},
	},
	{
		Name:      "tool-fast",
		About:     "tool calls that return in milliseconds: generation dominates, long replies",
		GroupSize: 4, GroupSpread: 0.3,
		Turns:      LogNormal{Median: 6, Sigma: 0.5, Min: 1, Max: 20},
		TurnTokens: LogNormal{Median: 400, Sigma: 0.5, Min: 50, Max: 2000},
		Startup:    Uniform{Min: 0.5, Max: 2},
		Exec:       Uniform{Min: 0.005, Max: 0.05},
		Eval:       Uniform{Min: 0.5, Max: 1.5},
	},
}

// The RL-scale scenarios: batches of 512 prompts × 8 rollouts, shaped
// after published SWE-agent statistics (docs/benchmarks.md cites each):
// SWE-agent's runs on SWE-Bench Pro (median 29–78 steps by model, about
// 110–230 visible output tokens per call, 700–1,000 tokens of observation
// per step, 3–5 s of tool time per step), the step caps of RL recipes (50
// in DeepSWE's and SkyRL's training), mini-swe-agent's 10,000-character
// cut of an observation (about 2,800 tokens) beside file views and test
// logs of 1k–8k tokens, and their context windows (32k–64k for RL, 128k
// for long-horizon runs).
var rlScenarios = []Scenario{
	{
		Name:      "swe-rl-64k",
		About:     "RL rollouts of a SWE agent: 512 prompts × 8, a 50-step cap, a 64k context, evals of minutes, on 8 replicas",
		GroupSize: 8, GroupSpread: 0.3,
		Turns:      LogNormal{Median: 24, Sigma: 0.6, Min: 3, Max: 50},
		TurnTokens: LogNormal{Median: 150, Sigma: 0.8, Min: 20, Max: 4096},
		Prompt:     Uniform{Min: 2000, Max: 4000},
		Obs: Mixture{Weights: []float64{0.85, 0.15}, Parts: []Dist{
			LogNormal{Median: 300, Sigma: 1.0, Min: 5, Max: 2800},
			LogNormal{Median: 3000, Sigma: 0.5, Min: 1000, Max: 8000},
		}},
		Startup:   Uniform{Min: 10, Max: 60},
		Exec:      LogNormal{Median: 1, Sigma: 1.5, Min: 0.05, Max: 180},
		Eval:      LogNormal{Median: 180, Sigma: 0.8, Min: 30, Max: 1200},
		StepLimit: 50, ContextLimit: 65536,
		Tasks: 4096, Replicas: 8, Slots: 16, SyncEvery: 1800,
	},
	{
		Name:      "swe-rl-128k",
		About:     "long-horizon rollouts: 512 prompts × 8, up to 150 steps, a 128k context, evals of minutes, on 16 replicas",
		GroupSize: 8, GroupSpread: 0.3,
		Turns:      LogNormal{Median: 55, Sigma: 0.55, Min: 5, Max: 150},
		TurnTokens: LogNormal{Median: 170, Sigma: 0.9, Min: 20, Max: 8000},
		Prompt:     Uniform{Min: 2000, Max: 4000},
		Obs: Mixture{Weights: []float64{0.8, 0.2}, Parts: []Dist{
			LogNormal{Median: 350, Sigma: 1.0, Min: 5, Max: 2800},
			LogNormal{Median: 3000, Sigma: 0.6, Min: 1000, Max: 8000},
		}},
		Startup:   Uniform{Min: 10, Max: 60},
		Exec:      LogNormal{Median: 1, Sigma: 1.5, Min: 0.05, Max: 300},
		Eval:      LogNormal{Median: 180, Sigma: 0.8, Min: 30, Max: 1200},
		StepLimit: 150, ContextLimit: 131072,
		Tasks: 4096, Replicas: 16, Slots: 8, SyncEvery: 1800,
	},
}

// trainingScenarios are RL training as it runs over many batches, on the
// swe-rl-64k shapes: synchronous batches whose trajectories grow
// (swe-rl-drift), and steady-state asynchronous RL with a staleness bound
// (swe-rl-steady).
var trainingScenarios = []Scenario{
	func() Scenario {
		sc := rlScenarios[0]
		sc.Name = "swe-rl-drift"
		sc.About = "synchronous RL over 4 consecutive batches of 128 prompts × 8 whose turns grow batch over batch as SkyRL-Agent's did in training (DriftGrowth), on 2 replicas"
		sc.Tasks, sc.Replicas = 1024, 2
		sc.Drift = DriftGrowth
		return sc
	}(),
	func() Scenario {
		sc := rlScenarios[0]
		sc.Name = "swe-rl-steady"
		sc.About = "steady-state asynchronous RL: a trainer takes batches of 512 trajectories as they finish, a weight sync after each, staleness bound 1, on 8 replicas"
		sc.Tasks = 6144
		sc.Steady = &Steady{BatchSize: 512, Batches: 8, WarmupBatches: 2, MaxStaleness: 1}
		return sc
	}(),
}

// DriftGrowth is swe-rl-drift's growth per batch, four evenly spaced
// points of a published training run: the average turns per trajectory of
// SkyRL-Agent's SA-SWE-32B (Qwen3-32B trained by RL alone on SWE tasks,
// arXiv:2511.16108), read off its training plot ("Avg. # turns" against
// training steps, NovaSky-AI/SkyRL, skyrl-agent/assets/
// reward_usage_none_combo_plot.png) at steps 20, 65, 110 and 155: 18.6,
// 21.7, 23.6 and 24.2 turns, factors 1.00, 1.17, 1.27 and 1.30 (read from
// the pixels against the axis ticks; the figure gives no numbers in text).
// Replies keep their length: no source we could read gives how a
// multi-turn SWE agent's tokens per reply move during RL training (the
// growing response lengths published, DeepSeek-R1's and single-turn
// code-repair runs', are of one long reply, not of an agent's turns).
var DriftGrowth = []Growth{{Turns: 1, Reply: 1}, {Turns: 1.17, Reply: 1}, {Turns: 1.27, Reply: 1}, {Turns: 1.30, Reply: 1}}

// Lookup returns the scenario or variant named name.
func Lookup(name string) (Scenario, bool) {
	for _, s := range slices.Concat(Scenarios, Variants) {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}

// Trajectory is one drawn trajectory.
type Trajectory struct {
	ID, GroupID string
	GroupIndex  int
	GroupSize   int
	Tokens      []int     // tokens of each turn's reply
	Exec        []float64 // each turn's command run time but the last's (the submission)
	Startup     float64   // sandbox start-up, seconds
	Eval        float64   // eval run time, seconds
	Prompt      int       // tokens of the first input, shared by the group
	Obs         []int     // tokens of each observation, one per Exec
}

// Turns is the trajectory's number of turns.
func (t Trajectory) Turns() int { return len(t.Tokens) }

// Generate draws n trajectories (groups of GroupSize; the last may be
// smaller) from seed. The same seed and n give the same batch.
func (sc Scenario) Generate(seed int64, n int) []Trajectory {
	r := rand.New(rand.NewPCG(uint64(seed), 0x6163746c6f6f70)) // "actloop"
	// Prompt and observation sizes come from a stream of their own, so the
	// other draws of a seed stay what they were before these existed.
	sizes := rand.New(rand.NewPCG(uint64(seed), 0x73697a6573)) // "sizes"
	promptD, obsD := sc.Prompt, sc.Obs
	if promptD == nil {
		promptD = DefaultPrompt
	}
	if obsD == nil {
		obsD = DefaultObs
	}
	gs := max(sc.GroupSize, 1)
	out := make([]Trajectory, 0, n)
	for g := 0; len(out) < n; g++ {
		base := sc.Turns.Draw(r)
		prompt := max(1, int(math.Round(promptD.Draw(sizes))))
		size := min(gs, n-len(out))
		for i := range size {
			turns := max(1, int(math.Round(base*math.Exp(sc.GroupSpread*r.NormFloat64()))))
			if sc.StepLimit > 0 {
				turns = min(turns, sc.StepLimit)
			}
			t := Trajectory{ID: fmt.Sprintf("%s-%04d-%d", sc.Name, g, i), GroupID: fmt.Sprintf("%s-%04d", sc.Name, g),
				GroupIndex: i, GroupSize: size, Startup: sc.Startup.Draw(r), Eval: sc.Eval.Draw(r), Prompt: prompt}
			ctx := prompt
			for k := range turns {
				reply := max(1, int(math.Round(sc.TurnTokens.Draw(r))))
				if k > 0 && sc.ContextLimit > 0 && ctx+reply+ReplyEndTokens > sc.ContextLimit {
					// Out of context: the previous turn was the last.
					t.Exec, t.Obs = t.Exec[:k-1], t.Obs[:k-1]
					break
				}
				t.Tokens = append(t.Tokens, reply)
				if k < turns-1 {
					t.Exec = append(t.Exec, sc.Exec.Draw(r))
					t.Obs = append(t.Obs, max(1, int(math.Round(obsD.Draw(sizes)))))
					ctx += reply + ReplyEndTokens + t.Obs[k] + ObsTemplateTokens
				}
			}
			out = append(out, t)
		}
	}
	return out
}

// Sample is t as a sample for the simulated backends: its task carries the
// directive; its sandbox starts with "sleep <start-up>" and its eval runs
// "sleep <eval>" (which passes).
func (t Trajectory) Sample() schema.Sample {
	d := sim.Directive{Tokens: t.Tokens, Exec: t.Exec}
	s := schema.Sample{V: schema.Version, ID: t.ID, GroupID: t.GroupID, GroupIndex: t.GroupIndex, GroupSize: t.GroupSize,
		Family: "bench",
		Task:   "Resolve issue " + t.GroupID + " in the repository. " + d.String(),
		Env: schema.Env{Backend: schema.BackendSim, Setup: []string{"sleep " + seconds(t.Startup)},
			Eval: "sleep " + seconds(t.Eval)},
		Sampling: schema.Sampling{MaxNewTokens: 8192},
		Limits:   schema.Limits{StepLimit: len(t.Tokens) + 1},
	}
	s.Normalize()
	return s
}

func seconds(x float64) string { return strconv.FormatFloat(x, 'f', 3, 64) }
