package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/actloop/actloop/internal/coordinator"
)

// runStatus prints the coordinator's /v1/status as a compact table, or as
// JSON with --json.
func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the status as JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := loadTrainerConfig()
	if err != nil {
		return err
	}
	body, st, err := fetchStatus(ctx, c)
	if err != nil {
		return err
	}
	if *asJSON {
		_, err = fmt.Fprintln(stdout, strings.TrimSpace(string(body)))
		return err
	}
	return writeStatus(stdout, st)
}

// runTop prints the status table again every --interval until interrupted.
func runTop(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("top", flag.ContinueOnError)
	fs.SetOutput(stderr)
	interval := fs.Duration("interval", 2*time.Second, "how often to refresh")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *interval <= 0 {
		return &exitError{2, errors.New("top: --interval must be > 0")}
	}
	c, err := loadTrainerConfig()
	if err != nil {
		return err
	}
	t := time.NewTicker(*interval)
	defer t.Stop()
	for {
		var frame strings.Builder
		frame.WriteString("\x1b[H\x1b[2J") // home, clear
		fmt.Fprintf(&frame, "%s  (every %v; Ctrl-C quits)\n", time.Now().Format("15:04:05"), *interval)
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

func fetchStatus(ctx context.Context, c trainerConfig) ([]byte, coordinator.Status, error) {
	var st coordinator.Status
	base := c.CoordinatorURL
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/status", nil)
	if err != nil {
		return nil, st, fmt.Errorf("ACTLOOP_COORDINATOR_URL: %w", err)
	}
	if c.APIToken != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, st, fmt.Errorf("status from %s (ACTLOOP_COORDINATOR_URL): %w", base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, st, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, st, fmt.Errorf("status: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, st, fmt.Errorf("status: %w", err)
	}
	return body, st, nil
}

// writeStatus writes st as a few lines and a table of replicas.
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
	fmt.Fprintf(w, "control     %s, weight version %d\n", ctl, st.Control.WeightVersion)
	fmt.Fprintf(w, "trajectories %d active (limit %d, %d–%d), %d waiting; finished: %s\n",
		st.Active, st.MaxActive, st.MaxActiveFloor, st.MaxActiveCeiling, st.Queued, strings.Join(finished, ", "))
	fmt.Fprintf(w, "policy      %s; moved %d (off env-workers %d), republished %d, stale predictions %d, predictor failures %d\n",
		st.Policy, st.Moved, st.EnvMoved, st.Republished, st.StalePredictions, st.PredictorFailures)
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
