package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/actloop/actloop/internal/coordinator"
	"github.com/actloop/actloop/pkg/client"
)

func newStatusCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status [--json]",
		Short: "Print the coordinator's status: control state, trajectories, replicas",
		Long: `Print the coordinator's status (GET /v1/status at ACTLOOP_COORDINATOR_URL, with
ACTLOOP_API_TOKEN as the bearer token) as a compact table: the control state
and weight version; active, waiting and finished trajectories and the
admission limit; throughput (trajectories, generated tokens and env steps
per second over the last 60 s) and the training results' solve rate, mean
reward and staleness, over that window and since the coordinator's term
began; each replica's liveness, load and busy slots; each work subject's
backlog and the age of its oldest message. A source the coordinator could
not read (NATS, Redis) is named first, and the rest shown. --json prints the
whole status.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runStatus(cmd.Context(), asJSON, cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the status as JSON")
	return cmd
}

// runStatus prints the coordinator's /v1/status as a compact table, or as
// JSON.
func runStatus(ctx context.Context, asJSON bool, stdout io.Writer) error {
	c, err := loadTrainerConfig()
	if err != nil {
		return err
	}
	body, st, err := fetchStatus(ctx, c)
	if err != nil {
		return err
	}
	if asJSON {
		_, err = fmt.Fprintln(stdout, strings.TrimSpace(string(body)))
		return err
	}
	return writeStatus(stdout, st)
}

func newTopCmd() *cobra.Command {
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "top [--interval D]",
		Short: "Print the status again every few seconds until interrupted",
		Long:  "Print the status table (as 'actloop status' does) again every --interval until interrupted.",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if interval <= 0 {
				return usageError(errors.New("top: --interval: must be > 0"))
			}
			return runTop(cmd.Context(), interval, cmd.OutOrStdout())
		},
	}
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "how often to refresh")
	return cmd
}

// runTop prints the status table again every interval until interrupted.
func runTop(ctx context.Context, interval time.Duration, stdout io.Writer) error {
	c, err := loadTrainerConfig()
	if err != nil {
		return err
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		var frame strings.Builder
		frame.WriteString("\x1b[H\x1b[2J") // home, clear
		fmt.Fprintf(&frame, "%s  (every %v; Ctrl-C quits)\n", time.Now().Format("15:04:05"), interval)
		if _, st, err := fetchStatus(ctx, c); err != nil {
			fmt.Fprintf(&frame, "%v\n", err)
		} else if err := writeStatus(&frame, st); err != nil {
			return err
		}
		if _, err := io.WriteString(stdout, frame.String()); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// fetchStatus reads the coordinator's status with pkg/client.
func fetchStatus(ctx context.Context, c trainerConfig) ([]byte, coordinator.Status, error) {
	var st coordinator.Status
	body, err := (&client.Coordinator{URL: c.CoordinatorURL, Token: c.APIToken}).Status(ctx)
	var he *client.HTTPError
	if err != nil && !errors.As(err, &he) {
		return nil, st, fmt.Errorf("%w (ACTLOOP_COORDINATOR_URL)", err)
	}
	if err != nil {
		return nil, st, err
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, st, fmt.Errorf("status: %w", err)
	}
	return body, st, nil
}

// writeStatus writes st as a few lines, first what the coordinator could
// not read, and a table of replicas.
func writeStatus(w io.Writer, st coordinator.Status) error {
	ctl := "running"
	if st.Control.Paused {
		ctl = fmt.Sprintf("PAUSED (%s, epoch %d)", st.Control.Mode, st.Control.Epoch)
	}
	var finished []string
	keys := make([]string, 0, len(st.Finished))
	for k := range st.Finished {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		finished = append(finished, fmt.Sprintf("%d %s", st.Finished[k], k))
	}
	if len(finished) == 0 {
		finished = []string{"none"}
	}
	// A source the coordinator could not read: the rest is shown.
	for _, e := range st.Errors {
		fmt.Fprintf(w, "NOT READ    %s\n", e)
	}
	fmt.Fprintf(w, "control     %s, weight version %d\n", ctl, st.Control.WeightVersion)
	fmt.Fprintf(w, "trajectories %d active (limit %d, %d–%d), %d waiting; finished: %s\n",
		st.Active, st.MaxActive, st.MaxActiveFloor, st.MaxActiveCeiling, st.Queued, strings.Join(finished, ", "))
	fmt.Fprintf(w, "policy      %s; moved %d (off env-workers %d), republished %d, stale predictions %d, predictor failures %d\n",
		st.Policy, st.Moved, st.EnvMoved, st.Republished, st.StalePredictions, st.PredictorFailures)
	writeOutcomes(w, st.Outcomes)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "REPLICA\tLIVE\tACTIVE\tBUSY/SLOTS\t")
	for _, r := range st.Replicas {
		live := "yes"
		if !r.Live {
			live = "DOWN"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d/%d\t\n", r.Name, live, r.Active, r.Busy, r.Slots)
	}
	if len(st.Queues) > 0 {
		fmt.Fprintln(tw, "\t\t\t\t")
		fmt.Fprintln(tw, "QUEUE\tDEPTH\tOLDEST\t\t")
		for _, q := range st.Queues {
			oldest := "-"
			if q.Depth > 0 {
				oldest = (time.Duration(q.OldestAgeS * float64(time.Second))).Round(time.Second).String()
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t\t\n", q.Subject, q.Depth, oldest)
		}
	}
	return tw.Flush()
}

// writeOutcomes writes the throughput over the window and the reward, solve
// rate and staleness of the training results, over the window and since the
// coordinator's term began.
func writeOutcomes(w io.Writer, o coordinator.Outcomes) {
	fmt.Fprintf(w, "throughput  last %.0fs: %.2f trajectories/s, %.1f tokens/s, %.2f env steps/s\n",
		o.WindowS, o.TrajectoriesPerS, o.TokensPerS, o.EnvStepsPerS)
	fmt.Fprintf(w, "outcomes    last %.0fs: %s\n", o.WindowS, outcomeLine(o.Window))
	fmt.Fprintf(w, "            this term: %s\n", outcomeLine(o.Total))
}

// outcomeLine is one OutcomeCounts as words.
func outcomeLine(c coordinator.OutcomeCounts) string {
	if c.Results == 0 {
		return fmt.Sprintf("no training results; %d trajectories, %d tokens, %d env steps", c.Trajectories, c.GenTokens, c.EnvSteps)
	}
	return fmt.Sprintf("solved %d/%d (%.0f%%), mean reward %.3g, staleness mean %.2g max %d; %d trajectories, %d tokens, %d env steps",
		c.Solved, c.Results, 100*c.SolveRate, c.MeanReward, c.MeanStaleness, c.MaxStaleness, c.Trajectories, c.GenTokens, c.EnvSteps)
}
