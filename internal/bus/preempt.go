package bus

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Preemptor is running work that can be asked to give up its slot (a
// gen-worker's low-priority generations). The Runner only asks; what
// preempting means is the implementer's.
type Preemptor interface {
	// CanPreempt reports whether some running work may be preempted now.
	CanPreempt() bool
	// Preempt asks the newest preemptible work to stop and release its
	// slot; it reports whether it asked any.
	Preempt() bool
}

// MultiSourceWait bounds how long a Runner with a Preemptor waits, while
// every slot is busy, before it asks again whether running work may be
// preempted; and how long a pull waits for a message whose doorbell rang
// before it could be pulled.
const MultiSourceWait = 20 * time.Millisecond

// preemptMask has bit i set for each source whose messages may preempt:
// PreemptFrom, or the first source.
func (r *Runner) preemptMask() uint64 {
	if len(r.PreemptFrom) == 0 {
		return 1
	}
	var m uint64
	for _, i := range r.PreemptFrom {
		m |= 1 << i
	}
	return m
}

// pullToPreempt takes a message waiting on a preempting source (the first
// that has one) while every slot is busy: it preempts running work and
// takes its slot. It reports whether there was one.
func (r *Runner) pullToPreempt(ctx context.Context, slots chan struct{}, dispatch func(jetstream.Msg)) bool {
	mask := r.preemptMask()
	for i, src := range r.Sources {
		if mask&(1<<i) != 0 && r.preemptWith(ctx, src, slots, dispatch) {
			return true
		}
	}
	return false
}

// preemptWith takes a message waiting on src, preempting running work for
// it; it reports whether there was one.
func (r *Runner) preemptWith(ctx context.Context, src jetstream.Consumer, slots chan struct{}, dispatch func(jetstream.Msg)) bool {
	batch, err := src.FetchNoWait(1)
	if err != nil {
		r.pullFailed(ctx, err)
		return false
	}
	got := false
	for m := range batch.Messages() {
		got = true
		if ctx.Err() != nil {
			_ = m.Nak()
			continue
		}
		select {
		case slots <- struct{}{}: // a slot freed meanwhile: no need to preempt
			dispatch(m)
			continue
		default:
		}
		r.Preempt.Preempt() // if nothing is left to preempt, a slot frees by itself
		r.waitSlot(ctx, slots, m, dispatch)
	}
	return got
}

// waitSlot runs m as soon as a slot frees, keeping its ack timer reset
// meanwhile so it is not redelivered elsewhere.
func (r *Runner) waitSlot(ctx context.Context, slots chan struct{}, m jetstream.Msg, dispatch func(jetstream.Msg)) {
	beat := time.NewTicker(max(r.AckWait/3, 10*time.Millisecond))
	defer beat.Stop()
	for {
		select {
		case slots <- struct{}{}:
			dispatch(m)
			return
		case <-ctx.Done():
			_ = m.Nak()
			return
		case <-beat.C:
			_ = m.InProgress()
		}
	}
}
