package main

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/actloop/actloop/internal/telemetry"
)

// commands are every command a user can name, with the root's own.
func commands(root *cobra.Command) []*cobra.Command {
	var out []*cobra.Command
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		out = append(out, c)
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	return out
}

// Every command has its own help, and -h, --help and -help print it and
// succeed without running the command.
func TestHelpOnEveryCommand(t *testing.T) {
	root := newRootCmd(io.Discard, io.Discard)
	for _, c := range commands(root) {
		if c.Short == "" || c.Long == "" && c.HasParent() && c.Name() != "help" {
			t.Errorf("%s: Short %q, Long %q: want both", c.CommandPath(), c.Short, c.Long)
		}
		path := strings.Fields(c.CommandPath())[1:]
		for _, h := range []string{"-h", "--help", "-help"} {
			var out, errOut bytes.Buffer
			if err := run(context.Background(), append(slices.Clone(path), h), &out, &errOut); err != nil {
				t.Errorf("%v %s: %v\n%s", path, h, err, errOut.String())
				continue
			}
			if !strings.Contains(out.String(), "Usage:") || !strings.Contains(out.String(), c.Short) && c.Long == "" {
				t.Errorf("%v %s printed no help:\n%s", path, h, out.String())
			}
		}
	}
}

// --version (and -version) prints the build's version and succeeds.
func TestVersion(t *testing.T) {
	for _, flag := range []string{"--version", "-version"} {
		var out bytes.Buffer
		if err := run(context.Background(), []string{flag}, &out, io.Discard); err != nil {
			t.Fatalf("%s: %v", flag, err)
		}
		if want := "actloop version " + telemetry.Version() + "\n"; out.String() != want {
			t.Errorf("%s printed %q, want %q", flag, out.String(), want)
		}
	}
}

// The flag package's single-dash long flags (-json, -tasks=3) still work,
// as do a single-letter flag's both forms; values that look like flags
// are left alone.
func TestNormalizeArgs(t *testing.T) {
	root := newRootCmd(io.Discard, io.Discard)
	tests := []struct {
		in, want []string
	}{
		{[]string{"bench", "-scenarios", "all", "-json", "-charts=bench"}, []string{"bench", "--scenarios", "all", "--json", "--charts=bench"}},
		{[]string{"status", "--json"}, []string{"status", "--json"}},
		{[]string{"results", "-n", "2", "-n=3", "-follow"}, []string{"results", "-n", "2", "-n=3", "--follow"}},
		{[]string{"resume", "-weight-version", "-1"}, []string{"resume", "--weight-version", "-1"}},
		{[]string{"probe", "-timeout", "1s", "-nope", "--", "-timeout"}, []string{"probe", "--timeout", "1s", "-nope", "--", "-timeout"}},
		{[]string{"dev", "-help"}, []string{"dev", "--help"}},
		{[]string{"-json"}, []string{"-json"}},
		{[]string{"frobnicate", "-json"}, []string{"frobnicate", "-json"}},
	}
	for _, tt := range tests {
		if got := normalizeArgs(root, tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("normalizeArgs(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// Usage errors exit 2 and name what is wrong: the command, the flag, the
// argument.
func TestUsageErrorsNameTheCulprit(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{nil, "no command"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"stauts"}, "did you mean status"},
		{[]string{"dev", "--bogus"}, "dev: unknown flag: --bogus"},
		{[]string{"dev", "--tasks", "many"}, `"--tasks"`},
		{[]string{"dev", "--tasks", "0"}, "--tasks"},
		{[]string{"dev", "--redis", "mongo"}, "--redis"},
		{[]string{"top", "--interval", "0s"}, "--interval"},
		{[]string{"results", "-n", "-1"}, "-n"},
		{[]string{"status", "extra"}, `status: unexpected argument "extra"`},
		{[]string{"submit"}, "submit: one file"},
		{[]string{"submit", "--format", "xml", "f.jsonl"}, "--format"},
		{[]string{"schema", "x"}, "schema: sample or result"},
		{[]string{"serve"}, "serve: name one service"},
		{[]string{"resume", "--weight-version", "two"}, `"--weight-version"`},
		{[]string{"pause", "--timeout", "soon"}, `"--timeout"`},
	}
	for _, tt := range tests {
		var errOut bytes.Buffer
		err := run(context.Background(), tt.args, io.Discard, &errOut)
		if exitCode(err) != 2 || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: exit %d (%v), want 2 and %q", tt.args, exitCode(err), err, tt.want)
		}
	}
}

// `actloop completion SHELL` prints a completion script, and dynamic
// completion offers the services and the schemas.
func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		var out bytes.Buffer
		if err := run(context.Background(), []string{"completion", shell}, &out, io.Discard); err != nil || !strings.Contains(out.String(), "actloop") {
			t.Errorf("completion %s: %v, %d bytes", shell, err, out.Len())
		}
	}
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{[]string{"__complete", "serve", ""}, []string{"coordinator", "gen-worker", "env-worker", "predictor-gw"}},
		{[]string{"__complete", "schema", ""}, []string{"sample", "result"}},
		{[]string{"__complete", "bench-"}, []string{"bench-sync", "bench-pipeline"}},
		{[]string{"__complete", "bench", "--sc"}, []string{"--scenarios"}},
	} {
		var out bytes.Buffer
		if err := run(context.Background(), tt.args, &out, io.Discard); err != nil {
			t.Fatalf("%q: %v", tt.args, err)
		}
		for _, w := range tt.want {
			if !slices.ContainsFunc(strings.Split(out.String(), "\n"), func(l string) bool { return strings.HasPrefix(l, w) }) {
				t.Errorf("%q offers %q, want %s among them", tt.args, out.String(), w)
			}
		}
	}
}
