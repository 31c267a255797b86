package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/actloop/actloop/internal/tokenize"
)

func TestDefaultConfigParses(t *testing.T) {
	if _, err := Parse(defaultYAML, nil); err != nil {
		t.Fatalf("Parse(default.yaml) = %v", err)
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
}

func TestDefaultConfigIsACopy(t *testing.T) {
	a := DefaultConfig()
	a.Vars["task"] = "changed"
	if _, ok := DefaultConfig().Vars["task"]; ok {
		t.Fatal("a change to one DefaultConfig's Vars shows in the next")
	}
}

func longOutput(n int) string {
	r := []rune("abcdé€😀\n")
	var b strings.Builder
	for i := range n {
		b.WriteRune(r[i%len(r)])
	}
	return b.String()
}

func readGolden(t *testing.T, name string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// The built-in configuration renders what the earlier Go text/template
// version of the same templates rendered (testdata/builtin.golden.json).
func TestDefaultConfigGolden(t *testing.T) {
	c := DefaultConfig()
	long := strings.Repeat("abcdé€😀\n", 3000)
	want := readGolden(t, "builtin.golden.json")
	renders := map[string]func() (string, error){
		"system":            func() (string, error) { return c.System(nil) },
		"instance":          func() (string, error) { return c.Instance("Fix the off-by-one in pager.go.", nil) },
		"observation_short": func() (string, error) { return c.Observation("ls", "hello\nworld\n", 1) },
		"observation_empty": func() (string, error) { return c.Observation("true", "", 0) },
		"observation_long":  func() (string, error) { return c.Observation("cat f", long[:len(long)/2], 0) },
		"format_error_none": func() (string, error) { return c.FormatError(nil) },
		"format_error_two":  func() (string, error) { return c.FormatError([]string{"ls", "pwd"}) },
		"format_error_reason": func() (string, error) {
			return c.FormatErrorFor(&FormatError{Actions: []string{"  "}, Reason: "the command is empty"})
		},
		"timeout_short": func() (string, error) { return c.Timeout("sleep 9", "partial\n") },
		"timeout_long":  func() (string, error) { return c.Timeout("yes", long) },
	}
	if len(renders) != len(want) {
		t.Fatalf("%d renders for %d golden entries", len(renders), len(want))
	}
	for name, render := range renders {
		got, err := render()
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got != want[name] {
			t.Errorf("%s differs from the golden file at byte %d", name, firstDiff(got, want[name]))
		}
	}
}

func firstDiff(a, b string) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}

// TestMiniSWEAgentConfigs renders each template of mini-swe-agent's own
// configurations (examples/mini-swe-agent) and of testdata/pyvalues.yaml
// (YAML values and the default observation template) and compares them
// with what Python's Jinja2 renders for the same variables
// (testdata/gen_golden.py).
func TestMiniSWEAgentConfigs(t *testing.T) {
	examples := filepath.Join("..", "..", "examples", "mini-swe-agent")
	for _, tc := range []struct{ name, config, cases, golden string }{
		{"default", filepath.Join(examples, "default.yaml"), "minisweagent_cases.json", "minisweagent_default.golden.json"},
		{"swebench", filepath.Join(examples, "swebench.yaml"), "minisweagent_cases.json", "minisweagent_swebench.golden.json"},
		{"pyvalues", filepath.Join("testdata", "pyvalues.yaml"), "pyvalues_cases.json", "pyvalues.golden.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := os.ReadFile(tc.config)
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join("testdata", tc.cases))
			if err != nil {
				t.Fatal(err)
			}
			var cases []goldenCase
			if err := json.Unmarshal(b, &cases); err != nil {
				t.Fatal(err)
			}
			want := readGolden(t, tc.golden)
			if len(want) != len(cases) {
				t.Fatalf("%d cases for %d golden entries", len(cases), len(want))
			}
			for _, gc := range cases {
				// The host's variables go in through Parse, the call's through the method.
				host := map[string]any{"system": "Linux", "release": "6.1.0", "version": "#1 SMP", "machine": "x86_64"}
				for k, v := range gc.Vars {
					switch k {
					case "task", "output", "actions", "action", "n_model_calls":
					default:
						host[k] = v
					}
				}
				c, err := Parse(data, host)
				if err != nil {
					t.Fatalf("Parse(%s) = %v", tc.config, err)
				}
				got, err := renderCase(c, gc.Template, gc.Vars)
				if err != nil {
					t.Errorf("%s: %v", gc.Name, err)
					continue
				}
				if w := want[gc.Name]; got != w {
					i := firstDiff(got, w)
					t.Errorf("%s differs from Jinja2 at byte %d: got %q, want %q", gc.Name, i,
						got[max(0, i-40):min(len(got), i+40)], w[max(0, i-40):min(len(w), i+40)])
				}
			}
		})
	}
}

type goldenCase struct {
	Name     string         `json:"name"`
	Template string         `json:"template"`
	Vars     map[string]any `json:"vars"`
}

func caseString(v any) string {
	if m, ok := v.(map[string]any); ok {
		if n, ok := m["__long__"].(float64); ok {
			return longOutput(int(n))
		}
	}
	s, _ := v.(string)
	return s
}

// renderCase renders a golden case as a worker does: the configuration
// bound to the case's task (gen_golden.py's TASK when it names none) and
// model calls.
func renderCase(c Config, template string, vars map[string]any) (string, error) {
	task, ok := vars["task"].(string)
	if !ok {
		task = "Fix the bug."
	}
	calls, _ := vars["n_model_calls"].(float64)
	c = c.For(task, int(calls))
	switch template {
	case fieldSystem:
		return c.System(nil)
	case fieldInstance:
		return c.Instance(task, nil)
	case fieldObservation:
		o := vars["output"].(map[string]any)
		return c.Observation(o["action"].(string), caseString(o["output"]), int(o["returncode"].(float64)))
	case fieldFormatError:
		var actions []string
		for _, a := range vars["actions"].([]any) {
			actions = append(actions, a.(string))
		}
		return c.FormatError(actions)
	case fieldTimeout:
		return c.Timeout(vars["action"].(map[string]any)["action"].(string), caseString(vars["output"]))
	}
	panic("unknown template " + template)
}

func TestParse(t *testing.T) {
	const base = "agent:\n  system_template: s\n  instance_template: '{{task}}'\n  action_observation_template: '{{output.returncode}}'\n  format_error_template: f\n"
	// with replaces the line of key in base.
	with := func(key, value string) string {
		lines := strings.Split(base, "\n")
		for i, l := range lines {
			if strings.HasPrefix(l, "  "+key+":") {
				lines[i] = "  " + key + ": " + value
			}
		}
		return strings.Join(lines, "\n")
	}
	tests := []struct {
		name    string
		yaml    string
		check   func(t *testing.T, c Config)
		wantErr string
	}{
		{name: "minimal v1 gets mini-swe-agent's defaults", yaml: base, check: func(t *testing.T, c Config) {
			if c.TimeoutTemplate != minisweTimeoutTemplate || c.CostLimit != 3 || c.StepLimit != 0 || c.ActionRegex != "" {
				t.Errorf("defaults not applied: %+v", c)
			}
		}},
		{name: "float step limit as in default.yaml", yaml: with("system_template", "'{{step_limit}} {{cost_limit}}'") + "  step_limit: 250.\n  cost_limit: 0.\n",
			check: func(t *testing.T, c Config) {
				if c.StepLimit != 250 || c.CostLimit != 0 {
					t.Errorf("StepLimit, CostLimit = %d, %g; want 250, 0", c.StepLimit, c.CostLimit)
				}
				// Python's float repr, as mini-swe-agent's templates see the YAML's value.
				if got, err := c.System(nil); err != nil || got != "250.0 0.0" {
					t.Errorf("System() = %q, %v; want \"250.0 0.0\"", got, err)
				}
			}},
		{name: "default limits as AgentConfig's", yaml: with("system_template", "'{{step_limit}} {{cost_limit}}'"),
			check: func(t *testing.T, c Config) {
				if got, err := c.System(nil); err != nil || got != "0 3.0" {
					t.Errorf("System() = %q, %v; want \"0 3.0\"", got, err)
				}
			}},
		{name: "environment_class is not a variable", yaml: with("system_template", "'{{environment_class}}'") + "environment:\n  environment_class: docker\n",
			wantErr: "system_template: "},
		{name: "YAML 1.1 values", yaml: with("system_template", "'{{a}} {{b}} {{c}} {{d}}'") + "environment:\n  a: off\n  b: 1e3\n  c: 0755\n  d: ~\n",
			check: func(t *testing.T, c Config) {
				if got, err := c.System(nil); err != nil || got != "False 1e3 493 None" {
					t.Errorf("System() = %q, %v; want \"False 1e3 493 None\"", got, err)
				}
			}},
		{name: "huge step limit", yaml: base + "  step_limit: 100000000000000000000\n", wantErr: "agent.step_limit: must be a whole number"},
		{name: "boolean step limit", yaml: base + "  step_limit: yes\n", wantErr: "agent.step_limit: must be a number, got bool"},
		{name: "invalid explicit int", yaml: base + "  step_limit: !!int x\n", wantErr: "yaml: "},
		{name: "empty binary number, which PyYAML refuses too", yaml: base + "  step_limit: 0b_\n", wantErr: "yaml: agent: "},
		{name: "config keys are template variables", yaml: with("system_template", "'at most {{step_limit}} steps in {{cwd}}'") + "  step_limit: 7\nenvironment:\n  cwd: /testbed\n",
			check: func(t *testing.T, c Config) {
				if got, err := c.System(nil); err != nil || got != "at most 7 steps in /testbed" {
					t.Errorf("System() = %q, %v", got, err)
				}
			}},
		{name: "custom action regex", yaml: base + "  action_regex: '<cmd>(.*?)</cmd>'\n", check: func(t *testing.T, c Config) {
			got, err := c.ParseAction("think\n<cmd>ls\n-la</cmd>")
			if err != nil || got != "ls\n-la" {
				t.Errorf("ParseAction() = %q, %v", got, err)
			}
		}},
		{name: "fractional step limit", yaml: base + "  step_limit: 2.5\n", wantErr: "agent.step_limit: must be a whole number"},
		{name: "negative cost limit", yaml: base + "  cost_limit: -1\n", wantErr: "cost_limit: -1 is negative"},
		{name: "template not a string", yaml: base + "  timeout_template: [a]\n", wantErr: "agent.timeout_template: must be a string, got list"},
		{name: "undefined variable", yaml: with("system_template", "'{{ nope }}'"), wantErr: "system_template: "},
		{name: "undefined attribute", yaml: strings.Replace(base, "output.returncode", "output.return_code", 1), wantErr: "action_observation_template: "},
		{name: "Jinja syntax error", yaml: with("format_error_template", "'{% if %}'"), wantErr: "format_error_template: "},
		{name: "two groups in action regex", yaml: base + "  action_regex: '(a)(b)'\n", wantErr: "action_regex: has 2 groups"},
		{name: "Python-only regex", yaml: base + "  action_regex: '(?<=x)y'\n", wantErr: "action_regex: "},
		{name: "merged section contains itself", yaml: "<<: &x {environment: *x}\nagent: {}\n", wantErr: "contains itself"},
		{name: "merge of a list", yaml: "agent: {}\nx: &x [1]\n<<: *x\n", wantErr: "yaml: "},
		{name: "no agent section", yaml: "model:\n  model_name: x\n", wantErr: "agent: missing"},
		{name: "v2 layout", yaml: "agent:\n  system_template: s\n  instance_template: i\nmodel:\n  observation_template: o\n", wantErr: "v2 configuration"},
		{name: "not YAML", yaml: "agent: [", wantErr: "yaml: "},
		{name: "include cannot read files", yaml: with("system_template", "'{% include \"/etc/hostname\" %}'"), wantErr: "system_template: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.yaml), nil)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse() error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse() = %v", err)
			}
			tt.check(t, c)
		})
	}
}

func TestLoad(t *testing.T) {
	c, err := Load(filepath.Join("..", "..", "examples", "mini-swe-agent", "default.yaml"))
	if err != nil {
		t.Fatalf("Load() = %v", err)
	}
	got, err := c.Instance("Fix it.", nil)
	if err != nil {
		t.Fatal(err)
	}
	host := HostVars()
	line := strings.Join([]string{host["system"].(string), host["release"].(string), host["version"].(string), host["machine"].(string)}, " ")
	if !strings.Contains(got, "<system_information>\n"+line+"\n</system_information>") {
		t.Errorf("Instance() lacks the host's uname %q", line)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Error("Load(missing file) = nil error")
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("agent:\n  system_template: '{{ x'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad); err == nil || !strings.HasPrefix(err.Error(), bad+": ") {
		t.Errorf("Load(bad) error = %v, want one starting with the path", err)
	}
}

func TestCallVariablesWin(t *testing.T) {
	c := DefaultConfig()
	c.Vars = map[string]any{"task": "from vars", "output": "from vars"}
	c.InstanceTemplate = "{{task}}"
	c.ActionObservationTemplate = "{{output.output}}"
	if got, _ := c.Instance("from call", nil); got != "from call" {
		t.Errorf("Instance() = %q, want the call's task", got)
	}
	if got, _ := c.Observation("ls", "out", 0); got != "out" {
		t.Errorf("Observation() = %q, want the call's output", got)
	}
	c.SystemTemplate = "{{repo}}"
	if got, err := c.System(map[string]any{"repo": "/testbed"}); err != nil || got != "/testbed" {
		t.Errorf("System(vars) = %q, %v", got, err)
	}
}

func TestValidateNamesFields(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(*Config)
		wants []string // each must start a line of the joined error
	}{
		{"broken instance template", func(c *Config) { c.InstanceTemplate = "Solve {{task" }, []string{"instance_template: "}},
		{"unknown filter", func(c *Config) { c.SystemTemplate = "{{ 'x' | nosuchfilter }}" }, []string{"system_template: "}},
		{"several problems are all reported", func(c *Config) {
			c.SystemTemplate = ""
			c.TimeoutTemplate = "{% if action %}"
			c.FormatErrorTemplate = "{% endif %}"
		}, []string{"system_template: empty", "timeout_template: ", "format_error_template: "}},
		{"error in the long-output branch", func(c *Config) {
			c.TimeoutTemplate = "{% if output | length < 10 %}{{output}}{% else %}{{outptu}}{% endif %}"
		}, []string{"timeout_template: "}},
		{"whitespace-only template", func(c *Config) { c.ActionObservationTemplate = " \n" }, []string{"action_observation_template: empty"}},
		{"negative step limit", func(c *Config) { c.StepLimit = -1 }, []string{"step_limit: -1 is negative"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.edit(&c)
			err := c.Validate()
			if err == nil {
				t.Fatal("Validate() = nil, want an error")
			}
			lines := strings.Split(err.Error(), "\n")
			for _, want := range tt.wants {
				found := false
				for _, line := range lines {
					found = found || strings.HasPrefix(line, want)
				}
				if !found {
					t.Errorf("Validate() = %q, want a line starting with %q", err, want)
				}
			}
		})
	}
}

func TestZeroConfigDoesNotValidate(t *testing.T) {
	err := Config{}.Validate()
	if err == nil {
		t.Fatal("Config{}.Validate() = nil, want an error")
	}
	for _, field := range []string{fieldSystem, fieldInstance, fieldObservation, fieldFormatError, fieldTimeout} {
		if !strings.Contains(err.Error(), field+": empty") {
			t.Errorf("Validate() = %q, want it to name %s", err, field)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, name := range []string{"default", "swebench"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "examples", "mini-swe-agent", name+".yaml"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(defaultYAML)
	if b, err := os.ReadFile(filepath.Join("testdata", "pyvalues.yaml")); err == nil {
		f.Add(b)
	}
	f.Add([]byte("agent:\n  step_limit: .nan\n"))
	f.Add([]byte("base: &b {cwd: /x, env: {A: off}}\nagent: {system_template: '{{cwd}} {{env}}'}\nenvironment:\n  <<: [*b, {timeout: 1:30}]\n"))
	f.Add([]byte("agent:\n  system_template: '{{ x[::-1] }}'\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, nil)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that does not validate: %v", err)
		}
	})
}

// FuzzRender feeds arbitrary template text to the engine: an error is fine,
// a panic is not.
func FuzzRender(f *testing.F) {
	for _, s := range []string{"{{ output.output[:5000] }}", "{% if output.output | length < 10000 -%}a{%- endif %}",
		"{{ action['action'] }}", "{% for a in actions %}{{ loop.index }}{% endfor %}", "{{ 1/0 }}", "{{ output[1:2:0] }}",
		"{% set x = output %}{{ x.output | upper }}", "{{ range(3) | list }}", "{% macro m() %}{{ m() }}{% endmacro %}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		if strings.Contains(text, "range") || strings.Contains(text, "*") {
			return // huge ranges and repeated strings may use unbounded memory; a config is trusted input
		}
		vars := outputVars("ls", "héllo\nworld", 1)
		vars["actions"] = []any{"a", "b"}
		_, _ = render("t", text, vars)
	})
}

// What a command prints is data, never template: Jinja in the output reaches
// the model as the text it is, under the default and mini-swe-agent's
// SWE-bench configuration alike.
func TestOutputCannotInjectIntoTemplates(t *testing.T) {
	out := "{{ 7*7 }} {% for i in range(3) %}x{% endfor %} {{ config }} {# c #}"
	c := DefaultConfig()
	for name, render := range map[string]func() (string, error){
		"observation": func() (string, error) { return c.Observation("cat f", out, 0) },
		"timeout":     func() (string, error) { return c.Timeout("cat f", out) },
	} {
		got, err := render()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !strings.Contains(got, out) || strings.Contains(got, "49") || strings.Contains(got, "xxx") {
			t.Errorf("%s = %q, want the output verbatim", name, got)
		}
	}
}

// mini-swe-agent sets the task before it renders the system message, so a
// system template that uses it passes Validate and renders at the opening.
func TestSystemTemplateSeesTask(t *testing.T) {
	c, err := Parse([]byte("agent:\n  system_template: 'You work on: {{task}}'\n"), nil)
	if err != nil {
		t.Fatalf("Parse() = %v", err)
	}
	msgs, _, err := Opening(c, tokenize.NewByteChatML(), "Fix pager.go.")
	if err != nil {
		t.Fatalf("Opening() = %v", err)
	}
	if msgs[0].Content != "You work on: Fix pager.go." {
		t.Errorf("system message = %q", msgs[0].Content)
	}
	if _, err := c.System(nil); err == nil {
		t.Error("System() on a configuration not bound to a task = nil error, want task undefined")
	}
}

// Every template sees the task and the model's variables, as in
// mini-swe-agent's render_template; n_model_calls is what For bound.
func TestTrajectoryVariables(t *testing.T) {
	const tpl = "{{task}}: {{n_model_calls}} calls, cost {{model_cost}}"
	c := DefaultConfig()
	c.SystemTemplate, c.InstanceTemplate, c.ActionObservationTemplate = tpl, tpl, tpl
	c.FormatErrorTemplate, c.TimeoutTemplate = tpl, tpl
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate() = %v", err)
	}
	b := c.For("Fix it", 3)
	tests := []struct {
		name   string
		render func() (string, error)
		want   string
	}{
		{"system", func() (string, error) { return b.System(nil) }, "Fix it: 3 calls, cost 0.0"},
		{"instance", func() (string, error) { return b.Instance("Other", nil) }, "Other: 3 calls, cost 0.0"},
		{"observation", func() (string, error) { return b.Observation("ls", "", 0) }, "Fix it: 3 calls, cost 0.0"},
		{"format error", func() (string, error) { return b.FormatErrorFor(&FormatError{}) }, "Fix it: 3 calls, cost 0.0"},
		{"timeout", func() (string, error) { return b.Timeout("sleep 9", "") }, "Fix it: 3 calls, cost 0.0"},
		{"opening", func() (string, error) {
			msgs, _, err := Opening(c, tokenize.NewByteChatML(), "Fix it")
			return msgs[0].Content + " / " + msgs[1].Content, err
		}, "Fix it: 0 calls, cost 0.0 / Fix it: 0 calls, cost 0.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.render()
			if err != nil || got != tt.want {
				t.Errorf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	if _, ok := c.Vars[varTask]; ok {
		t.Error("For changed the Config it was called on")
	}
}

func TestNotices(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{"cost_limit left out is AgentConfig's 3.0", "agent: {}\n", []string{"cost_limit: 3 is not applied: "}},
		{"cost_limit set", "agent:\n  cost_limit: 0.5\n", []string{"cost_limit: 0.5 is not applied: "}},
		{"cost_limit 0", "agent:\n  cost_limit: 0.\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.yaml), nil)
			if err != nil {
				t.Fatal(err)
			}
			got := c.Notices()
			if len(got) != len(tt.want) {
				t.Fatalf("Notices() = %q, want %d", got, len(tt.want))
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tt.want[i]) {
					t.Errorf("Notices()[%d] = %q, want it to start with %q", i, got[i], tt.want[i])
				}
			}
		})
	}
}
