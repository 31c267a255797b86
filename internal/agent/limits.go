package agent

import (
	"errors"
	"fmt"
	"time"

	"github.com/actloop/actloop/pkg/schema"
)

// ErrLimitsExceeded ends a trajectory: CheckLimits wraps it with the limit
// that was reached. Terminal, like mini-swe-agent's LimitsExceeded.
var ErrLimitsExceeded = errors.New("limits exceeded")

// Limits bound one trajectory. Zero means unlimited.
type Limits struct {
	// StepLimit is the most model calls.
	StepLimit int
	// TokenBudget is the most tokens, counted as Usage.Tokens counts them.
	TokenBudget int
	// WallClock is the most time since the trajectory started.
	WallClock time.Duration
	// FormatErrorLimit is the most model turns in a row without a valid
	// action.
	FormatErrorLimit int
	// ContextLength is the inference server's context length: the most
	// tokens a model call's input and output may hold together. It is not
	// the sample's but the server's; 0 means the server does not say.
	ContextLength int
}

// Usage is what a trajectory has spent so far.
type Usage struct {
	Calls   int
	Tokens  int
	Elapsed time.Duration
	// FormatErrors counts the last turns in a row without a valid action.
	FormatErrors int
	// Context is the length of the next model call's input: the
	// conversation so far, and a resumed turn's output so far.
	Context int
}

// LimitError is the limit CheckLimits found reached: Limit names it as the
// sample's limits do (step_limit, token_budget, wall_clock,
// format_error_limit), or context_length. It wraps ErrLimitsExceeded.
type LimitError struct {
	Limit string
	Value any // the limit's value
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%v: %s %v reached", ErrLimitsExceeded, e.Limit, e.Value)
}

func (e *LimitError) Unwrap() error { return ErrLimitsExceeded }

// Validate rejects negative limits, which would read as unlimited and so
// probably hide a sign error in the caller's config.
func (l Limits) Validate() error {
	var errs []error
	if l.StepLimit < 0 {
		errs = append(errs, fmt.Errorf("step_limit: %d is negative", l.StepLimit))
	}
	if l.TokenBudget < 0 {
		errs = append(errs, fmt.Errorf("token_budget: %d is negative", l.TokenBudget))
	}
	if l.WallClock < 0 {
		errs = append(errs, fmt.Errorf("wall_clock: %s is negative", l.WallClock))
	}
	if l.FormatErrorLimit < 0 {
		errs = append(errs, fmt.Errorf("format_error_limit: %d is negative", l.FormatErrorLimit))
	}
	if l.ContextLength < 0 {
		errs = append(errs, fmt.Errorf("context_length: %d is negative", l.ContextLength))
	}
	return errors.Join(errs...)
}

// CheckLimits runs before each model call, as mini-swe-agent's query does
// (0 < step_limit <= calls). A limit is reached when usage equals it: with
// StepLimit 10, ten calls are made and the eleventh is refused. The context
// length is reached when the call's input leaves no room for a new token
// (ContextRoom < 1): the server would refuse the call, and the trajectory
// ends at the turn before, its tokens kept. It returns nil or a *LimitError
// naming the first limit reached, checked in the order steps, tokens, wall
// clock, format errors, context length.
func CheckLimits(l Limits, u Usage) error {
	switch {
	case l.StepLimit > 0 && u.Calls >= l.StepLimit:
		return &LimitError{Limit: schema.LimitStep, Value: l.StepLimit}
	case l.TokenBudget > 0 && u.Tokens >= l.TokenBudget:
		return &LimitError{Limit: schema.LimitTokenBudget, Value: l.TokenBudget}
	case l.WallClock > 0 && u.Elapsed >= l.WallClock:
		return &LimitError{Limit: schema.LimitWallClock, Value: l.WallClock}
	case l.FormatErrorLimit > 0 && u.FormatErrors >= l.FormatErrorLimit:
		return &LimitError{Limit: schema.LimitFormatError, Value: l.FormatErrorLimit}
	case l.ContextLength > 0 && ContextRoom(l.ContextLength, u.Context) < 1:
		return &LimitError{Limit: schema.LimitContextLength, Value: l.ContextLength}
	}
	return nil
}

// MaxNewTokens is the max_new_tokens for the next call: the per-turn cap
// maxNew, lowered to what is left of the token budget so the last call cannot
// overshoot it, and to the room its input leaves in the server's context
// (ContextRoom), so the server takes the call however long the
// conversation has grown. With neither it is maxNew. It never returns less
// than 0; 0 means the budget is spent or the context full, which
// CheckLimits reports before a turn's call (a resumed turn that meets it
// ends with the output it has).
func MaxNewTokens(maxNew int, l Limits, u Usage) int {
	n := maxNew
	if l.TokenBudget > 0 {
		n = min(n, l.TokenBudget-u.Tokens)
	}
	if l.ContextLength > 0 {
		n = min(n, ContextRoom(l.ContextLength, u.Context))
	}
	return max(n, 0)
}

// ContextRoom is the most new tokens a call whose input holds input tokens
// may ask of a server whose context length is contextLength: one less than
// what the context has left, since SGLang refuses input + max_new_tokens >=
// the context length in older versions (python/sglang/srt/managers/
// tokenizer_manager.py, _validate_one_request) and > in newer ones, as vLLM
// does; one token spared, every version takes the call. Negative when the
// input alone fills the context.
func ContextRoom(contextLength, input int) int { return contextLength - input - 1 }

// MinLimit combines two limits where 0 means unlimited: the lower of those
// set, or 0 when neither is.
func MinLimit(a, b int) int {
	switch {
	case a <= 0:
		return max(b, 0)
	case b <= 0:
		return a
	}
	return min(a, b)
}
