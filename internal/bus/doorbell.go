package bus

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// doorbell hears publishes on the Runner's sources: a plain subscription
// per source on the subjects its consumer filters. A Runner with one source
// has none (nil), and every method of a nil doorbell does nothing.
type doorbell struct {
	subs  []*nats.Subscription
	rang  atomic.Uint64 // bit i: source i rang since the last take
	any   chan struct{} // signalled (non-blocking) on every ring
	first chan struct{} // signalled on a ring of a source in mask
	mask  uint64        // the preempting sources (Runner.PreemptFrom)
}

func (r *Runner) doorbell() (*doorbell, error) {
	if len(r.Sources) == 1 {
		return nil, nil
	}
	b := &doorbell{any: make(chan struct{}, 1), first: make(chan struct{}, 1), mask: r.preemptMask()}
	nc := r.Publisher.js.Conn()
	for i, src := range r.Sources {
		cfg := src.CachedInfo().Config
		subjects := cfg.FilterSubjects
		if cfg.FilterSubject != "" {
			subjects = append(subjects, cfg.FilterSubject)
		}
		for _, subj := range subjects {
			sub, err := nc.Subscribe(subj, func(*nats.Msg) { b.ring(i) })
			if err != nil {
				b.stop()
				return nil, fmt.Errorf("runner %s: doorbell on %s: %w", r.Name, subj, err)
			}
			b.subs = append(b.subs, sub)
		}
	}
	return b, nil
}

func (b *doorbell) ring(i int) {
	b.mark(i)
	signal(b.any)
	if b.mask&(1<<i) != 0 {
		signal(b.first)
	}
}

// mark records a ring of source i without waking anyone.
func (b *doorbell) mark(i int) { b.rang.Or(1 << i) }

// ringPatience is how long a Runner keeps looking for the message of a
// ring that found none (see Run).
const ringPatience = time.Second

// keep marks the sources in rang as rung again.
func (b *doorbell) keep(rang uint64) {
	if b != nil {
		b.rang.Or(rang)
	}
}

// take returns and clears the sources that rang.
func (b *doorbell) take() uint64 {
	if b == nil {
		return 0
	}
	return b.rang.Swap(0)
}

// clearMask forgets the rings of the preempting sources.
func (b *doorbell) clearMask() {
	if b != nil {
		b.rang.And(^b.mask)
	}
}

// waitFirst waits up to d for a ring of a preempting source.
func (b *doorbell) waitFirst(ctx context.Context, d time.Duration) {
	if b == nil {
		sleepCtx(ctx, d)
		return
	}
	if b.rang.Load()&b.mask != 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-b.first:
	case <-t.C:
	case <-ctx.Done():
	}
}

// wait waits up to d for a ring (one that came since the last take counts).
func (b *doorbell) wait(ctx context.Context, d time.Duration) {
	if b == nil {
		return // the pull itself waited
	}
	if b.rang.Load() != 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-b.any:
	case <-t.C:
	case <-ctx.Done():
	}
}

func (b *doorbell) stop() {
	if b == nil {
		return
	}
	for _, s := range b.subs {
		_ = s.Unsubscribe()
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
