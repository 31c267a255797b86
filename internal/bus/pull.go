package bus

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// acquire takes one slot, waiting for it; with a Preemptor it gives up
// after a short wait, or when a preempting source's doorbell rings, so the
// caller can look again at what may be preempted.
func (r *Runner) acquire(ctx context.Context, slots chan struct{}, bell *doorbell) bool {
	var timeout <-chan time.Time
	var first <-chan struct{}
	if r.Preempt != nil {
		t := time.NewTimer(MultiSourceWait)
		defer t.Stop()
		timeout = t.C
		if bell != nil {
			first = bell.first
		}
	}
	select {
	case slots <- struct{}{}:
		return true
	case <-ctx.Done():
	case <-timeout:
	case <-first:
		bell.keep(bell.mask) // consumed a preempting source's ring: keep it for the pull
	}
	return false
}

// pull takes up to n messages that the sources hold now, in priority order,
// and dispatches them. When it found none and a doorbell rang (rang has bit
// i set for source i), the message may not be stored yet: it waits a
// little for one on the highest source that rang. It returns how many it
// dispatched.
func (r *Runner) pull(ctx context.Context, n int, rang uint64, dispatch func(jetstream.Msg)) int {
	if len(r.Sources) == 1 {
		return r.fetch(ctx, r.Sources[0], n, r.PullWait, dispatch)
	}
	got := 0
	for _, src := range r.Sources {
		got += r.fetch(ctx, src, n-got, 0, dispatch)
		if got == n {
			return got
		}
	}
	if got == 0 && rang != 0 {
		for i, src := range r.Sources {
			if rang&(1<<i) != 0 {
				return r.fetch(ctx, src, 1, MultiSourceWait, dispatch)
			}
		}
	}
	return got
}

// fetch takes up to n messages from src, waiting up to wait (0: not at all)
// for the first, and dispatches them; it returns how many it dispatched.
func (r *Runner) fetch(ctx context.Context, src jetstream.Consumer, n int, wait time.Duration, dispatch func(jetstream.Msg)) int {
	var batch jetstream.MessageBatch
	var err error
	if wait > 0 {
		batch, err = src.Fetch(n, jetstream.FetchMaxWait(wait))
	} else {
		batch, err = src.FetchNoWait(n)
	}
	if err != nil {
		r.pullFailed(ctx, err)
		return 0
	}
	got := 0
	for m := range batch.Messages() {
		if ctx.Err() != nil {
			_ = m.Nak() // arrived after shutdown began: start nothing new
			continue
		}
		dispatch(m)
		got++
	}
	if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) &&
		!errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil {
		r.pullFailed(ctx, err)
	}
	return got
}

func (r *Runner) pullFailed(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	r.Log.Warn("pull failed", "consumer", r.Name, "error", err)
	sleepCtx(ctx, time.Second)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
