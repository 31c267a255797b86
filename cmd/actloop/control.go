package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/actloop/actloop/pkg/control"
	"github.com/actloop/actloop/pkg/schema"
)

// runControl runs `pause`, `resume` or `control` against the coordinator
// over NATS and prints its answer as JSON.
func runControl(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	mode := fs.String("mode", schema.PauseAbort, "pause: abort (keep partial output, resume it later) or drain (let generations finish)")
	timeout := fs.Duration("timeout", 0, "pause: how long to wait for every gen-worker (0: the coordinator's ACTLOOP_PAUSE_TIMEOUT)")
	version := fs.Int64("weight-version", -1, "resume: the weight version the servers now hold (-1: unchanged)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	nc, _, err := connect(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	c := control.Client{NC: nc}
	var out any
	switch cmd {
	case "pause":
		wait := *timeout
		if wait == 0 {
			wait = 10 * time.Minute // the coordinator's own timeout answers first
		}
		ctx, cancel := context.WithTimeout(ctx, wait+10*time.Second)
		defer cancel()
		out, err = c.Pause(ctx, schema.PauseRequest{Mode: *mode, TimeoutMS: timeout.Milliseconds()})
	case "resume":
		var v *int64
		if *version >= 0 {
			v = version
		}
		out, err = c.Resume(ctx, v)
	default:
		out, err = c.Get(ctx)
	}
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
