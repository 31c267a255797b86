package genworker

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/pkg/llm"
	"github.com/actloop/actloop/pkg/schema"
)

// prefixAborter is a server whose prefix abort ends every generation that
// waits on aborted; with answer set, the call answers only once answer is
// closed.
type prefixAborter struct {
	aborted chan struct{}
	once    sync.Once
	answer  chan struct{}
}

func (a *prefixAborter) Generate(context.Context, llm.Request) (llm.Result, error) {
	return llm.Result{}, nil
}
func (a *prefixAborter) Abort(context.Context, string) error { return nil }
func (a *prefixAborter) AbortPrefix(ctx context.Context, _ string) error {
	a.once.Do(func() { close(a.aborted) })
	if a.answer != nil {
		select {
		case <-a.answer:
		case <-ctx.Done():
		}
	}
	return nil
}

// pauseHarness is a worker's pauser over an in-process NATS KV, with n
// generations running on a prefixAborter.
func pauseHarness(t *testing.T, n int) (context.Context, *pauser, []*generation, jetstream.KeyValue) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	js := testkit.JetStream(t, testkit.StartNATS(t))
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bus.BucketControl, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	gen := &prefixAborter{aborted: make(chan struct{})}
	w := &Worker{cfg: Config{Replica: "r0"}, d: &service.Deps{Log: discard, Now: time.Now}, gen: gen, id: "w0",
		ridPrefix: llm.NewRIDPrefix(), m: newGenMetrics("r0")}
	w.tracker = newTracker(false, gen.Abort, time.Now)
	w.tracker.resume(0)
	gens := make([]*generation, n)
	for i := range gens {
		gens[i] = newGeneration()
		gens[i].rid = llm.NewRIDWithPrefix(w.ridPrefix)
		if err := w.tracker.start(ctx, gens[i]); err != nil {
			t.Fatal(err)
		}
	}
	return ctx, &pauser{w: w, kv: kv, epoch: -1, reported: -1, version: -1}, gens, kv
}

// report is the pause report under key in kv now (zero: none).
func report(ctx context.Context, kv jetstream.KeyValue, key string) schema.PauseReport {
	e, err := kv.Get(ctx, key)
	if err != nil {
		return schema.PauseReport{}
	}
	r, _ := schema.Decode[schema.PauseReport](e.Value())
	return r
}

// A pause in abort mode reports paused once the aborted generations have
// returned, without waiting for their commits; and those commits wait
// until the report is written (so they do not compete with it), then go
// on, each once, at most heldCommits at a time.
func TestPauseCommitsAfterTheReport(t *testing.T) {
	const n = 2*heldCommits + 1
	ctx, p, gens, kv := pauseHarness(t, n)
	aborted := p.w.gen.(*prefixAborter).aborted
	seen := make(chan schema.PauseReport, n) // the report each commit finds when it may go on
	var running, most atomic.Int32           // commits under way
	for _, g := range gens {
		go func() { // the generation's handler, as handle and step run it
			defer p.w.tracker.committed(g)
			<-aborted
			g.kept.Store(5)
			g.answered.Store(time.Now().UnixNano())
			if hold := p.w.tracker.done(g); hold != nil {
				p.w.tracker.afterPause(ctx, g, hold)
			}
			now := running.Add(1)
			for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
			}
			seen <- report(ctx, kv, p.key())
			running.Add(-1)
		}()
	}
	p.apply(ctx, schema.Control{Paused: true, Epoch: 1, Mode: schema.PauseAbort})
	for range n {
		select {
		case r := <-seen:
			if !r.Paused || r.Epoch != 1 || r.Aborted != n || r.KeptTokens != 5*n || r.ServerMS < 0 {
				t.Fatalf("a commit went on with the report %+v in place: want epoch 1 paused, %d aborted, %d kept", r, n, 5*n)
			}
		case <-time.After(time.Minute):
			t.Fatal("the commits are still held")
		}
	}
	if m := most.Load(); m > heldCommits {
		t.Fatalf("%d commits held by the pause ran at once, want at most %d", m, heldCommits)
	}
	if !p.w.tracker.isPaused() {
		t.Fatal("the gate is open during the pause")
	}
}

// A resume before the pause could report (a generation that never
// returns) lets the commits held for it go on.
func TestResumeReleasesTheHeldCommits(t *testing.T) {
	ctx, p, gens, kv := pauseHarness(t, 2)
	p.apply(ctx, schema.Control{Paused: true, Epoch: 1, Mode: schema.PauseAbort})
	hold := p.w.tracker.done(gens[0]) // gens[1] never returns
	if hold == nil {
		t.Fatal("a generation aborted by a pause commits at once")
	}
	p.apply(ctx, schema.Control{Epoch: 1, WeightVersion: 1})
	select {
	case <-hold:
	case <-time.After(time.Minute):
		t.Fatal("the commit is still held after the resume")
	}
	if r := report(ctx, kv, p.key()); r.Paused {
		t.Fatalf("report %+v: reported paused though a generation never returned", r)
	}
}

// In drain mode nothing is aborted, and nothing waits for the report.
func TestDrainHoldsNothing(t *testing.T) {
	ctx, p, gens, _ := pauseHarness(t, 1)
	p.apply(ctx, schema.Control{Paused: true, Epoch: 1, Mode: schema.PauseDrain})
	if hold := p.w.tracker.done(gens[0]); hold != nil {
		t.Fatal("a generation let finish in drain mode waits to commit")
	}
}

// A pause reports without waiting for the answer to its abort call, but a
// resume waits for it: once generations start again, under the same
// request ids, no abort of the pause may reach the server.
func TestResumeWaitsForTheAbortCalls(t *testing.T) {
	ctx, p, gens, kv := pauseHarness(t, 1)
	gen := p.w.gen.(*prefixAborter)
	gen.answer = make(chan struct{})
	p.apply(ctx, schema.Control{Paused: true, Epoch: 1, Mode: schema.PauseAbort})
	<-gen.aborted
	p.w.tracker.done(gens[0])
	testkit.Eventually(t, time.Minute, "the report", func() bool { return report(ctx, kv, p.key()).Paused })
	resumed := make(chan struct{})
	go func() {
		defer close(resumed)
		p.apply(ctx, schema.Control{Epoch: 1, WeightVersion: 1})
	}()
	testkit.Eventually(t, time.Minute, "the resume to begin", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.epoch == -1
	})
	if !p.w.tracker.isPaused() {
		t.Fatal("generation resumed while the pause's abort call was under way")
	}
	close(gen.answer)
	<-resumed
	if p.w.tracker.isPaused() {
		t.Fatal("still paused after the resume")
	}
}
