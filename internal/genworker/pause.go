package genworker

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/pkg/llm"
	"github.com/actloop/actloop/pkg/schema"
)

// pauser applies the control state to the worker: on a pause it closes the
// gate, aborts (mode abort) or lets finish (mode drain) the generations in
// flight, waits until each has committed, and reports paused for the epoch;
// on resume it tells the server its new weight version and opens the gate.
type pauser struct {
	w  *Worker
	kv jetstream.KeyValue

	mu       sync.Mutex
	epoch    int64  // the pause being served; -1 when running
	mode     string // its mode
	reported int64  // newest epoch reported, so an older report never overwrites it
	version  int64  // weight version the server was told
}

// reRequestAbort is how often a pause aborts again a generation that has not
// returned: an abort that reached the server before its request did
// matched nothing.
const reRequestAbort = 20 * time.Millisecond

func (w *Worker) watchControl(ctx context.Context) error {
	kv, err := w.d.JS.KeyValue(ctx, bus.BucketControl)
	if err != nil {
		return fmt.Errorf("kv %s: %w", bus.BucketControl, err)
	}
	p := &pauser{w: w, kv: kv, epoch: -1, reported: -1, version: -1}
	defer p.forget()
	return bus.WatchControl(ctx, w.d.JS, w.d.Log, func(c schema.Control) {
		w.control.Set(c)
		p.apply(ctx, c)
	})
}

func (p *pauser) apply(ctx context.Context, c schema.Control) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.Paused {
		if c.Epoch == p.epoch && c.Mode == p.mode {
			return // already served
		}
		p.epoch, p.mode = c.Epoch, c.Mode
		gens := p.w.tracker.pause(c.Mode != schema.PauseDrain)
		go p.settle(ctx, c, gens)
		return
	}
	if p.epoch != -1 {
		p.w.d.Log.Info("resumed", "epoch", c.Epoch, "weight_version", c.WeightVersion)
	}
	p.epoch, p.mode = -1, ""
	if c.WeightVersion != p.version {
		if vs, ok := p.w.gen.(llm.VersionSetter); ok {
			// Best effort: the tokens record the control's version either
			// way; this makes the server's answers say the same.
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if err := vs.SetWeightVersion(sctx, strconv.FormatInt(c.WeightVersion, 10)); err != nil && ctx.Err() == nil {
				p.w.d.Log.Warn("tell server its weight version", "version", c.WeightVersion, "error", err)
			}
			cancel()
		}
		p.version = c.WeightVersion
	}
	p.w.tracker.resume(c.WeightVersion)
	p.report(ctx, schema.PauseReport{Epoch: c.Epoch, Paused: false})
}

// settle waits until every generation in gens has returned from the
// server, aborting again (mode abort) those that have not, then reports
// paused for c's epoch if that pause still holds. It does not wait for the
// commits of their partial output: the servers are idle once the calls
// have returned, which is what the trainer waits for, and each partial
// records the version that produced it whenever it is committed.
func (p *pauser) settle(ctx context.Context, c schema.Control, gens []*generation) {
	start := time.Now()
	abort := c.Mode != schema.PauseDrain
	if abort {
		p.abortAll(ctx, gens)
	}
	aborted := time.Since(start)
	t := time.NewTicker(reRequestAbort)
	defer t.Stop()
	for _, g := range gens {
		for waiting := true; waiting; {
			select {
			case <-g.returned:
				waiting = false
			case <-ctx.Done():
				return
			case <-t.C:
				if abort {
					_ = p.w.gen.Abort(ctx, g.rid)
				}
			}
		}
	}
	r := schema.PauseReport{Epoch: c.Epoch, Paused: true}
	if abort && len(gens) > 0 { // the abort call until the last answer is in
		r.ServerMS = float64(time.Since(start).Microseconds()) / 1000
	}
	for _, g := range gens {
		if n := g.kept.Load(); n >= 0 {
			r.Aborted++
			r.KeptTokens += n
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.epoch != c.Epoch || p.mode != c.Mode {
		return // resumed, or paused again, meanwhile
	}
	p.report(ctx, r)
	p.w.m.pause.Observe(time.Since(start).Seconds())
	p.w.d.Log.Info("paused", "epoch", c.Epoch, "mode", c.Mode, "generations", len(gens), "aborted", r.Aborted,
		"abort_call_ms", aborted.Milliseconds(), "settled_ms", time.Since(start).Milliseconds())
}

// abortAll aborts every generation of gens on the server: those whose
// request id carries this worker's prefix with one call when the server
// matches prefixes, the rest one by one, all at once. A trajectory keeps
// the request id of its first generation for life, so those of
// trajectories that started on another worker (or an earlier run of this
// one), or moved here from another replica, carry another prefix.
func (p *pauser) abortAll(ctx context.Context, gens []*generation) {
	pa, byPrefix := p.w.gen.(llm.PrefixAborter)
	var wg sync.WaitGroup
	abort := func(f func(context.Context) error, what string) {
		wg.Go(func() {
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if err := f(actx); err != nil && ctx.Err() == nil {
				p.w.d.Log.Warn("abort for pause; will try again", "rid", what, "error", err)
			}
		})
	}
	if byPrefix {
		abort(func(ctx context.Context) error { return pa.AbortPrefix(ctx, p.w.ridPrefix) }, p.w.ridPrefix+"*")
	}
	for _, g := range gens {
		if !byPrefix || !strings.HasPrefix(g.rid, p.w.ridPrefix) {
			abort(func(ctx context.Context) error { return p.w.gen.Abort(ctx, g.rid) }, g.rid)
		}
	}
	wg.Wait()
}

func (p *pauser) key() string { return "gen." + p.w.cfg.Replica + "." + p.w.id }

// report writes r as this worker's answer; callers hold p.mu. A report of
// an older epoch than one already written is dropped.
func (p *pauser) report(ctx context.Context, r schema.PauseReport) {
	if r.Epoch < p.reported {
		return
	}
	p.reported = r.Epoch
	r.V, r.Worker, r.Replica, r.At = schema.Version, p.w.id, p.w.cfg.Replica, p.w.d.Now().UTC()
	b, _ := json.Marshal(r)
	if _, err := p.kv.Put(ctx, p.key(), b); err != nil && ctx.Err() == nil {
		p.w.d.Log.Warn("pause report", "epoch", r.Epoch, "error", err)
	}
}

// forget removes this worker's report when it stops.
func (p *pauser) forget() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.kv.Delete(ctx, p.key())
}
