// Command actloop is actloop for people: `dev` runs everything in one
// process with a demo batch; `submit`, `results`, `status`, `pause` and
// `resume` drive a running deployment as a trainer would (over pkg/client);
// `serve`, `sim` and `probe` run it in containers; `bench`, `bench-sync` and
// `bench-pipeline` measure it (internal/bench).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/actloop/actloop/internal/telemetry"
	"github.com/actloop/actloop/pkg/sandbox"
)

func main() {
	if code, ok := sandbox.Forwarder(os.Args); ok { // a sandbox's port forwarder
		os.Exit(code)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "actloop:", err)
		os.Exit(exitCode(err))
	}
}

// exitError carries an exit code other than 1: 2 for a usage error (an
// unknown command or flag, a bad flag value or argument).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

func (e *exitError) Unwrap() error { return e.err }

// usageError is err as a usage error (exit code 2).
func usageError(err error) error { return &exitError{2, err} }

func exitCode(err error) int {
	var e *exitError
	if errors.As(err, &e) {
		return e.code
	}
	return 1
}

// run runs the command line args (without the program name) with its
// output on stdout and stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	root := newRootCmd(stdout, stderr)
	root.SetArgs(normalizeArgs(root, args))
	return root.ExecuteContext(ctx)
}

const rootLong = `actloop runs the rollout side of RL training for LLM agents.

'actloop dev' runs NATS, Redis, the inference simulator and all four services
in one process and drives a demo batch through them. The trainer-side
commands (submit, results, status, top, inspect, pause, resume, control)
drive a running deployment. Settings come from ACTLOOP_* environment
variables (see docs/configuration.md).`

// newRootCmd builds the command tree writing to stdout and stderr.
func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:     "actloop",
		Short:   "actloop: the rollout side of RL training for LLM agents",
		Long:    rootLong,
		Version: telemetry.Version(),
		// No command at all is a usage error, and so is an unknown one.
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				msg := fmt.Sprintf("unknown command %q", args[0])
				if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
					msg += fmt.Sprintf(" (did you mean %s?)", strings.Join(s, " or "))
				}
				return usageError(errors.New(msg))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprint(cmd.ErrOrStderr(), cmd.UsageString())
			return usageError(errors.New("no command"))
		},
		SilenceErrors:              true, // main prints them, once
		SilenceUsage:               true, // only usage errors show the usage
		SuggestionsMinimumDistance: 2,
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		fmt.Fprintf(cmd.ErrOrStderr(), "Run '%s --help' for usage.\n", cmd.CommandPath())
		return usageError(fmt.Errorf("%s: %w", cmd.Name(), err))
	})
	root.AddGroup(
		&cobra.Group{ID: "run", Title: "Run actloop:"},
		&cobra.Group{ID: "trainer", Title: "Drive a deployment (as a trainer):"},
		&cobra.Group{ID: "bench", Title: "Measure it:"},
	)
	for _, c := range []*cobra.Command{newDevCmd(), newServeCmd(), newSimCmd(), newProbeCmd(), newConfigCmd(), newTokenizeCmd()} {
		c.GroupID = "run"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{newSubmitCmd(), newResultsCmd(), newStatusCmd(), newTopCmd(),
		newInspectCmd(), newPauseCmd(), newResumeCmd(), newAbortCmd(), newControlCmd(), newSchemaCmd()} {
		c.GroupID = "trainer"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{newBenchCmd(), newBenchSyncCmd(), newBenchPipelineCmd(), newBenchCrossCheckCmd(), newBenchCalibrationCmd()} {
		c.GroupID = "bench"
		root.AddCommand(c)
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	// Added now rather than when executing, so that normalizeArgs finds
	// them (and after SetOut: the completion command keeps its writer).
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	root.InitDefaultVersionFlag()
	return root
}

// normalizeArgs rewrites the single-dash long flags of Go's flag package
// (-json, -tasks=3), which scripts written for earlier versions use, as
// the double-dash ones pflag reads (--json, --tasks=3). Only names of the
// command's own long flags are rewritten, and nothing after "--".
func normalizeArgs(root *cobra.Command, args []string) []string {
	cmd, _, err := root.Find(args)
	if err != nil {
		return args
	}
	out := make([]string, len(args))
	copy(out, args)
	for i, a := range out {
		if a == "--" {
			break
		}
		if len(a) < 3 || a[0] != '-' || a[1] == '-' {
			continue
		}
		name, _, _ := strings.Cut(a[1:], "=")
		if name == "help" || cmd.Flags().Lookup(name) != nil && len(name) > 1 {
			out[i] = "-" + a
		}
	}
	return out
}

// noArgs refuses positional arguments as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError(fmt.Errorf("%s: unexpected argument %q", cmd.Name(), args[0]))
	}
	return nil
}
