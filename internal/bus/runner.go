package bus

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Runner pulls messages from its sources, highest priority first, only
// while it has a free slot, and runs each in its own goroutine through its
// middleware chain, outermost first:
//
//	Tracing(Name)                  one span per message, log attributes
//	Acker(Log)                     the only layer that acks: maps the outcome (see Acker)
//	Recover()                      a panic below (a GiveUp report's) → an error: a retry
//	InProgress(AckWait/3)          ack timer reset while the message is held
//	DeadLetter(Publisher, Name)    Malformed → actloop.dlq
//	GiveUp(MaxDeliver, GiveUp)     Fatal, or deliveries ran out → GiveUp
//	Recover()                      a panic → an error for the message
//	Middleware...                  the caller's own
//	Handler
//
// Tracing is outside Acker so that the ack, and the line Acker logs, are in
// the message's span and carry the trajectory's ids; it changes no outcome.
// InProgress is outside DeadLetter and GiveUp, so the message stays held
// while they publish. Recover is there twice: inside GiveUp, so a
// handler's panic counts as a failed delivery, and just inside Acker, so
// a panic in the layers between never crashes the process either.
//
// In short: nil → Ack. Malformed(err) → the original bytes go to
// actloop.dlq with the reason, then Term. Any other error → NakWithDelay
// with exponential back-off, until the message has been delivered
// MaxDeliver times; then GiveUp is called and the message is terminated.
// Fatal(err) → GiveUp and Term at once. An error while shutting down → Nak,
// so another worker takes the message at once.
//
// The Runner itself only pulls, runs the chain and shuts down: see Run.
// Gen-workers plug in Ready (a gate), Preempt (a Preemptor) and Steal.
type Runner struct {
	Name    string               // consumer name, for logs, spans and dead letters
	Sources []jetstream.Consumer // in priority order
	Slots   int                  // concurrent handlers, at most
	// Limit, when set, is how many handlers may run now (at most Slots,
	// at least 1): the Runner follows it within about limitPoll, holding
	// the slots above it empty.
	Limit   func() int
	Handler Handler
	// Middleware wraps Handler inside the standard chain (after Recover),
	// outermost first.
	Middleware []Middleware
	// GiveUp is told of a message given up on (optional); if it fails,
	// the message is handed back to try again later.
	GiveUp GiveUpFunc
	// Publisher publishes dead letters; its connection also hears the
	// sources' doorbells.
	Publisher  *Publisher
	Log        *slog.Logger
	AckWait    time.Duration // the consumers' AckWait: InProgress every third of it
	MaxDeliver int           // deliveries before giving up; 0: never (only on Fatal)
	// PullWait is how long an idle Runner waits between pulls: with one
	// source, how long the pull waits at the server; with several, the most
	// time between two rounds when no doorbell rings (see Run).
	PullWait    time.Duration
	StopTimeout time.Duration // how long in-flight handlers may finish after ctx ends
	// Ready, when set, is asked before each pull; while it reports false the
	// Runner pulls nothing (admission control, pause).
	Ready func() bool
	// Preempt, when set, lets a message of a preempting source (those
	// PreemptFrom indexes; the first when empty) displace running work:
	// while every slot is busy and Preempt.CanPreempt(), the Runner pulls
	// from the preempting sources whenever one's doorbell rings (and every
	// MultiSourceWait); a message it finds calls Preempt.Preempt() and runs
	// in the slot the preempted work gives up.
	Preempt     Preemptor
	PreemptFrom []int
	// Steal, when set, is asked after a pull on every source found nothing
	// while slots were free: a consumer it returns (another replica's queue)
	// is fetched from once, for one message. nil: nothing to steal now.
	Steal func(ctx context.Context) jetstream.Consumer
}

// chain is Handler wrapped in the Runner's middleware (see Runner), with
// dead letters going to dl (the Publisher, but for tests).
func (r *Runner) chain(dl deadLetterer) Handler {
	mw := []Middleware{
		Tracing(r.Name),
		Acker(r.Log.With("consumer", r.Name)),
		Recover(),
		InProgress(r.AckWait / 3),
		DeadLetter(dl, r.Name, r.MaxDeliver),
		GiveUp(r.MaxDeliver, r.GiveUp),
		Recover(),
	}
	return Chain(r.Handler, append(mw, r.Middleware...)...)
}

// Run pulls and handles until ctx ends, then shuts down: it pulls nothing
// more, naks a message it took but had not started, and waits (up to
// StopTimeout) for in-flight handlers, then cancels their context, so the
// Acker naks what they hand back. Nothing it took is dropped.
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
	// hctx is the handlers' context: it outlives ctx by StopTimeout, and
	// tells the middleware when ctx ended (stopping).
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()
	stop := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(r.StopTimeout, hcancel)
		context.AfterFunc(hctx, func() { t.Stop() })
	})
	defer stop()
	mctx := withStopping(hctx, ctx.Done())
	h := r.chain(r.Publisher)

	slots := make(chan struct{}, r.Slots)
	var wg sync.WaitGroup
	defer wg.Wait()
	release := func(n int) { releaseN(slots, n) }
	if r.Limit != nil {
		lim := &limiter{slots: slots, cap: r.Slots, limit: r.Limit}
		lim.adjust() // before any pull
		release = lim.release
		done := make(chan struct{})
		defer func() { <-done }()
		go func() {
			defer close(done)
			lim.follow(ctx)
		}()
	}
	// dispatch runs m in a slot the caller already holds.
	dispatch := func(m jetstream.Msg) {
		wg.Go(func() {
			defer release(1)
			_ = h(mctx, m) // settled by the Acker
		})
	}
	var ringSince time.Time // when the rings that have found nothing yet came
	for ctx.Err() == nil {
		if r.Ready != nil && !r.Ready() {
			sleepCtx(ctx, readyPoll)
			continue
		}
		if r.Preempt != nil && len(slots) == cap(slots) && r.Preempt.CanPreempt() {
			bell.clearMask()
			if !r.pullToPreempt(ctx, slots, dispatch) {
				bell.waitFirst(ctx, MultiSourceWait) // a high message, or look again
			}
			continue
		}
		if !r.acquire(ctx, slots, bell) {
			continue
		}
		free := 1
	more: // every free slot, without waiting: a limiter may take one meanwhile
		for free < r.Slots {
			select {
			case slots <- struct{}{}:
				free++
			default:
				break more
			}
		}
		if r.Ready != nil && !r.Ready() { // changed while waiting for a slot
			release(free)
			continue
		}
		rang := bell.take()
		got := r.pull(ctx, free, rang, dispatch) // the slots are already held
		if got == 0 && r.Steal != nil && ctx.Err() == nil {
			if src := r.Steal(ctx); src != nil {
				got = r.fetch(ctx, src, 1, 0, dispatch)
			}
		}
		release(free - got)
		// A ring can come before its message is stored where the consumer
		// sees it (the doorbell hears the publish, the stream stores it
		// after): one that found nothing is kept for another look, for up
		// to ringPatience; then it was another worker's message.
		switch {
		case got > 0 || rang == 0:
			ringSince = time.Time{}
		case ringSince.IsZero() || time.Since(ringSince) < ringPatience:
			if ringSince.IsZero() {
				ringSince = time.Now()
			}
			bell.keep(rang)
		default:
			ringSince = time.Time{}
		}
		if got == 0 {
			bell.wait(ctx, r.PullWait)
		}
	}
	return nil
}

// limiter keeps the slots above a Runner's Limit held, so no handler can
// take them: slots are interchangeable, so holding one is leaving a token
// in the channel. A slot given back while the limit wants more held is
// kept; free slots are taken every limitPoll.
type limiter struct {
	slots chan struct{}
	cap   int
	limit func() int

	mu   sync.Mutex
	held int
}

// want is how many slots should be held now.
func (l *limiter) want() int { return l.cap - min(max(l.limit(), 1), l.cap) }

// release gives back n slots a caller held, keeping those the limit wants
// held.
func (l *limiter) release(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	want := l.want()
	for range n {
		if l.held < want {
			l.held++
		} else {
			<-l.slots
		}
	}
}

// adjust takes free slots, or gives back held ones, until it holds what
// the limit wants (taking only free ones: one in use is kept when its
// handler gives it back).
func (l *limiter) adjust() {
	l.mu.Lock()
	defer l.mu.Unlock()
	want := l.want()
take:
	for l.held < want {
		select {
		case l.slots <- struct{}{}:
			l.held++
		default:
			break take
		}
	}
	for l.held > want {
		<-l.slots
		l.held--
	}
}

// follow adjusts every limitPoll until ctx ends, then gives back what it
// holds (slots handlers give back later may be kept: the Runner is done
// with the channel by then).
func (l *limiter) follow(ctx context.Context) {
	t := time.NewTicker(limitPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			l.mu.Lock()
			releaseN(l.slots, l.held)
			l.held = 0
			l.mu.Unlock()
			return
		case <-t.C:
			l.adjust()
		}
	}
}

// limitPoll is how often a Runner with a Limit asks it again.
const limitPoll = 10 * time.Millisecond

func releaseN(slots chan struct{}, n int) {
	for range n {
		<-slots
	}
}

// readyPoll is how often a Runner whose Ready reports false asks again.
const readyPoll = 10 * time.Millisecond
