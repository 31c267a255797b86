package agent

import (
	_ "embed" // the default templates hold ``` fences, which Go raw strings cannot
	"strings"
)

// The default templates are mini-swe-agent's default.yaml (v1, ```bash
// fences) converted from Jinja to Go template syntax. Differences: the
// instance template drops the {{system}} {{release}} … block and the macOS
// sed note, which need environment variables a sandbox may not supply and
// would fail under missingkey=error; the submission is spelled out with its
// final output (git diff) in the system, instance and format-error templates;
// the format-error template reports an empty command.
var (
	//go:embed templates/system.tmpl
	defaultSystemTemplate string
	//go:embed templates/instance.tmpl
	defaultInstanceTemplate string
	//go:embed templates/action_observation.tmpl
	defaultActionObservationTemplate string
	//go:embed templates/format_error.tmpl
	defaultFormatErrorTemplate string
	//go:embed templates/timeout.tmpl
	defaultTimeoutTemplate string
)

// DefaultConfig returns the default templates. Rendering them needs no Vars.
func DefaultConfig() Config {
	return Config{
		SystemTemplate:            jinjaText(defaultSystemTemplate),
		InstanceTemplate:          jinjaText(defaultInstanceTemplate),
		ActionObservationTemplate: jinjaText(defaultActionObservationTemplate),
		FormatErrorTemplate:       jinjaText(defaultFormatErrorTemplate),
		TimeoutTemplate:           jinjaText(defaultTimeoutTemplate),
	}
}

// jinjaText drops the file's final newline, as Jinja drops a template's
// (keep_trailing_newline=False), so the messages match mini-swe-agent's byte
// for byte where the wording is the same.
func jinjaText(s string) string {
	return strings.TrimSuffix(s, "\n")
}
