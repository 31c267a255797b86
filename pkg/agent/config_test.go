package agent

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestDefaultConfigValidates(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
}

func TestDefaultConfigRenders(t *testing.T) {
	c := DefaultConfig()

	system, err := c.System(nil)
	if err != nil {
		t.Fatalf("System() error = %v", err)
	}
	for _, want := range []string{"exactly ONE bash code block", "```bash\n", "echo " + SubmitMarker + " && git add -A && git diff --cached"} {
		if !strings.Contains(system, want) {
			t.Errorf("System() lacks %q", want)
		}
	}

	instance, err := c.Instance("Fix the off-by-one in pager.go.", nil)
	if err != nil {
		t.Fatalf("Instance() error = %v", err)
	}
	if !strings.HasPrefix(instance, "Please solve this issue: Fix the off-by-one in pager.go.\n") {
		t.Errorf("Instance() = %q..., want the task first", instance[:min(80, len(instance))])
	}

	// Jinja drops a template's final newline; the defaults do too.
	for name, s := range map[string]string{"system": system, "instance": instance} {
		if strings.HasSuffix(s, "\n") {
			t.Errorf("%s message ends in a newline", name)
		}
	}
}

// The expected strings are what mini-swe-agent's Jinja templates render for
// the same input (checked with jinja2 3.1).
func TestDefaultTemplatesMatchMiniSWEAgent(t *testing.T) {
	c := DefaultConfig()
	tests := []struct {
		name   string
		render func() (string, error)
		want   string
	}{
		{
			name:   "observation",
			render: func() (string, error) { return c.Observation("hello\nworld\n", 1) },
			want:   "<returncode>1</returncode>\n<output>\nhello\nworld\n</output>",
		},
		{
			name:   "observation without final newline",
			render: func() (string, error) { return c.Observation("x", 0) },
			want:   "<returncode>0</returncode>\n<output>\nx</output>",
		},
		{
			name:   "timeout",
			render: func() (string, error) { return c.Timeout("sleep 9", "hello\nworld\n") },
			want: "The last command <command>sleep 9</command> timed out and has been killed.\n" +
				"The output of the command was:\n<output>\nhello\nworld\n\n</output>\n" +
				"Please try another command and make sure to avoid those requiring interactive input.",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.render()
			if err != nil {
				t.Fatalf("error = %v", err)
			}
			if got != tt.want {
				t.Fatalf("got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestDefaultObservationTruncates(t *testing.T) {
	c := DefaultConfig()
	// 10001 characters but 15002 bytes: the cut is by character, as in Python.
	output := strings.Repeat("é", 5001) + strings.Repeat("z", 5000)
	got, err := c.Observation(output, 0)
	if err != nil {
		t.Fatalf("Observation() error = %v", err)
	}
	if !utf8.ValidString(got) {
		t.Fatal("Observation() cut a UTF-8 sequence")
	}
	for _, want := range []string{
		"<warning>",
		"<output_head>\n" + strings.Repeat("é", 5000) + "\n</output_head>",
		"<elided_chars>\n1 characters elided\n</elided_chars>",
		"<output_tail>\n" + strings.Repeat("z", 5000) + "\n</output_tail>",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Observation() lacks %q", want[:min(60, len(want))])
		}
	}

	// One character under the threshold is shown whole.
	got, err = c.Observation(strings.Repeat("é", 9999), 0)
	if err != nil {
		t.Fatalf("Observation() error = %v", err)
	}
	if strings.Contains(got, "<warning>") {
		t.Error("Observation() of 9999 characters truncated, want it whole")
	}
}

func TestDefaultTimeoutTruncates(t *testing.T) {
	got, err := DefaultConfig().Timeout("yes", strings.Repeat("y", 12000))
	if err != nil {
		t.Fatalf("Timeout() error = %v", err)
	}
	if !strings.Contains(got, "<elided_chars>2000 characters elided</elided_chars>") {
		t.Errorf("Timeout() lacks the elided count: %q", got[:min(300, len(got))])
	}
}

func TestDefaultFormatError(t *testing.T) {
	c := DefaultConfig()
	tests := []struct {
		name   string
		render func() (string, error)
		prefix string
	}{
		{
			name:   "no actions",
			render: func() (string, error) { return c.FormatError(nil) },
			prefix: "Please always provide EXACTLY ONE action in triple backticks, found 0 actions.\nIf you want",
		},
		{
			name:   "two actions",
			render: func() (string, error) { return c.FormatError([]string{"ls", "pwd"}) },
			prefix: "Please always provide EXACTLY ONE action in triple backticks, found 2 actions.\nIf you want",
		},
		{
			name: "from ParseAction, with a reason",
			render: func() (string, error) {
				_, err := ParseAction("```bash\n \n```")
				fe, ok := err.(*FormatError)
				if !ok {
					t.Fatalf("ParseAction() error = %v, want *FormatError", err)
				}
				return c.FormatErrorFor(fe)
			},
			prefix: "Your bash block was rejected: the command is empty.\nIf you want",
		},
		{
			name:   "nil FormatError",
			render: func() (string, error) { return c.FormatErrorFor(nil) },
			prefix: "Please always provide EXACTLY ONE action in triple backticks, found 0 actions.",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.render()
			if err != nil {
				t.Fatalf("error = %v", err)
			}
			if !strings.HasPrefix(got, tt.prefix) {
				t.Fatalf("got %q, want prefix %q", got[:min(len(got), len(tt.prefix)+20)], tt.prefix)
			}
		})
	}
}

func TestMissingVariableErrors(t *testing.T) {
	c := DefaultConfig()
	c.SystemTemplate = "You work in {{.Vars.repo}}."
	c.InstanceTemplate = "{{.Task}} on {{.Vars.os}}"

	tests := []struct {
		name    string
		render  func() (string, error)
		want    string
		wantErr string // substring; "" for no error
	}{
		{"system var present", func() (string, error) { return c.System(map[string]string{"repo": "/testbed"}) }, "You work in /testbed.", ""},
		{"system var missing", func() (string, error) { return c.System(map[string]string{"other": "x"}) }, "", "system_template: "},
		{"system nil vars", func() (string, error) { return c.System(nil) }, "", `no entry for key "repo"`},
		{"instance var missing", func() (string, error) { return c.Instance("t", nil) }, "", "instance_template: "},
		{"instance var present", func() (string, error) { return c.Instance("t", map[string]string{"os": "linux"}) }, "t on linux", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.render()
			if tt.wantErr == "" {
				if err != nil || got != tt.want {
					t.Fatalf("got %q, %v; want %q, nil", got, err, tt.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
			}
			if got != "" {
				t.Fatalf("got %q with an error, want empty", got)
			}
		})
	}
}

func TestMisspeltFieldErrors(t *testing.T) {
	c := DefaultConfig()
	c.InstanceTemplate = "{{.Taks}}"
	if _, err := c.Instance("t", nil); err == nil || !strings.HasPrefix(err.Error(), "instance_template: ") {
		t.Fatalf("Instance() error = %v, want one naming instance_template", err)
	}
}

func TestValidateNamesFields(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(*Config)
		wants []string // each must appear, one line of the joined error each
	}{
		{
			name:  "broken instance template",
			edit:  func(c *Config) { c.InstanceTemplate = "Solve {{.Task" },
			wants: []string{"instance_template: "},
		},
		{
			name:  "unknown function",
			edit:  func(c *Config) { c.SystemTemplate = "{{upper .Vars.x}}" },
			wants: []string{"system_template: "},
		},
		{
			name: "several problems are all reported",
			edit: func(c *Config) {
				c.SystemTemplate = ""
				c.TimeoutTemplate = "{{if .Action}}"
				c.FormatErrorTemplate = "{{end}}"
			},
			wants: []string{"system_template: empty", "timeout_template: ", "format_error_template: "},
		},
		{
			// Parses, but fails on every real observation: caught by the dry run.
			name:  "misspelt field in observation",
			edit:  func(c *Config) { c.ActionObservationTemplate = "{{.Output.Returncode}}" },
			wants: []string{"action_observation_template: "},
		},
		{
			// Only the truncation branch is wrong; the long sample reaches it.
			name: "error in the long-output branch",
			edit: func(c *Config) {
				c.TimeoutTemplate = "{{if lt (runes .Output) 10}}{{.Output}}{{else}}{{.Outptu}}{{end}}"
			},
			wants: []string{"timeout_template: "},
		},
		{
			name:  "whitespace-only template",
			edit:  func(c *Config) { c.ActionObservationTemplate = " \n" },
			wants: []string{"action_observation_template: empty"},
		},
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
					if strings.HasPrefix(line, want) {
						found = true
						break
					}
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

func TestHeadTail(t *testing.T) {
	tests := []struct {
		n              int
		s              string
		wantHead, want string
	}{
		{0, "abc", "", ""},
		{-1, "abc", "", ""},
		{2, "abc", "ab", "bc"},
		{3, "abc", "abc", "abc"},
		{5, "abc", "abc", "abc"},
		{1, "éü", "é", "ü"},
		{2, "日本語", "日本", "本語"},
		{1, "", "", ""},
	}
	for _, tt := range tests {
		if got := head(tt.n, tt.s); got != tt.wantHead {
			t.Errorf("head(%d, %q) = %q, want %q", tt.n, tt.s, got, tt.wantHead)
		}
		if got := tail(tt.n, tt.s); got != tt.want {
			t.Errorf("tail(%d, %q) = %q, want %q", tt.n, tt.s, got, tt.want)
		}
	}
}
