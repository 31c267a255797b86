package bench

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"runtime/pprof"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/internal/devstack"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/pkg/client"
	"github.com/actloop/actloop/pkg/control"
	"github.com/actloop/actloop/pkg/schema"
)

// Outputs are what every bench writes besides its report: the services'
// log, and a CPU profile.
type Outputs struct {
	Log        string // append the services' log to this file ("": discard it)
	CPUProfile string // write a CPU profile to this file ("": none)
}

// logger returns a logger writing the services' log to the Log file, or
// one that discards it.
func (b Outputs) logger() (*slog.Logger, func(), error) {
	if b.Log == "" {
		return slog.New(slog.DiscardHandler), func() {}, nil
	}
	f, err := os.OpenFile(b.Log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, nil, err
	}
	return slog.New(slog.NewTextHandler(f, nil)), func() { f.Close() }, nil
}

// benchCommon are the settings every bench run's services share: short
// pulls, and an ack wait long enough for the longest simulated step.
func benchCommon() service.Common {
	c := service.CommonDefaults()
	c.PullWait = 100 * time.Millisecond
	c.AckWait = time.Minute
	return c
}

// startBench starts an in-process stack (opts.Dir is filled in; a nil
// opts.Log discards the log) for one bench run. Its services run under the returned context; the
// returned stop ends them, closes the stack and removes its directory.
func startBench(ctx context.Context, opts devstack.Options) (*devstack.Stack, context.Context, func(), error) {
	dir, err := os.MkdirTemp("", "actloop-bench-")
	if err != nil {
		return nil, nil, nil, err
	}
	// Searchable by the unprivileged user sandbox commands run as under bwrap.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, nil, nil, err
	}
	opts.Dir = dir
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	sctx, cancel := context.WithCancel(ctx)
	st, err := devstack.StartInfra(sctx, opts)
	if err != nil {
		cancel()
		_ = os.RemoveAll(dir)
		return nil, nil, nil, err
	}
	return st, sctx, func() {
		cancel()
		_ = st.Wait()
		st.Close()
		_ = os.RemoveAll(dir)
	}, nil
}

// profile starts the CPU profile (if any) and returns its stop.
func (b Outputs) profile() (func(), error) {
	if b.CPUProfile == "" {
		return func() {}, nil
	}
	f, err := os.Create(b.CPUProfile)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// syncEvery plays a trainer updating the weights every period until ctx
// ends, and returns how many syncs it completed.
func syncEvery(ctx context.Context, d *service.Deps, sims map[string]string, period time.Duration) int {
	c := control.Client{NC: d.NC}
	t := time.NewTicker(period)
	defer t.Stop()
	n := 0
	for v := int64(1); ; v++ {
		select {
		case <-ctx.Done():
			return n
		case <-t.C:
		}
		if _, err := c.Pause(ctx, schema.PauseRequest{Mode: schema.PauseAbort}); err != nil {
			return n
		}
		for _, url := range sims {
			_ = FlushCache(ctx, url)
		}
		if _, err := c.Resume(ctx, &v); err != nil {
			return n
		}
		n++
	}
}

// FlushCache empties the prefix cache of the simulator at base, as new
// weights do.
func FlushCache(ctx context.Context, base string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/flush_cache", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST /flush_cache: %s", resp.Status)
	}
	return nil
}

// CollectHeads reads n distinct results (by traj_id) from the results
// stream, as heads, calling tick after each. It reads without consuming:
// an ordered consumer from the start of the stream.
func CollectHeads(ctx context.Context, js jetstream.JetStream, n int, tick func(done int)) (map[string]schema.ResultHead, error) {
	c, err := js.OrderedConsumer(ctx, schema.StreamResults, jetstream.OrderedConsumerConfig{FilterSubjects: []string{schema.SubjectResults}})
	if err != nil {
		return nil, err
	}
	out := map[string]schema.ResultHead{}
	tick(0)
	for len(out) < n {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		m, err := c.Next(jetstream.FetchMaxWait(time.Second))
		if err != nil {
			continue
		}
		r, err := schema.Decode[schema.ResultHead](m.Data())
		if err != nil {
			return nil, fmt.Errorf("result: %w", err)
		}
		out[r.TrajID] = r
		tick(len(out))
	}
	return out, nil
}

// collectFull reads n distinct results, their bodies fetched.
func collectFull(ctx context.Context, d *service.Deps, n int) (map[string]schema.Result, error) {
	heads, err := CollectHeads(ctx, d.JS, n, func(int) {})
	if err != nil {
		return nil, err
	}
	bodies := client.NewBodies(d.JS)
	out := make(map[string]schema.Result, len(heads))
	for id, h := range heads {
		if out[id], err = bodies.Result(ctx, h); err != nil {
			return nil, err
		}
	}
	return out, nil
}
