package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/actloop/actloop/pkg/client"
	"github.com/actloop/actloop/pkg/schema"
)

func newPauseCmd() *cobra.Command {
	var mode string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "pause [--mode abort|drain] [--timeout D]",
		Short: "Pause generation for a weight update",
		Long: `Pause generation for a weight update and print the coordinator's answer as
JSON (epoch, workers, aborted, kept_tokens, waited_ms) once every live
gen-worker has paused.

In abort mode the gen-workers abort their in-flight generations and keep the
partial output, to resume it later; in drain mode they let them finish. Past
its timeout the pause fails, naming the workers that did not answer.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runControl(cmd.Context(), cmd.OutOrStdout(), func(ctx context.Context, c *client.Client) (any, error) {
				wait := timeout
				if wait == 0 {
					wait = 10 * time.Minute // the coordinator's own timeout answers first
				}
				ctx, cancel := context.WithTimeout(ctx, wait+10*time.Second)
				defer cancel()
				return c.Pause(ctx, schema.PauseRequest{Mode: mode, TimeoutMS: timeout.Milliseconds()})
			})
		},
	}
	cmd.Flags().StringVar(&mode, "mode", schema.PauseAbort, "abort (keep partial output, resume it later) or drain (let generations finish)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "how long to wait for every gen-worker (0: the coordinator's ACTLOOP_PAUSE_TIMEOUT)")
	return cmd
}

func newResumeCmd() *cobra.Command {
	var version int64
	cmd := &cobra.Command{
		Use:   "resume [--weight-version N]",
		Short: "Resume generation, with the weight version the servers now hold",
		Long: `Resume generation and print the control state as JSON. With --weight-version
the version becomes the current one (every token generated from now on
records it); a version may not go back, and resuming to the current one is
harmless.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runControl(cmd.Context(), cmd.OutOrStdout(), func(ctx context.Context, c *client.Client) (any, error) {
				var v *int64
				if version >= 0 {
					v = &version
				}
				return c.Resume(ctx, v)
			})
		},
	}
	cmd.Flags().Int64Var(&version, "weight-version", -1, "the weight version the servers now hold (-1: unchanged)")
	return cmd
}

func newAbortCmd() *cobra.Command {
	var req schema.AbortRequest
	cmd := &cobra.Command{
		Use:   "abort [--traj ID]... [--group ID]... [--reason TEXT]",
		Short: "End trajectories, or whole groups, before they finish",
		Long: `End the named trajectories, and every waiting or running member of the named
groups, each with a result of status aborted (reward 0, no trainable tokens),
and print the coordinator's answer as JSON: the ids it aborted, and those it
found neither waiting nor running (finished, or unknown).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runControl(cmd.Context(), cmd.OutOrStdout(), func(ctx context.Context, c *client.Client) (any, error) {
				return c.Abort(ctx, req)
			})
		},
	}
	cmd.Flags().StringSliceVar(&req.TrajIDs, "traj", nil, "a trajectory (sample) id to abort; repeat or separate by commas")
	cmd.Flags().StringSliceVar(&req.GroupIDs, "group", nil, "a group id whose waiting and running members to abort; repeat or separate by commas")
	cmd.Flags().StringVar(&req.Reason, "reason", "", "added to the results' reason")
	return cmd
}

func newControlCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "control",
		Short: "Print the control state and each gen-worker's pause report",
		Long: `Print the control state (paused, epoch, weight version, mode, staleness
settings) and each gen-worker's newest pause report as JSON.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runControl(cmd.Context(), cmd.OutOrStdout(), func(ctx context.Context, c *client.Client) (any, error) {
				return c.Control(ctx)
			})
		},
	}
}

// runControl connects, makes one call to the coordinator over NATS and
// prints its answer as JSON.
func runControl(ctx context.Context, stdout io.Writer, call func(context.Context, *client.Client) (any, error)) error {
	nc, c, err := connect(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	out, err := call(ctx, c)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, string(b))
	return err
}
