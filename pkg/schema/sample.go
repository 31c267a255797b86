package schema

import (
	"encoding/json"
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

// Env backends a sample may ask for.
const (
	BackendLocal = "local" // real bash in a per-trajectory directory
	BackendSim   = "sim"   // simulated latencies, no processes
)

var idPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// ValidID reports whether s may be used as a sample or trajectory id: it ends
// up in Redis keys, NATS message ids and sandbox directory names.
func ValidID(s string) bool { return idPattern.MatchString(s) }

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
		p.add("id", "must match [A-Za-z0-9._-]{1,128}, got %q", clip(s.ID))
	}
	if s.GroupID != "" && !ValidID(s.GroupID) {
		p.add("group_id", "must match [A-Za-z0-9._-]{1,128}, got %q", clip(s.GroupID))
	}
	if len(s.Family) > 256 {
		p.add("family", "longer than 256 bytes")
	}
	if s.GroupIndex < 0 {
		p.add("group_index", "must be >= 0, got %d", s.GroupIndex)
	}
	if s.GroupSize < 0 {
		p.add("group_size", "must be >= 0, got %d", s.GroupSize)
	} else if s.GroupSize > 0 && s.GroupIndex >= s.GroupSize {
		p.add("group_index", "must be < group_size %d, got %d", s.GroupSize, s.GroupIndex)
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
	nonNegative(&p, "env.step_timeout_ms", s.Env.StepTimeoutMS)
	nonNegative(&p, "env.setup_timeout_ms", s.Env.SetupTimeoutMS)
	nonNegative(&p, "env.eval_timeout_ms", s.Env.EvalTimeoutMS)
	nonNegative(&p, "limits.step_limit", int64(s.Limits.StepLimit))
	nonNegative(&p, "limits.token_budget", int64(s.Limits.TokenBudget))
	nonNegative(&p, "limits.wall_clock_ms", s.Limits.WallClockMS)
	nonNegative(&p, "limits.format_error_limit", int64(s.Limits.FormatErrorLimit))
	nonNegative(&p, "sampling.max_new_tokens", int64(s.Sampling.MaxNewTokens))
	nonNegative(&p, "sampling.top_k", int64(s.Sampling.TopK))
	if t := s.Sampling.Temperature; t < 0 || t > 100 {
		p.add("sampling.temperature", "must be in [0, 100], got %g", t)
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

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// DecodeSample decodes, validates and normalizes a sample.
func DecodeSample(b []byte) (Sample, error) {
	if len(b) > MaxSampleBytes {
		return Sample{}, fieldErr("(message)", "%d bytes exceeds the sample limit of %d", len(b), MaxSampleBytes)
	}
	var s Sample
	if err := decode(b, &s); err != nil {
		return Sample{}, err
	}
	if err := s.Validate(); err != nil {
		return Sample{}, err
	}
	s.Normalize()
	return s, nil
}
