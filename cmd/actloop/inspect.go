package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/actloop/actloop/internal/coordinator"
	"github.com/actloop/actloop/pkg/client"
)

func newInspectCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect TRAJ [--json]",
		Short: "Print one trajectory: its state, where it waits, its trace id and audit log",
		Long: `Print what the coordinator knows of trajectory TRAJ (GET
/v1/trajectories/TRAJ at ACTLOOP_COORDINATOR_URL, with ACTLOOP_API_TOKEN as
the bearer token): its state and seq, how it ended, turns, commands and
tokens, its replica, env-worker and request id, the weight versions of its
generated tokens, its trace id, where it waits (the subject of the work
message its state calls for, or admission), and its audit log (one line per
step committed). A trajectory is known while it waits for admission, runs,
and for ACTLOOP_RESULT_TTL after its result. --json prints the whole answer.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError(fmt.Errorf("inspect: want one trajectory id, got %d arguments", len(args)))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runInspect(cmd.Context(), args[0], asJSON, cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the trajectory as JSON")
	return cmd
}

// runInspect prints trajectory id as the coordinator knows it.
func runInspect(ctx context.Context, id string, asJSON bool, stdout io.Writer) error {
	c, err := loadTrainerConfig()
	if err != nil {
		return err
	}
	body, err := fetchInspection(ctx, c, id)
	if err != nil {
		return err
	}
	if asJSON {
		_, err = fmt.Fprintln(stdout, strings.TrimSpace(string(body)))
		return err
	}
	var in coordinator.Inspection
	if err := json.Unmarshal(body, &in); err != nil {
		return fmt.Errorf("inspect %s: %w", id, err)
	}
	return writeInspection(stdout, in)
}

// fetchInspection GETs /v1/trajectories/id; an answer other than 200 is an
// error with the coordinator's reason (for 404: no such trajectory, named).
func fetchInspection(ctx context.Context, c trainerConfig, id string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.CoordinatorURL+"/v1/trajectories/"+url.PathEscape(id), nil)
	if err != nil {
		return nil, fmt.Errorf("inspect %s: %w (ACTLOOP_COORDINATOR_URL)", id, err)
	}
	if c.APIToken != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("inspect %s: %w (ACTLOOP_COORDINATOR_URL)", id, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("inspect %s: %w", id, err)
	}
	if resp.StatusCode != http.StatusOK {
		line, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
		return nil, fmt.Errorf("inspect %s: %w", id, &client.HTTPError{StatusCode: resp.StatusCode, Status: resp.Status, Body: line})
	}
	return body, nil
}

// writeInspection writes in as a few aligned lines and its audit log.
func writeInspection(w io.Writer, in coordinator.Inspection) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, format string, a ...any) { fmt.Fprintf(tw, "%s\t%s\n", k, fmt.Sprintf(format, a...)) }
	row("trajectory", "%s", in.ID)
	state := fmt.Sprintf("%s, seq %d", in.State, in.Seq)
	if in.End != "" {
		state += fmt.Sprintf("; ended %s (%s), reward %g", in.End, in.Reason, in.Reward)
	}
	row("state", "%s", state)
	waits := in.WaitsOn
	if waits == "" {
		waits = "nothing (ended)"
	}
	row("waits on", "%s", waits)
	if in.State == "waiting" {
		row("arrived", "%s", stamp(in.ArrivedAt))
		return tw.Flush()
	}
	row("turns", "%d model calls, %d commands", in.Turns, in.Commands)
	row("tokens", "%d generated, %d in all (prompt %d)", in.GenTokens, in.NumTokens, in.PromptLen)
	row("replica", "%s (rid %s)", orDash(in.Replica), orDash(in.RID))
	row("env-worker", "%s", orDash(in.EnvWorker))
	versions := "none generated"
	if in.MinVersion >= 0 {
		versions = fmt.Sprintf("%d to %d", in.MinVersion, in.MaxVersion)
	}
	row("weights", "%s (current %d)", versions, in.WeightVersion)
	row("moves", "%d preempted, %d restarted, %d sandbox replays", in.Preempts, in.Restarts, in.Replays)
	if in.GroupID != "" {
		row("group", "%s", in.GroupID)
	}
	row("trace id", "%s", orDash(in.TraceID))
	row("admitted", "%s", stamp(in.AdmittedAt))
	row("updated", "%s", stamp(in.UpdatedAt))
	if !in.FinishedAt.IsZero() {
		row("finished", "%s", stamp(in.FinishedAt))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "audit (%d entries)\n", len(in.Audit))
	for _, l := range in.Audit {
		fmt.Fprintf(w, "  %s\n", auditLine(l))
	}
	return nil
}

// auditLine renders "<seq> <transition> <unix ms>" with the time readable.
func auditLine(l string) string {
	f := strings.Fields(l)
	if len(f) != 3 {
		return l
	}
	ms, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return l
	}
	return fmt.Sprintf("%4s  %-22s %s", f[0], f[1], stamp(time.UnixMilli(ms)))
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
