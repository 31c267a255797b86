package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/actloop/actloop/internal/telemetry"
)

// Handler handles one message. Its error decides the ack (see Runner).
type Handler func(ctx context.Context, m jetstream.Msg) error

// malformedError marks a message no retry can fix.
type malformedError struct{ err error }

func (e *malformedError) Error() string { return e.err.Error() }
func (e *malformedError) Unwrap() error { return e.err }

// Malformed marks err as a property of the message itself (undecodable,
// invalid): the Runner dead-letters the message and terminates it.
func Malformed(err error) error { return &malformedError{err} }

// IsMalformed reports whether err was marked with Malformed.
func IsMalformed(err error) bool {
	var m *malformedError
	return errors.As(err, &m)
}

// fatalError marks a step that can never succeed for this trajectory.
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }
func (e *fatalError) Unwrap() error { return e.err }

// Fatal marks err as final for the message's work (a retry cannot help, but
// the message itself is sound): the Runner gives up at once.
func Fatal(err error) error { return &fatalError{err} }

// IsFatal reports whether err was marked with Fatal.
func IsFatal(err error) bool {
	var f *fatalError
	return errors.As(err, &f)
}

// Runner pulls messages from its sources, highest priority first, only while
// it has a free slot, and runs Handler on each in its own goroutine.
//
// Outcomes: nil → Ack. Malformed(err) → the original bytes go to
// actloop.dlq with the reason, then Term. Any other error → NakWithDelay
// with exponential back-off, until the message has been delivered MaxDeliver
// times; then GiveUp is called and the message is terminated. Fatal(err) →
// GiveUp and Term at once. An error while
// shutting down → Nak, so another worker takes the message at once. A panic
// in Handler is recovered and treated as an error. While Handler runs, the
// message's ack timer is reset every AckWait/3 (InProgress), so AckWait can
// stay short while steps are long.
type Runner struct {
	Name    string               // consumer name, for logs, spans and dead letters
	Sources []jetstream.Consumer // in priority order
	Slots   int                  // concurrent handlers
	Handler Handler
	// GiveUp is told of a message whose redeliveries ran out (optional); if
	// it fails, the message is handed back to try again later.
	GiveUp     func(ctx context.Context, m jetstream.Msg, err error) error
	Publisher  *Publisher
	Log        *slog.Logger
	AckWait    time.Duration
	MaxDeliver int
	// PullWait is how long an idle Runner waits between pulls: with one
	// source, how long the pull waits at the server; with several, the most
	// time between two rounds when no doorbell rings (see Run).
	PullWait    time.Duration
	StopTimeout time.Duration // how long in-flight handlers may finish after ctx ends
	// Ready, when set, is asked before each pull; while it reports false the
	// Runner pulls nothing (admission control, pause).
	Ready func() bool
	// Preempt, when set, lets a message of the first source displace running
	// work: while every slot is busy and Preempt.CanPreempt(), the Runner
	// pulls from the first source whenever its doorbell rings (and every
	// MultiSourceWait); a message it finds calls Preempt.Preempt() and runs
	// in the slot the preempted work gives up.
	Preempt Preemptor
	// Steal, when set, is asked after a pull on every source found nothing
	// while slots were free: a consumer it returns (another replica's queue)
	// is fetched from once, for one message. nil: nothing to steal now.
	Steal func(ctx context.Context) jetstream.Consumer
}

// Preemptor is running work that can be asked to give up its slot.
type Preemptor interface {
	// CanPreempt reports whether some running work may be preempted now.
	CanPreempt() bool
	// Preempt asks the newest preemptible work to stop and release its
	// slot; it reports whether it asked any.
	Preempt() bool
}

// Run pulls and handles until ctx ends, then waits (up to StopTimeout) for
// in-flight handlers, cancelling the rest so they nak.
//
// With one source, a pull waits at the server (up to PullWait) and returns
// each message as it arrives. With several, a pull that waited on one would
// leave a message on another waiting, so pulls do not wait: each round takes
// what the sources hold now, in priority order, and between rounds the
// Runner listens on the sources' subjects with a plain subscription (a
// doorbell), so a message published on any source is pulled as soon as it
// is published. Messages that come back without a publish (redeliveries,
// delayed naks) are found by the round that runs at least every PullWait.
// The doorbell hears every message twice, so multi-source Runners are for
// small messages (steps that point at state in Redis).
func (r *Runner) Run(ctx context.Context) error {
	if r.Slots < 1 || len(r.Sources) == 0 || r.Handler == nil || r.Publisher == nil {
		return fmt.Errorf("runner %s: needs sources, a handler, a publisher and at least one slot", r.Name)
	}
	bell, err := r.doorbell()
	if err != nil {
		return err
	}
	defer bell.stop()
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()
	stop := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(r.StopTimeout, hcancel)
		context.AfterFunc(hctx, func() { t.Stop() })
	})
	defer stop()

	slots := make(chan struct{}, r.Slots)
	var wg sync.WaitGroup
	defer wg.Wait()
	// dispatch runs m in a slot the caller already holds.
	dispatch := func(m jetstream.Msg) {
		wg.Go(func() {
			defer func() { <-slots }()
			r.handle(ctx, hctx, m)
		})
	}
	for ctx.Err() == nil {
		if r.Ready != nil && !r.Ready() {
			sleepCtx(ctx, readyPoll)
			continue
		}
		if r.Preempt != nil && len(slots) == cap(slots) && r.Preempt.CanPreempt() {
			bell.clear(0)
			if !r.pullToPreempt(ctx, slots, dispatch) {
				bell.waitFirst(ctx, MultiSourceWait) // a high message, or look again
			}
			continue
		}
		if !r.acquire(ctx, slots, bell) {
			continue
		}
		free := 1
		for free < r.Slots && len(slots) < cap(slots) {
			slots <- struct{}{}
			free++
		}
		if r.Ready != nil && !r.Ready() { // changed while waiting for a slot
			releaseN(slots, free)
			continue
		}
		rang := bell.take()
		got := r.pull(ctx, free, rang, dispatch) // the slots are already held
		if got == 0 && r.Steal != nil && ctx.Err() == nil {
			if src := r.Steal(ctx); src != nil {
				got = r.fetch(ctx, src, 1, 0, dispatch)
			}
		}
		releaseN(slots, free-got)
		if got == 0 {
			bell.wait(ctx, r.PullWait)
		}
	}
	return nil
}

// acquire takes one slot, waiting for it; with a Preemptor it gives up
// after a short wait, or when the first source's doorbell rings, so the
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
		bell.mark(0) // consumed the first source's ring: keep it for the pull
	}
	return false
}

// pullToPreempt takes a message waiting on the first source while every
// slot is busy: it preempts running work and takes its slot. It reports
// whether there was one.
func (r *Runner) pullToPreempt(ctx context.Context, slots chan struct{}, dispatch func(jetstream.Msg)) bool {
	batch, err := r.Sources[0].FetchNoWait(1)
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

func releaseN(slots chan struct{}, n int) {
	for range n {
		<-slots
	}
}

// readyPoll is how often a Runner whose Ready reports false asks again.
const readyPoll = 10 * time.Millisecond

// MultiSourceWait bounds how long a Runner with a Preemptor waits, while
// every slot is busy, before it asks again whether running work may be
// preempted; and how long a pull waits for a message whose doorbell rang
// before it could be pulled.
const MultiSourceWait = 20 * time.Millisecond

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

// doorbell hears publishes on the Runner's sources: a plain subscription
// per source on the subjects its consumer filters. A Runner with one source
// has none (nil), and every method of a nil doorbell does nothing.
type doorbell struct {
	subs  []*nats.Subscription
	rang  atomic.Uint64 // bit i: source i rang since the last take
	any   chan struct{} // signalled (non-blocking) on every ring
	first chan struct{} // signalled on a ring of the first source
}

func (r *Runner) doorbell() (*doorbell, error) {
	if len(r.Sources) == 1 {
		return nil, nil
	}
	b := &doorbell{any: make(chan struct{}, 1), first: make(chan struct{}, 1)}
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
	if i == 0 {
		signal(b.first)
	}
}

// mark records a ring of source i without waking anyone.
func (b *doorbell) mark(i int) { b.rang.Or(1 << i) }

// take returns and clears the sources that rang.
func (b *doorbell) take() uint64 {
	if b == nil {
		return 0
	}
	return b.rang.Swap(0)
}

// clear forgets a ring of source i.
func (b *doorbell) clear(i int) {
	if b != nil {
		b.rang.And(^uint64(1 << i))
	}
}

// waitFirst waits up to d for a ring of the first source.
func (b *doorbell) waitFirst(ctx context.Context, d time.Duration) {
	if b == nil {
		sleepCtx(ctx, d)
		return
	}
	if b.rang.Load()&1 != 0 {
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

// tracer is looked up per use so that a tracer provider installed after
// start-up (or replaced in tests) takes effect.
func tracer() trace.Tracer { return otel.Tracer("github.com/actloop/actloop/internal/bus") }

// handle runs the handler on m and acks by outcome. ctx ends when the runner
// stops pulling; hctx ends when in-flight work must give up.
func (r *Runner) handle(ctx, hctx context.Context, m jetstream.Msg) {
	pctx := otel.GetTextMapPropagator().Extract(hctx, HeaderCarrier(m.Headers()))
	pctx, span := tracer().Start(pctx, r.Name, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("messaging.destination.name", m.Subject())))
	defer span.End()
	pctx = telemetry.WithLogAttrs(pctx) // the handler names the trajectory

	stopBeat := r.heartbeat(pctx, m)
	err := r.safeHandle(pctx, m)
	stopBeat()

	meta, _ := m.Metadata()
	var delivered uint64 = 1
	if meta != nil {
		delivered = meta.NumDelivered
	}
	log := r.Log.With("consumer", r.Name, "subject", m.Subject(), "delivered", delivered)
	switch {
	case err == nil:
		if aerr := m.Ack(); aerr != nil {
			log.WarnContext(pctx, "ack failed", "error", aerr)
		}
		return
	case IsMalformed(err):
		span.SetStatus(codes.Error, err.Error())
		log.WarnContext(pctx, "dead-lettering malformed message", "error", err)
		if derr := r.Publisher.DeadLetter(hctx, r.Name, m, err.Error()); derr != nil {
			log.ErrorContext(pctx, "dead-letter failed; will retry", "error", derr)
			_ = m.NakWithDelay(time.Second)
			return
		}
		_ = m.TermWithReason("malformed")
		return
	case ctx.Err() != nil:
		// Shutting down: hand the message back at once.
		_ = m.Nak()
		return
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
	if IsFatal(err) || (r.MaxDeliver > 0 && delivered >= uint64(r.MaxDeliver)) {
		log.ErrorContext(pctx, "giving up on message", "error", err)
		if r.GiveUp != nil {
			if gerr := r.GiveUp(hctx, m, err); gerr != nil {
				log.ErrorContext(pctx, "give-up report failed; will retry", "error", gerr)
				_ = m.NakWithDelay(backoff(delivered))
				return
			}
		}
		_ = m.TermWithReason("gave up")
		return
	}
	delay := backoff(delivered)
	log.WarnContext(pctx, "step failed; will retry", "error", err, "retry_in", delay)
	_ = m.NakWithDelay(delay)
}

func (r *Runner) safeHandle(ctx context.Context, m jetstream.Msg) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return r.Handler(ctx, m)
}

// heartbeat resets m's ack timer every AckWait/3 until stopped.
func (r *Runner) heartbeat(ctx context.Context, m jetstream.Msg) (stop func()) {
	every := r.AckWait / 3
	if every <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				_ = m.InProgress()
			case <-done:
				return
			case <-ctx.Done():
				return
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// backoff is exponential from 250ms, capped at 30s, with full jitter.
func backoff(delivered uint64) time.Duration {
	d := 250 * time.Millisecond << min(delivered-1, 7)
	d = min(d, 30*time.Second)
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}
