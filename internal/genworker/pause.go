package genworker

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/pkg/llm"
	"github.com/actloop/actloop/pkg/schema"
)

// pauser applies the control state to the worker: on a pause it closes the
// gate, aborts (mode abort) or lets finish (mode drain) the generations in
// flight, waits until each has returned from the server, reports paused for
// the epoch, and only then lets the aborted ones commit their partial
// output; on resume it tells the server its new weight version and opens
// the gate.
type pauser struct {
	w  *Worker
	kv jetstream.KeyValue

	mu    sync.Mutex
	epoch int64  // the pause being served; -1 when running
	mode  string // its mode
	// hold is opened once the pause has reported (or a resume, or another
	// pause, supersedes it): the commits of the generations it aborted wait
	// for it. over is closed once its settle has ended and its abort calls
	// have returned. Both nil when running.
	hold     *latch
	over     chan struct{}
	reported int64 // newest epoch reported, so an older report never overwrites it
	version  int64 // weight version the server was told
}

// latch is a channel closed once, by whichever of its closers comes first.
type latch struct {
	c    chan struct{}
	once sync.Once
}

func newLatch() *latch { return &latch{c: make(chan struct{})} }

func (l *latch) open() { l.once.Do(func() { close(l.c) }) }

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
	if c.Paused {
		defer p.mu.Unlock()
		if c.Epoch == p.epoch && c.Mode == p.mode {
			return // already served
		}
		p.epoch, p.mode = c.Epoch, c.Mode
		p.release()
		prev := p.over
		p.hold, p.over = newLatch(), make(chan struct{})
		gens := p.w.tracker.pause(c.Mode != schema.PauseDrain, p.hold.c)
		go p.settle(ctx, c, gens, p.hold, prev, p.over)
		return
	}
	p.release()
	over := p.over
	p.over = nil
	if p.epoch != -1 {
		p.w.d.Log.Info("resumed", "epoch", c.Epoch, "weight_version", c.WeightVersion)
	}
	p.epoch, p.mode = -1, ""
	p.mu.Unlock()
	if over != nil {
		// No abort call of the pause may reach the server once generations
		// start again: they go on under the same request ids.
		select {
		case <-over:
		case <-ctx.Done():
			return
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
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

// release lets the commits held by the pause served so far go on, and
// ends its settle if that still waits (a resume, or another pause,
// supersedes it); callers hold p.mu.
func (p *pauser) release() {
	if p.hold != nil {
		p.hold.open()
		p.hold = nil
	}
}

// settle waits until every generation in gens has returned from the
// server, aborting again (mode abort) those that have not, then reports
// paused for c's epoch, and then opens hold; it ends without a report
// when hold opens first (the pause is superseded). It does not wait for
// the commits of their partial output, which wait for hold instead, so as
// not to compete with the last answers and the report: the servers are
// idle once the calls have returned, which is what the trainer waits for,
// and each partial records the version that produced it whenever it is
// committed. Nor does the report wait for the answers to the abort calls,
// which may come after those of the generations: a resume does (over,
// closed once they are in, and those of the pause before, prev).
func (p *pauser) settle(ctx context.Context, c schema.Control, gens []*generation, hold *latch, prev <-chan struct{}, over chan struct{}) {
	start := time.Now()
	abort := c.Mode != schema.PauseDrain
	var calls sync.WaitGroup // the abort calls
	defer func() {
		hold.open()
		calls.Wait()
		if prev != nil {
			<-prev
		}
		close(over)
	}()
	var sending atomic.Bool // an abort call is under way: at most one at a time
	var abortCall atomic.Int64
	abortCall.Store(-1) // ms the first took
	if abort {
		sending.Store(true)
		calls.Go(func() {
			defer sending.Store(false)
			p.abortAll(ctx, gens)
			abortCall.Store(time.Since(start).Milliseconds())
		})
	}
	t := time.NewTicker(reRequestAbort)
	defer t.Stop()
	for _, g := range gens {
		for waiting := true; waiting; {
			select {
			case <-g.returned:
				waiting = false
			case <-hold.c:
				return // superseded
			case <-ctx.Done():
				return
			case <-t.C:
				if abort && sending.CompareAndSwap(false, true) {
					calls.Go(func() {
						defer sending.Store(false)
						actx, cancel := context.WithTimeout(ctx, 5*time.Second)
						defer cancel()
						_ = p.w.gen.Abort(actx, g.rid)
					})
				}
			}
		}
	}
	r := schema.PauseReport{Epoch: c.Epoch, Paused: true}
	var answered int64
	for _, g := range gens {
		answered = max(answered, g.answered.Load())
		if n := g.kept.Load(); n >= 0 {
			r.Aborted++
			r.KeptTokens += n
		}
	}
	if abort && answered > 0 { // the abort call until the last answer came in
		r.ServerMS = float64(max(answered-start.UnixNano(), 0)/1e3) / 1e3 // µs precision, as WaitedMS
	}
	p.mu.Lock()
	current := p.epoch == c.Epoch && p.mode == c.Mode // else resumed, or paused again, meanwhile
	if current {
		p.report(ctx, r)
	}
	p.mu.Unlock()
	if !current {
		return
	}
	settled := time.Since(start)
	hold.open()
	calls.Wait()
	p.w.m.pause.Observe(settled.Seconds())
	p.w.d.Log.Info("paused", "epoch", c.Epoch, "mode", c.Mode, "generations", len(gens), "aborted", r.Aborted,
		"abort_call_ms", abortCall.Load(), "settled_ms", settled.Milliseconds())
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
