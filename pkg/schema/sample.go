package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Defaults applied by Sample.Normalize to fields left at zero.
const (
	DefaultStepTimeout  = 60 * time.Second
	DefaultSetupTimeout = 5 * time.Minute
	DefaultEvalTimeout  = 10 * time.Minute
	DefaultMaxNewTokens = 1024
	MaxTaskBytes        = 256 << 10
)

// Upper bounds of a sample's numbers. Each is far past what a real run
// asks for, and low enough that a typo (an extra zero, seconds written as
// microseconds) or a hostile sample is refused by name instead of holding a
// sandbox, a slot or a duration overflow for years.
const (
	// MaxStepTimeout bounds env.step_timeout_ms: one command. A full test
	// suite or a build of a large repository takes hours, not a day.
	MaxStepTimeout = 24 * time.Hour
	// MaxSetupTimeout bounds env.setup_timeout_ms: one setup command (a
	// clone, an image pull, a dependency install).
	MaxSetupTimeout = 24 * time.Hour
	// MaxEvalTimeout bounds env.eval_timeout_ms: the eval, a test suite run
	// once.
	MaxEvalTimeout = 24 * time.Hour
	// MaxWallClock bounds limits.wall_clock_ms: a whole trajectory of
	// hundreds of steps of long commands, across pauses for weight
	// updates. A trajectory holds its sandbox that long.
	MaxWallClock = 7 * 24 * time.Hour
	// MaxNewTokens bounds sampling.max_new_tokens, one generation: 1 Mi
	// tokens, the longest context windows served today (1M-token models);
	// the server refuses what does not fit its own context.
	MaxNewTokens = 1 << 20
	// MaxTokenBudget bounds limits.token_budget, a trajectory's generated
	// tokens: MaxBodyTokens, the most a result's body holds, so a larger
	// budget could never be reached.
	MaxTokenBudget = MaxBodyTokens
	// MaxStepLimit bounds limits.step_limit, a trajectory's model calls:
	// agent runs take tens to a few thousand (SWE-bench runs 50-250); each
	// turn keeps its messages in the trajectory's state and result.
	MaxStepLimit = 100_000
	// MaxFormatErrorLimit bounds limits.format_error_limit, replies in a
	// row without a valid action: no more than there can be model calls.
	MaxFormatErrorLimit = MaxStepLimit
	// MaxGroupSize bounds group_size (and group_index below it): GRPO-style
	// groups run 4-64 rollouts, a few 1,024; a group's GroupDone lists every
	// member's id (up to MaxIDBytes each) and must fit NATS's default
	// max_payload of 1 MiB.
	MaxGroupSize = 4096
	// MaxTopK bounds sampling.top_k: past every vocabulary (Qwen3's
	// 151,936, Gemma 3's 262,144 tokens), where top-k is no filter.
	MaxTopK = 1 << 20
	// MaxTemperature bounds sampling.temperature; top_p and min_p are
	// probabilities, in [0, 1].
	MaxTemperature = 100
	// MaxFamilyBytes bounds family, a label.
	MaxFamilyBytes = 256
)

// Env backends a sample may ask for.
const (
	BackendLocal = "local" // real bash in a per-trajectory directory
	BackendSim   = "sim"   // simulated latencies, no processes
)

// IDPattern is what a sample, group or trajectory id must match, as a
// regular expression (Go's and the JSON Schema's "pattern", the same text):
// 1 to MaxIDBytes letters, digits, '.', '_' and '-', starting with a letter
// or a digit. An id names a sandbox directory, a Redis key, a NATS message
// id and subject token and a command-line argument, so it cannot be a path
// component of its own ("." or ".."), a hidden file (".x") or an option
// ("-x").
const IDPattern = `^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`

// MaxIDBytes is the longest id IDPattern allows.
const MaxIDBytes = 128

var idPattern = regexp.MustCompile(IDPattern)

// ValidID reports whether s matches IDPattern, as a sample, group or
// trajectory id must.
func ValidID(s string) bool { return idPattern.MatchString(s) }

// idProblem says why s is not a valid id.
func idProblem(s string) string {
	return fmt.Sprintf("must match %s (1-%d of A-Z a-z 0-9 . _ -, starting with a letter or digit), got %q",
		IDPattern, MaxIDBytes, clip(s))
}

// Sample is one rollout request from a trainer. Several samples of one prompt
// share GroupID and differ in GroupIndex.
type Sample struct {
	V          int    `json:"v"`
	ID         string `json:"id"`
	GroupID    string `json:"group_id,omitempty"`
	GroupIndex int    `json:"group_index"`
	GroupSize  int    `json:"group_size,omitempty"`
	// Family names the kind of task (a dataset, a repository) for length
	// prediction: trajectories of one family tend to run alike.
	Family string `json:"family,omitempty"`
	// Purpose is "train" (or "", the default) or "validation": a
	// validation rollout runs through the same loop but is not training
	// data: the staleness bound does not count it and stale_policy does
	// not touch it, it counts towards no group, and its result says
	// "purpose": "validation".
	Purpose string `json:"purpose,omitempty"`
	// Flow is the agent flow (FlowBash, the default, or FlowToolCall).
	Flow     string   `json:"flow,omitempty"`
	Task     string   `json:"task"`
	Env      Env      `json:"env"`
	Limits   Limits   `json:"limits"`
	Sampling Sampling `json:"sampling"`
	// Script is a list of model replies, one per turn, that the simulator
	// returns instead of generating; real inference servers ignore it.
	Script []string `json:"script,omitempty"`
	// Metadata is passed through untouched to the result.
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// Env says where and how a trajectory's commands run and how it is scored.
type Env struct {
	Backend        string   `json:"backend"`
	Image          string   `json:"image,omitempty"`
	Workspace      string   `json:"workspace,omitempty"`
	Setup          []string `json:"setup,omitempty"`
	Eval           string   `json:"eval,omitempty"`
	StepTimeoutMS  int64    `json:"step_timeout_ms,omitempty"`
	SetupTimeoutMS int64    `json:"setup_timeout_ms,omitempty"`
	EvalTimeoutMS  int64    `json:"eval_timeout_ms,omitempty"`
	// Tests, when set, scores the eval by its test results instead of its
	// exit code: reward 1 when every listed test passed.
	Tests *Tests `json:"tests,omitempty"`
}

// Test log formats the eval's output may be in.
const (
	// TestLogPytest: pytest -rA summary lines, "PASSED <id>", "FAILED <id> - …".
	TestLogPytest = "pytest"
	// TestLogDjango: Django's ./tests/runtests.py --verbosity 2 lines,
	// "<id> ... ok", "<id> ... FAIL", "FAIL: <id>".
	TestLogDjango = "django"
	// TestLogSympy: sympy's bin/test --verbose lines, "test_x ok", "test_x F".
	TestLogSympy = "sympy"
)

// TestLogs are the test log formats, each with a parser in internal/testlog.
var TestLogs = []string{TestLogPytest, TestLogDjango, TestLogSympy}

// Tests lists the tests an eval must pass, as SWE-bench's FAIL_TO_PASS
// (fixed by the change) and PASS_TO_PASS (must not break).
type Tests struct {
	FailToPass []string `json:"fail_to_pass,omitempty"`
	PassToPass []string `json:"pass_to_pass,omitempty"`
	// Format is how the eval reports each test; "" means TestLogPytest.
	Format string `json:"format,omitempty"`
}

// Limits end a trajectory; zero means unlimited. FormatErrorLimit is the
// model replies in a row without a valid action that end it.
type Limits struct {
	StepLimit        int   `json:"step_limit,omitempty"`
	TokenBudget      int   `json:"token_budget,omitempty"`
	WallClockMS      int64 `json:"wall_clock_ms,omitempty"`
	FormatErrorLimit int   `json:"format_error_limit,omitempty"`
}

// Sampling holds the sampling parameters of every generation. Zero TopP,
// TopK and MinP mean the server's default.
type Sampling struct {
	MaxNewTokens int      `json:"max_new_tokens,omitempty"`
	Temperature  float64  `json:"temperature"`
	TopP         float64  `json:"top_p,omitempty"`
	TopK         int      `json:"top_k,omitempty"`
	MinP         float64  `json:"min_p,omitempty"`
	Stop         []string `json:"stop,omitempty"`
}

// StepTimeout is the time one command may run.
func (e Env) StepTimeout() time.Duration { return ms(e.StepTimeoutMS) }

// SetupTimeout is the time one setup command may run.
func (e Env) SetupTimeout() time.Duration { return ms(e.SetupTimeoutMS) }

// EvalTimeout is the time the eval command may run.
func (e Env) EvalTimeout() time.Duration { return ms(e.EvalTimeoutMS) }

// WallClock is the trajectory's time limit, 0 for none.
func (l Limits) WallClock() time.Duration { return ms(l.WallClockMS) }

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// Normalize fills defaults: GroupID from ID, timeouts, max_new_tokens.
func (s *Sample) Normalize() {
	if s.GroupID == "" {
		s.GroupID = s.ID
	}
	setDefault(&s.Env.StepTimeoutMS, DefaultStepTimeout)
	setDefault(&s.Env.SetupTimeoutMS, DefaultSetupTimeout)
	setDefault(&s.Env.EvalTimeoutMS, DefaultEvalTimeout)
	if s.Sampling.MaxNewTokens == 0 {
		s.Sampling.MaxNewTokens = DefaultMaxNewTokens
	}
}

func setDefault(p *int64, d time.Duration) {
	if *p == 0 {
		*p = d.Milliseconds()
	}
}

// Validation reports whether s is a validation rollout.
func (s *Sample) Validation() bool { return s.Purpose == PurposeValidation }

// Validate reports every problem with s, each naming its field.
func (s *Sample) Validate() error {
	var p problems
	if s.V != Version {
		p.add("v", "must be %d", Version)
	}
	if !ValidID(s.ID) {
		p.add("id", "%s", idProblem(s.ID))
	}
	if s.GroupID != "" && !ValidID(s.GroupID) {
		p.add("group_id", "%s", idProblem(s.GroupID))
	}
	if len(s.Family) > MaxFamilyBytes {
		p.add("family", "longer than %d bytes", MaxFamilyBytes)
	}
	inRange(&p, "group_size", int64(s.GroupSize), MaxGroupSize, "")
	switch {
	case s.GroupIndex < 0:
		p.add("group_index", "must be >= 0, got %d", s.GroupIndex)
	case s.GroupSize > 0 && s.GroupSize <= MaxGroupSize && s.GroupIndex >= s.GroupSize:
		p.add("group_index", "must be < group_size %d, got %d", s.GroupSize, s.GroupIndex)
	case s.GroupIndex >= MaxGroupSize:
		p.add("group_index", "must be < %d (the largest group_size), got %d", MaxGroupSize, s.GroupIndex)
	}
	switch s.Purpose {
	case "", PurposeTrain, PurposeValidation:
	default:
		p.add("purpose", "unknown purpose %q (want %q or %q)", clip(s.Purpose), PurposeTrain, PurposeValidation)
	}
	if s.Flow != "" && !slices.Contains(Flows, s.Flow) {
		p.add("flow", "unknown flow %q (want one of %s)", clip(s.Flow), strings.Join(Flows, ", "))
	}
	switch {
	case s.Task == "":
		p.add("task", "missing")
	case len(s.Task) > MaxTaskBytes:
		p.add("task", "%d bytes exceeds the limit of %d", len(s.Task), MaxTaskBytes)
	}
	switch s.Env.Backend {
	case BackendLocal, BackendSim:
	case "":
		p.add("env.backend", "missing (want %q or %q)", BackendLocal, BackendSim)
	default:
		p.add("env.backend", "unknown backend %q (want %q or %q)", clip(s.Env.Backend), BackendLocal, BackendSim)
	}
	for i, c := range s.Env.Setup {
		if c == "" {
			p.add("env.setup", "command %d is empty", i)
		}
	}
	if ts := s.Env.Tests; ts != nil {
		if len(ts.FailToPass)+len(ts.PassToPass) == 0 {
			p.add("env.tests", "lists no test")
		}
		for _, l := range []struct {
			field string
			ids   []string
		}{{"env.tests.fail_to_pass", ts.FailToPass}, {"env.tests.pass_to_pass", ts.PassToPass}} {
			for i, id := range l.ids {
				if strings.TrimSpace(id) == "" {
					p.add(l.field, "test %d is empty", i)
				}
			}
		}
		if ts.Format != "" && !slices.Contains(TestLogs, ts.Format) {
			p.add("env.tests.format", "unknown format %q (want one of %s)", clip(ts.Format), strings.Join(TestLogs, ", "))
		}
	}
	inDuration(&p, "env.step_timeout_ms", s.Env.StepTimeoutMS, MaxStepTimeout)
	inDuration(&p, "env.setup_timeout_ms", s.Env.SetupTimeoutMS, MaxSetupTimeout)
	inDuration(&p, "env.eval_timeout_ms", s.Env.EvalTimeoutMS, MaxEvalTimeout)
	inRange(&p, "limits.step_limit", int64(s.Limits.StepLimit), MaxStepLimit, "")
	inRange(&p, "limits.token_budget", int64(s.Limits.TokenBudget), MaxTokenBudget, " (the most tokens a result holds)")
	inDuration(&p, "limits.wall_clock_ms", s.Limits.WallClockMS, MaxWallClock)
	inRange(&p, "limits.format_error_limit", int64(s.Limits.FormatErrorLimit), MaxFormatErrorLimit, "")
	inRange(&p, "sampling.max_new_tokens", int64(s.Sampling.MaxNewTokens), MaxNewTokens, "")
	inRange(&p, "sampling.top_k", int64(s.Sampling.TopK), MaxTopK, "")
	if t := s.Sampling.Temperature; t < 0 || t > MaxTemperature {
		p.add("sampling.temperature", "must be in [0, %d], got %g", MaxTemperature, t)
	}
	if v := s.Sampling.TopP; v < 0 || v > 1 {
		p.add("sampling.top_p", "must be in [0, 1], got %g", v)
	}
	if v := s.Sampling.MinP; v < 0 || v > 1 {
		p.add("sampling.min_p", "must be in [0, 1], got %g", v)
	}
	if len(s.Metadata) > 0 && !json.Valid(s.Metadata) {
		p.add("metadata", "not valid JSON")
	}
	return p.err()
}

func nonNegative(p *problems, field string, v int64) {
	if v < 0 {
		p.add(field, "must be >= 0, got %d", v)
	}
}

// inRange checks 0 <= v <= limit; note says what the limit is.
func inRange(p *problems, field string, v, limit int64, note string) {
	switch {
	case v < 0:
		p.add(field, "must be >= 0, got %d", v)
	case v > limit:
		p.add(field, "must be <= %d%s, got %d", limit, note, v)
	}
}

// inDuration checks 0 <= ms <= limit for a field in milliseconds.
func inDuration(p *problems, field string, ms int64, limit time.Duration) {
	inRange(p, field, ms, limit.Milliseconds(), " ("+human(limit)+")")
}

// human writes d in days or hours: "24 h", "7 days".
func human(d time.Duration) string {
	if d >= 48*time.Hour && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	}
	return fmt.Sprintf("%g h", d.Hours())
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// DecodeSample decodes, validates and normalizes a sample. It refuses a
// field the Sample type does not have (at any depth but inside metadata),
// naming it by its JSON path: a misspelt field would otherwise be ignored
// and its default used.
func DecodeSample(b []byte) (Sample, error) {
	if len(b) > MaxSampleBytes {
		return Sample{}, fieldErr("(message)", "%d bytes exceeds the sample limit of %d", len(b), MaxSampleBytes)
	}
	var s Sample
	if err := decode(b, &s); err != nil {
		return Sample{}, err
	}
	var p problems
	checkFields(&p, b, reflect.TypeFor[Sample](), "")
	if err := errors.Join(p.err(), s.Validate()); err != nil {
		return Sample{}, err
	}
	s.Normalize()
	return s, nil
}
