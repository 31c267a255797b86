package agent

import (
	"errors"
	"fmt"
	"strings"
	"text/template"
	"unicode/utf8"
)

// Config holds the prompt templates. Each is a Go text/template executed with
// Option("missingkey=error"), the equivalent of Jinja's StrictUndefined in
// mini-swe-agent: a typo in a variable name fails the render instead of
// silently sending an empty string to the model.
//
// Besides text/template's builtins, templates may call these, which count and
// cut by characters (runes) as Python's len and slicing do in the original
// Jinja templates; the builtin len counts bytes, and cutting by bytes could
// split a UTF-8 sequence:
//
//	runes s   the number of characters in s
//	head n s  the first n characters of s
//	tail n s  the last n characters of s
//	sub a b   a - b
type Config struct {
	// SystemTemplate is the first (system) message. Data: .Vars.
	SystemTemplate string `json:"system_template"`
	// InstanceTemplate is the first user message. Data: .Task, .Vars.
	InstanceTemplate string `json:"instance_template"`
	// ActionObservationTemplate reports a command's result.
	// Data: .Output.Output (string), .Output.ReturnCode (int).
	ActionObservationTemplate string `json:"action_observation_template"`
	// FormatErrorTemplate answers a turn without exactly one runnable action.
	// Data: .Actions ([]string, the matches found), .Reason (string, empty
	// unless the single match was rejected, e.g. an empty command).
	FormatErrorTemplate string `json:"format_error_template"`
	// TimeoutTemplate reports a command killed at its timeout.
	// Data: .Action, .Output (the partial output).
	TimeoutTemplate string `json:"timeout_template"`
}

// Template data. The types are unexported because only their field names
// matter to a template author; Config documents them.
type (
	systemData struct {
		Vars map[string]string
	}
	instanceData struct {
		Task string
		Vars map[string]string
	}
	commandOutput struct {
		Output     string
		ReturnCode int
	}
	observationData struct {
		Output commandOutput
	}
	formatErrorData struct {
		Actions []string
		Reason  string
	}
	timeoutData struct {
		Action string
		Output string
	}
)

// Field names as in the JSON tags, so an error points at the config key.
const (
	fieldSystem      = "system_template"
	fieldInstance    = "instance_template"
	fieldObservation = "action_observation_template"
	fieldFormatError = "format_error_template"
	fieldTimeout     = "timeout_template"
)

// funcs are the template functions listed on Config.
func funcs() template.FuncMap {
	return template.FuncMap{
		"runes": utf8.RuneCountInString,
		"head":  head,
		"tail":  tail,
		"sub":   func(a, b int) int { return a - b },
	}
}

func head(n int, s string) string {
	if n <= 0 {
		return ""
	}
	i := 0
	for pos := range s {
		if i == n {
			return s[:pos]
		}
		i++
	}
	return s
}

func tail(n int, s string) string {
	if n <= 0 {
		return ""
	}
	count := utf8.RuneCountInString(s)
	if n >= count {
		return s
	}
	skip := count - n
	i := 0
	for pos := range s {
		if i == skip {
			return s[pos:]
		}
		i++
	}
	return ""
}

func parse(field, text string) (*template.Template, error) {
	t, err := template.New(field).Funcs(funcs()).Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	return t, nil
}

// render parses on every call: a step takes seconds, parsing microseconds,
// and it keeps Config a plain comparable value.
func render(field, text string, data any) (string, error) {
	t, err := parse(field, text)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	return b.String(), nil
}

// Validate parses every template and joins all problems, each prefixed with
// the field's JSON name. An empty template is a problem: a zero Config is a
// mistake, not a wish to send the model empty messages. The templates whose
// data is fixed (observation, format error, timeout) are also executed on
// sample data, so a misspelt field such as .Output.Returncode fails here and
// not in the middle of a rollout; the system and instance templates depend on
// caller-supplied Vars and are only parsed.
func (c Config) Validate() error {
	long := strings.Repeat("x", 20000) // takes the truncation branch
	checks := []struct {
		field   string
		text    string
		samples []any
	}{
		{fieldSystem, c.SystemTemplate, nil},
		{fieldInstance, c.InstanceTemplate, nil},
		{fieldObservation, c.ActionObservationTemplate, []any{
			observationData{Output: commandOutput{Output: "ok\n"}},
			observationData{Output: commandOutput{Output: long, ReturnCode: 1}},
		}},
		{fieldFormatError, c.FormatErrorTemplate, []any{
			formatErrorData{},
			formatErrorData{Actions: []string{""}, Reason: "the command is empty"},
		}},
		{fieldTimeout, c.TimeoutTemplate, []any{
			timeoutData{Action: "sleep 100", Output: "partial\n"},
			timeoutData{Action: "yes", Output: long},
		}},
	}
	var errs []error
	for _, ch := range checks {
		if strings.TrimSpace(ch.text) == "" {
			errs = append(errs, fmt.Errorf("%s: empty", ch.field))
			continue
		}
		if _, err := parse(ch.field, ch.text); err != nil {
			errs = append(errs, err)
			continue
		}
		for _, data := range ch.samples {
			if _, err := render(ch.field, ch.text, data); err != nil {
				errs = append(errs, err)
				break // one execution error per field is enough
			}
		}
	}
	return errors.Join(errs...)
}

// System renders the system message.
func (c Config) System(vars map[string]string) (string, error) {
	return render(fieldSystem, c.SystemTemplate, systemData{Vars: vars})
}

// Instance renders the first user message, which carries the task.
func (c Config) Instance(task string, vars map[string]string) (string, error) {
	return render(fieldInstance, c.InstanceTemplate, instanceData{Task: task, Vars: vars})
}

// Observation renders the user message that reports a command's output and
// exit code.
func (c Config) Observation(output string, returnCode int) (string, error) {
	return render(fieldObservation, c.ActionObservationTemplate,
		observationData{Output: commandOutput{Output: output, ReturnCode: returnCode}})
}

// FormatError renders the user message for a turn that did not hold exactly
// one action; actions are the matches found.
func (c Config) FormatError(actions []string) (string, error) {
	return render(fieldFormatError, c.FormatErrorTemplate, formatErrorData{Actions: actions})
}

// FormatErrorFor renders the user message for an error from ParseAction. It
// passes the reason too, so the model hears "your command is empty" rather
// than "found 1 actions" when it sent one empty block.
func (c Config) FormatErrorFor(fe *FormatError) (string, error) {
	if fe == nil {
		return c.FormatError(nil)
	}
	return render(fieldFormatError, c.FormatErrorTemplate,
		formatErrorData{Actions: fe.Actions, Reason: fe.Reason})
}

// Timeout renders the user message for a command killed at its timeout;
// output is whatever it printed before that.
func (c Config) Timeout(action, output string) (string, error) {
	return render(fieldTimeout, c.TimeoutTemplate, timeoutData{Action: action, Output: output})
}
