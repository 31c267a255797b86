package agent

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"strings"
)

// Config is a mini-swe-agent (v1) agent configuration: its prompt templates,
// action pattern and limits. The templates are Jinja2, rendered as
// mini-swe-agent renders them (jinja2.Template(text, undefined=StrictUndefined)):
// a variable or attribute that does not exist fails the render instead of
// silently sending an empty string to the model.
//
// Every template sees Vars, then the variables of its own call, which win
// on a clash (mini-swe-agent's render_template merges the config's fields,
// the environment's and the model's template variables, and the call's):
//
//	system_template              Vars, task
//	instance_template            Vars, task
//	action_observation_template  Vars, output: {output, returncode, action}
//	format_error_template        Vars, actions (the matches found), reason
//	timeout_template             Vars, action: {action}, output (the partial output)
//
// reason is actloop's: empty unless the single ```bash block was rejected
// (an empty command); a template that does not use it reads as in
// mini-swe-agent. task is only known to the first two templates; a later
// template that uses it fails Validate.
type Config struct {
	// SystemTemplate is the first (system) message.
	SystemTemplate string `json:"system_template"`
	// InstanceTemplate is the first user message, which carries the task.
	InstanceTemplate string `json:"instance_template"`
	// ActionObservationTemplate reports a command's result.
	ActionObservationTemplate string `json:"action_observation_template"`
	// FormatErrorTemplate answers a turn without exactly one runnable action.
	FormatErrorTemplate string `json:"format_error_template"`
	// TimeoutTemplate reports a command killed at its timeout.
	TimeoutTemplate string `json:"timeout_template"`
	// ActionRegex finds the action in a model turn, matched with dot-all as
	// Python's re.findall(action_regex, text, re.DOTALL); its one group (or
	// the whole match, without a group) is the action. Empty: mini-swe-agent's
	// ```bash pattern. RE2 syntax: Python-only constructs such as look-arounds
	// fail Validate.
	ActionRegex string `json:"action_regex,omitempty"`
	// StepLimit is the most model calls per trajectory, 0 for none. A
	// sample's own limits.step_limit applies too; the lower one wins.
	StepLimit int `json:"step_limit,omitempty"`
	// CostLimit is mini-swe-agent's dollar budget. actloop generates on its
	// own inference servers and counts tokens, not dollars, so it keeps the
	// value only to report that it is not applied: budgets are set per
	// sample with limits.token_budget.
	CostLimit float64 `json:"cost_limit,omitempty"`
	// Vars are template variables every template sees: the agent section's
	// own keys, the environment section's keys and the host's uname, as
	// Load fills them.
	Vars map[string]any `json:"vars,omitempty"`
}

// Field names as in the YAML and JSON keys, so an error points at the config key.
const (
	fieldSystem      = "system_template"
	fieldInstance    = "instance_template"
	fieldObservation = "action_observation_template"
	fieldFormatError = "format_error_template"
	fieldTimeout     = "timeout_template"
	fieldActionRegex = "action_regex"
	fieldStepLimit   = "step_limit"
	fieldCostLimit   = "cost_limit"
)

// vars returns Vars with the call's variables laid over them.
func (c Config) vars(call map[string]any) map[string]any {
	v := make(map[string]any, len(c.Vars)+len(call))
	maps.Copy(v, c.Vars)
	maps.Copy(v, call)
	return v
}

func outputVars(action, output string, returnCode int) map[string]any {
	return map[string]any{"output": map[string]any{"output": output, "returncode": returnCode, "action": action}}
}

func formatErrorVars(actions []string, reason string) map[string]any {
	a := make([]any, len(actions))
	for i, s := range actions {
		a[i] = s
	}
	return map[string]any{"actions": a, "reason": reason}
}

func timeoutVars(action, output string) map[string]any {
	return map[string]any{"action": map[string]any{"action": action}, "output": output}
}

// Validate checks every field and joins all problems, each prefixed with
// the field's name. An empty template is a problem: a zero Config is a
// mistake, not a wish to send the model empty messages. Each template is
// rendered on sample data, both sides of the usual 10,000-character
// truncation, so a misspelt variable such as output.return_code fails here
// and not in the middle of a rollout.
func (c Config) Validate() error {
	long := strings.Repeat("x", 20000)
	checks := []struct {
		field   string
		text    string
		samples []map[string]any
	}{
		{fieldSystem, c.SystemTemplate, []map[string]any{{"task": "Fix the bug."}}},
		{fieldInstance, c.InstanceTemplate, []map[string]any{{"task": "Fix the bug."}}},
		{fieldObservation, c.ActionObservationTemplate, []map[string]any{
			outputVars("ls", "ok\n", 0), outputVars("cat f", long, 1)}},
		{fieldFormatError, c.FormatErrorTemplate, []map[string]any{
			formatErrorVars(nil, ""), formatErrorVars([]string{""}, "the command is empty")}},
		{fieldTimeout, c.TimeoutTemplate, []map[string]any{
			timeoutVars("sleep 100", "partial\n"), timeoutVars("yes", long)}},
	}
	var errs []error
	for _, ch := range checks {
		if strings.TrimSpace(ch.text) == "" {
			errs = append(errs, fmt.Errorf("%s: empty", ch.field))
			continue
		}
		for _, data := range ch.samples {
			if _, err := render(ch.field, ch.text, c.vars(data)); err != nil {
				errs = append(errs, err)
				break // one error per field is enough
			}
		}
	}
	if _, err := compileActionRegex(c.ActionRegex); err != nil {
		errs = append(errs, err)
	}
	if c.StepLimit < 0 {
		errs = append(errs, fmt.Errorf("%s: %d is negative", fieldStepLimit, c.StepLimit))
	}
	if c.CostLimit < 0 {
		errs = append(errs, fmt.Errorf("%s: %g is negative", fieldCostLimit, c.CostLimit))
	}
	return errors.Join(errs...)
}

// compileActionRegex compiles a mini-swe-agent action_regex; "" is the
// default pattern.
func compileActionRegex(expr string) (*regexp.Regexp, error) {
	if expr == "" {
		return actionRe, nil
	}
	re, err := regexp.Compile("(?s)" + expr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", fieldActionRegex, err)
	}
	if re.NumSubexp() > 1 {
		return nil, fmt.Errorf("%s: has %d groups, want at most 1 (the action)", fieldActionRegex, re.NumSubexp())
	}
	return re, nil
}

// System renders the system message; vars, if any, are laid over Vars.
func (c Config) System(vars map[string]any) (string, error) {
	return render(fieldSystem, c.SystemTemplate, c.vars(vars))
}

// Instance renders the first user message, which carries the task; vars,
// if any, are laid over Vars.
func (c Config) Instance(task string, vars map[string]any) (string, error) {
	v := c.vars(vars)
	v["task"] = task
	return render(fieldInstance, c.InstanceTemplate, v)
}

// Observation renders the user message that reports the output and exit
// code of action.
func (c Config) Observation(action, output string, returnCode int) (string, error) {
	return render(fieldObservation, c.ActionObservationTemplate, c.vars(outputVars(action, output, returnCode)))
}

// FormatError renders the user message for a turn that did not hold exactly
// one action; actions are the matches found.
func (c Config) FormatError(actions []string) (string, error) {
	return render(fieldFormatError, c.FormatErrorTemplate, c.vars(formatErrorVars(actions, "")))
}

// FormatErrorFor renders the user message for an error from ParseAction. It
// passes the reason too, so a template that uses it can tell the model
// "your command is empty" rather than "found 1 actions".
func (c Config) FormatErrorFor(fe *FormatError) (string, error) {
	if fe == nil {
		return c.FormatError(nil)
	}
	return render(fieldFormatError, c.FormatErrorTemplate, c.vars(formatErrorVars(fe.Actions, fe.Reason)))
}

// Timeout renders the user message for a command killed at its timeout;
// output is whatever it printed before that.
func (c Config) Timeout(action, output string) (string, error) {
	return render(fieldTimeout, c.TimeoutTemplate, c.vars(timeoutVars(action, output)))
}
