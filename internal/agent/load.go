package agent

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"math/big"
	"os"
	"runtime"
	"strings"

	"go.yaml.in/yaml/v3"
)

// mini-swe-agent v1's AgentConfig defaults, for the keys a YAML file leaves
// out (its default.yaml has no timeout_template, for one).
// Source: SWE-agent/mini-swe-agent v1.17.5, src/minisweagent/agents/default.py.
const (
	minisweSystemTemplate   = "You are a helpful assistant that can do anything."
	minisweInstanceTemplate = "Your task: {{task}}. Please reply with a single shell command in triple backticks. " +
		"To finish, the first line of the output of the shell command must be 'COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT'."
	minisweTimeoutTemplate = "The last command <command>{{action['action']}}</command> timed out and has been killed.\n" +
		"The output of the command was:\n" +
		"{% if output | length < 10000 -%}\n" +
		"<output>\n{{output}}\n</output>\n" +
		"{%- else -%}\n" +
		"<warning>Output was too long and has been truncated.</warning>\n" +
		"<output_head>\n{{ output[:5000] }}\n</output_head>\n" +
		"<elided_chars>{{ output | length - 10000 }} characters elided</elided_chars>\n" +
		"<output_tail>\n{{ output[-5000:] }}\n</output_tail>\n" +
		"{%- endif %}\n" +
		"Please try another command and make sure to avoid those requiring interactive input."
	minisweFormatErrorTemplate = "Please always provide EXACTLY ONE action in triple backticks."
	minisweObservationTemplate = "Observation: {{output}}"
	minisweActionRegex         = "```bash\\s*\\n(.*?)\\n```"
	minisweStepLimit           = 0   // step_limit: int = 0
	minisweCostLimit           = 3.0 // cost_limit: float = 3.0
)

// MaxConfigBytes bounds a configuration file.
const MaxConfigBytes = 1 << 20

// Parse reads a mini-swe-agent (v1) YAML configuration: the agent section's
// templates, action_regex, step_limit and cost_limit, with mini-swe-agent's
// defaults for the keys it leaves out. Every key of the agent and
// environment sections becomes a template variable, as mini-swe-agent
// passes its agent and environment configs to the templates, with the
// value PyYAML's safe_load gives it (so step_limit: 0. prints as 0.0, as
// Jinja2 prints it); the environment and model sections are otherwise not
// applied (actloop's sandboxes and sampling come from the sample). The
// result is validated.
//
// A v2 configuration, whose observation and format-error templates sit in
// the model section, is refused with an error saying so.
func Parse(data []byte, vars map[string]any) (Config, error) {
	if len(data) > MaxConfigBytes {
		return Config{}, fmt.Errorf("%d bytes exceeds the limit of %d", len(data), MaxConfigBytes)
	}
	var doc struct {
		Agent       map[string]any `yaml:"agent"`
		Environment map[string]any `yaml:"environment"`
		Model       map[string]any `yaml:"model"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return Config{}, fmt.Errorf("yaml: %w", err)
	}
	if doc.Agent == nil {
		return Config{}, errors.New("agent: missing (want a mini-swe-agent configuration with an agent section)")
	}
	_, hasObs := doc.Agent[fieldObservation]
	if !hasObs && (doc.Model["observation_template"] != nil || doc.Model["format_error_template"] != nil) {
		return Config{}, errors.New("model.observation_template: a mini-swe-agent v2 configuration; " +
			"actloop reads v1 configurations (all templates in the agent section, as in mini-swe-agent 1.x)")
	}
	sections, err := pyYAMLSections(data, "agent", "environment")
	if err != nil {
		return Config{}, fmt.Errorf("yaml: %w", err)
	}
	agent := map[string]any{
		fieldSystem: minisweSystemTemplate, fieldInstance: minisweInstanceTemplate,
		fieldTimeout: minisweTimeoutTemplate, fieldFormatError: minisweFormatErrorTemplate,
		fieldObservation: minisweObservationTemplate, fieldActionRegex: minisweActionRegex,
		fieldStepLimit: minisweStepLimit, fieldCostLimit: pyFloat(minisweCostLimit),
	}
	if a, ok := sections["agent"].(pyDict); ok {
		maps.Copy(agent, a)
	}
	var errs []error
	str := func(field string) string {
		s, ok := agent[field].(string)
		if !ok {
			errs = append(errs, fmt.Errorf("agent.%s: must be a string, got %s", field, pyTypeName(agent[field])))
		}
		return s
	}
	c := Config{
		SystemTemplate: str(fieldSystem), InstanceTemplate: str(fieldInstance),
		ActionObservationTemplate: str(fieldObservation), FormatErrorTemplate: str(fieldFormatError),
		TimeoutTemplate: str(fieldTimeout), ActionRegex: str(fieldActionRegex),
	}
	if c.ActionRegex == minisweActionRegex {
		c.ActionRegex = "" // the built-in pattern, with ParseAction's CRLF handling
	}
	steps, err := number(agent[fieldStepLimit])
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("agent.%s: %w", fieldStepLimit, err))
	case steps != math.Trunc(steps) || steps > math.MaxInt32:
		errs = append(errs, fmt.Errorf("agent.%s: must be a whole number of steps, got %g", fieldStepLimit, steps))
	default:
		c.StepLimit = int(steps)
	}
	if c.CostLimit, err = number(agent[fieldCostLimit]); err != nil {
		errs = append(errs, fmt.Errorf("agent.%s: %w", fieldCostLimit, err))
	}
	if len(errs) > 0 {
		return Config{}, errors.Join(errs...)
	}
	// The templates see the values as written (step_limit: 0. is 0.0), not
	// the numbers read from them.
	c.Vars = agent
	if env, ok := sections["environment"].(pyDict); ok {
		maps.Copy(c.Vars, env)
		// mini-swe-agent's get_environment pops it before it builds the
		// environment, whose config the templates see.
		delete(c.Vars, "environment_class")
	}
	maps.Copy(c.Vars, vars)
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// number reads a limit: an int or a float, a null as 0.
func number(v any) (float64, error) {
	switch n := v.(type) {
	case int:
		return float64(n), nil
	case pyFloat:
		if math.IsNaN(float64(n)) || math.IsInf(float64(n), 0) {
			return 0, fmt.Errorf("must be a finite number, got %s", n)
		}
		return float64(n), nil
	case *big.Int:
		f, _ := new(big.Float).SetInt(n).Float64()
		return f, nil
	case pyNone, nil:
		return 0, nil
	}
	return 0, fmt.Errorf("must be a number, got %s", pyTypeName(v))
}

// pyTypeName names a YAML value's Python type, for errors.
func pyTypeName(v any) string {
	switch v.(type) {
	case string:
		return "str"
	case int, *big.Int:
		return "int"
	case pyFloat:
		return "float"
	case bool:
		return "bool"
	case pyNone, nil:
		return "None"
	case pyList:
		return "list"
	case pyDict:
		return "dict"
	}
	return fmt.Sprintf("%T", v)
}

// Load reads a mini-swe-agent YAML configuration file (see Parse) and adds
// the host's uname to its template variables, as mini-swe-agent's local
// environment does, so templates that print {{system}} {{release}}
// {{version}} {{machine}} render.
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	c, err := Parse(data, HostVars())
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// HostVars returns the fields of Python's platform.uname() for this host:
// system, node, release, version, machine, processor.
func HostVars() map[string]any {
	system := procString("ostype")
	if system == "" {
		system = strings.ToUpper(runtime.GOOS[:1]) + runtime.GOOS[1:]
	}
	node, _ := os.Hostname()
	machine := map[string]string{"amd64": "x86_64", "arm64": "aarch64", "386": "i686"}[runtime.GOARCH]
	if machine == "" {
		machine = runtime.GOARCH
	}
	return map[string]any{"system": system, "node": node, "release": procString("osrelease"),
		"version": procString("version"), "machine": machine, "processor": ""}
}

func procString(name string) string {
	b, err := os.ReadFile("/proc/sys/kernel/" + name)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// LoadOrDefault is Load for a non-empty path and DefaultConfig otherwise:
// what a worker does with its ACTLOOP_AGENT_CONFIG setting.
func LoadOrDefault(path string) (Config, error) {
	if path == "" {
		return DefaultConfig(), nil
	}
	return Load(path)
}
