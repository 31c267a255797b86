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
// Every template sees Vars; the model's variables n_model_calls (the model
// calls made so far in the trajectory) and model_cost (always 0.0: actloop
// does not count dollars); and the trajectory's task, once For has bound it.
// mini-swe-agent's render_template (v1.17.5, agents/default.py) passes the
// same: the config's fields, the environment's and the model's template
// variables, and run's extra_template_vars, which hold the task. Each
// template also sees the variables of its own call, which win on a clash:
//
//	system_template              –
//	instance_template            task (its argument)
//	action_observation_template  output: {output, returncode, action}
//	format_error_template        actions (the matches found), reason
//	timeout_template             action: {action}, output (the partial output)
//
// reason is actloop's: empty unless the single ```bash block was rejected
// (an empty command); a template that does not use it reads as in
// mini-swe-agent. Values print as Python prints them (see pyvalue.go): the
// output dict above as {'output': '…', 'returncode': 0, 'action': 'ls'},
// a YAML 0. as 0.0, null as None.
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
	// CostLimit is mini-swe-agent's dollar budget, which it checks as
	// 0 < cost_limit <= model_cost before each model call. actloop
	// generates on its own inference servers and does not count dollars:
	// model_cost is always 0.0, so the limit is never reached, and Notices
	// says so. Budgets are set per sample with limits.token_budget.
	CostLimit float64 `json:"cost_limit,omitempty"`
	// Vars are template variables every template sees: the agent section's
	// own keys, the environment section's keys but environment_class, and
	// the host's uname, as Load fills them. Values from the YAML are as
	// PyYAML reads them, in the types of pyvalue.go, so they print as
	// Python's.
	Vars map[string]any `json:"vars,omitempty"`

	run trajectoryVars // set by For
}

// trajectoryVars are the variables of one trajectory rather than of the
// configuration.
type trajectoryVars struct {
	task       string
	hasTask    bool
	modelCalls int
}

// Template variables that do not come from the configuration.
const (
	varTask       = "task"
	varModelCalls = "n_model_calls"
	varModelCost  = "model_cost"
)

// For returns c with a trajectory's own variables bound: every template
// then sees task, and n_model_calls is modelCalls, the model calls the
// trajectory has made so far (the one whose output is being answered
// included). mini-swe-agent sets the task before it renders the system
// message and counts a call once the model has answered it, so the opening
// messages see 0, and a turn's observation, format error or timeout the
// calls up to and including that turn.
func (c Config) For(task string, modelCalls int) Config {
	c.run = trajectoryVars{task: task, hasTask: true, modelCalls: modelCalls}
	return c
}

// Notices returns what a worker should tell its operator about c: the
// settings it reads but does not apply, each naming its field.
func (c Config) Notices() []string {
	var n []string
	if c.CostLimit > 0 {
		n = append(n, fmt.Sprintf("%s: %g is not applied: actloop does not count dollars (model_cost is always 0.0, "+
			"so the limit is never reached); set a token budget per sample with limits.token_budget", fieldCostLimit, c.CostLimit))
	}
	return n
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

// vars returns Vars, the model's and the trajectory's variables, and the
// call's variables, each laid over the ones before.
func (c Config) vars(call map[string]any) map[string]any {
	v := make(map[string]any, len(c.Vars)+len(call)+3)
	maps.Copy(v, c.Vars)
	v[varModelCalls] = c.run.modelCalls
	v[varModelCost] = pyFloat(0)
	if c.run.hasTask {
		v[varTask] = c.run.task
	}
	maps.Copy(v, call)
	return v
}

func outputVars(action, output string, returnCode int) map[string]any {
	return map[string]any{"output": outputDict{"output": output, "returncode": returnCode, "action": action}}
}

func formatErrorVars(actions []string, reason string) map[string]any {
	a := make(pyList, len(actions))
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
// rendered on sample data with a task bound (as For binds it), both sides
// of the usual 10,000-character truncation, so a misspelt variable such as
// output.return_code fails here and not in the middle of a rollout.
func (c Config) Validate() error {
	long := strings.Repeat("x", 20000)
	sample := c.For("Fix the bug.", 1)
	checks := []struct {
		field   string
		text    string
		samples []map[string]any
	}{
		{fieldSystem, c.SystemTemplate, []map[string]any{nil}},
		{fieldInstance, c.InstanceTemplate, []map[string]any{nil}},
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
			if _, err := render(ch.field, ch.text, sample.vars(data)); err != nil {
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

// System renders the system message; vars, if any, are laid over Vars. Its
// template sees task when c is bound with For, as Opening binds it.
func (c Config) System(vars map[string]any) (string, error) {
	return render(fieldSystem, c.SystemTemplate, c.vars(vars))
}

// Instance renders the first user message, which carries the task; vars,
// if any, are laid over Vars.
func (c Config) Instance(task string, vars map[string]any) (string, error) {
	v := c.vars(vars)
	v[varTask] = task
	return render(fieldInstance, c.InstanceTemplate, v)
}

// Observation renders the user message that reports the output and exit
// code of action. Bind c with For first: unbound, task is undefined and
// n_model_calls is 0 (the same holds for FormatError, FormatErrorFor and
// Timeout).
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
