// Package predictor is predictor-gw: it answers remaining-length prediction
// requests (request-reply on actloop.predict, schema.PredictRequest →
// schema.PredictReply) with one of internal/predict's backends.
//
// Every instance joins the queue group "predictor-gw", so each request goes
// to one of them. Requests run concurrently, at most MaxInFlight at once,
// each under the Timeout deadline; every request that carries a reply
// subject gets exactly one reply: a prediction, or Error saying why there is
// none (a bad request names the field; a backend error, a deadline or
// shutting down says so), and the caller falls back to fcfs for that
// trajectory. Nothing is retried here: a prediction is only useful now.
//
// With the history, learned and http backends the gateway also learns: the
// durable consumer "predictor-history" on ACTLOOP_RESULTS, shared by every
// instance, feeds each finished trajectory to the backend's Observe (the
// http backend keeps, for the siblings' progress it sends, what History
// keeps and which trajectories are still running). Delivery is at-least-once and Observe is idempotent per traj_id.
// Outcomes: observed, skipped (a fallback) → Ack; undecodable → dead-letter
// and Term; a Redis error → Nak with back-off, up to MaxDeliver deliveries,
// then Term (one observation lost).
package predictor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/predict"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/pkg/client"
	"github.com/actloop/actloop/pkg/schema"
)

// QueueGroup is the NATS queue group every instance answers in.
const QueueGroup = "predictor-gw"

// MaxInFlight bounds the requests one instance works on at once; a request
// that finds no free slot before its deadline gets an error reply.
const MaxInFlight = 64

// drainTimeout bounds the wait for the subscription's pending requests at
// shutdown.
const drainTimeout = 5 * time.Second

// Errors in replies.
var (
	// ErrBusy: every slot stayed taken until the request's deadline.
	ErrBusy = errors.New("predictor-gw busy: no free slot before the deadline")
	// ErrShuttingDown: the instance is stopping.
	ErrShuttingDown = errors.New("predictor-gw shutting down")
)

// Gateway answers actloop.predict.
type Gateway struct {
	cfg Config
	d   *service.Deps
	// backend, when set (tests), is used instead of the one cfg names.
	backend predict.Predictor
}

// New returns a Gateway; fields of cfg left at zero take their defaults.
// The backend is built, and cfg checked, by Run.
func New(cfg Config, d *service.Deps) *Gateway { return &Gateway{cfg: cfg.withDefaults(), d: d} }

// Run serves until ctx ends, then stops taking requests, answers the ones
// it holds and returns.
func (g *Gateway) Run(ctx context.Context) error {
	if err := g.cfg.validateOwn(); err != nil {
		return fmt.Errorf("predictor-gw settings: %w", err)
	}
	p, learner, closeBackend, err := g.build()
	if err != nil {
		return fmt.Errorf("predictor-gw: %w", err)
	}
	defer closeBackend()

	srv := &responder{p: p, timeout: g.cfg.Timeout, log: g.d.Log, slots: make(chan struct{}, MaxInFlight)}
	base := context.WithoutCancel(ctx) // in-flight requests finish under their own deadline
	sub, err := g.d.NC.QueueSubscribe(bus.SubjectPredict, QueueGroup, func(m *nats.Msg) {
		srv.dispatch(ctx, base, m)
	})
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", bus.SubjectPredict, err)
	}
	defer srv.closeAndWait()
	defer drain(sub, g.d.Log)

	eg, ectx := errgroup.WithContext(ctx)
	eg.Go(func() error { return service.Serve(ectx, g.cfg.Addr, g.Handler(), g.d.Log) })
	if learner != nil {
		r, err := g.historyRunner(ctx, learner)
		if err != nil {
			if ctx.Err() != nil {
				return nil // stopped while starting
			}
			return err
		}
		eg.Go(func() error { return r.Run(ectx) })
	}
	return eg.Wait()
}

// Handler serves /healthz, /readyz and /metrics.
func (g *Gateway) Handler() http.Handler { return service.HealthMux(g.d) }

// learner is a backend that learns from finished trajectories.
type learner interface {
	Observe(ctx context.Context, r schema.ResultHead) error
}

// build returns the backend cfg names (or the one set for tests), the
// same as a learner when it learns, and what closes the backend.
func (g *Gateway) build() (predict.Predictor, learner, func(), error) {
	if g.backend != nil {
		l, _ := g.backend.(learner)
		return g.backend, l, func() {}, nil
	}
	switch g.cfg.Backend {
	case BackendHTTP:
		src := predict.HTTPSources{Redis: g.d.Redis, History: predict.HistoryConfig{SeenTTL: g.d.Common.ResultsMaxAge}}
		if g.cfg.MessagesBytes > 0 {
			tmpl, err := g.cfg.Chat.Template()
			if err != nil {
				return nil, nil, nil, err
			}
			src.Store, src.Template, src.MessagesBytes = g.d.Store, tmpl, g.cfg.MessagesBytes
		}
		p, err := predict.NewHTTPWith(g.cfg.URL, g.cfg.Timeout, src)
		if err != nil {
			return nil, nil, nil, err
		}
		return p, p, func() { _ = p.Close() }, nil
	case BackendOracle:
		tmpl, err := g.cfg.Chat.Template()
		if err != nil {
			return nil, nil, nil, err
		}
		p := predict.NewOracle(g.d.Store, tmpl, g.cfg.OracleURL, g.cfg.Timeout)
		return p, nil, func() { _ = p.Close() }, nil
	case BackendLearned:
		h := predict.NewHistory(g.d.Redis, predict.HistoryConfig{SeenTTL: g.d.Common.ResultsMaxAge})
		l := predict.NewLearned(g.d.Redis, h, predict.LearnedConfig{SeenTTL: g.d.Common.ResultsMaxAge})
		return l, l, func() {}, nil
	default:
		h := predict.NewHistory(g.d.Redis, predict.HistoryConfig{SeenTTL: g.d.Common.ResultsMaxAge})
		return h, h, func() {}, nil
	}
}

// drain stops the subscription taking requests and waits, bounded, until
// the ones it holds have been handed to the callback.
func drain(sub *nats.Subscription, log *slog.Logger) {
	closed := sub.StatusChanged(nats.SubscriptionClosed)
	if err := sub.Drain(); err != nil {
		_ = sub.Unsubscribe()
		return
	}
	t := time.NewTimer(drainTimeout)
	defer t.Stop()
	select {
	case <-closed:
	case <-t.C:
		log.Warn("predict subscription did not drain in time", "subject", bus.SubjectPredict)
		_ = sub.Unsubscribe()
	}
}

// responder handles requests for one Run.
type responder struct {
	p       predict.Predictor
	timeout time.Duration
	log     *slog.Logger
	slots   chan struct{}

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// dispatch runs on the subscription's goroutine: it waits for a free slot
// (within the request's deadline) and hands the request to a goroutine of
// its own. ctx ends when the gateway stops; base carries its values only.
func (s *responder) dispatch(ctx, base context.Context, m *nats.Msg) {
	if ctx.Err() != nil {
		s.respond(m, errorReply(ErrShuttingDown))
		return
	}
	rctx, cancel := context.WithTimeout(base, s.timeout)
	if !s.acquire(ctx, rctx) {
		cancel()
		err := ErrBusy
		if ctx.Err() != nil {
			err = ErrShuttingDown
		}
		s.respond(m, errorReply(err))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		<-s.slots
		cancel()
		s.respond(m, errorReply(ErrShuttingDown))
		return
	}
	s.wg.Go(func() {
		defer func() { <-s.slots }()
		defer cancel()
		s.handle(rctx, m)
	})
}

// acquire takes a slot: a free one at once, else the first to free up
// before rctx's deadline or ctx's end.
func (s *responder) acquire(ctx, rctx context.Context) bool {
	select {
	case s.slots <- struct{}{}:
		return true
	default:
	}
	select {
	case s.slots <- struct{}{}:
		return true
	case <-rctx.Done():
		return false
	case <-ctx.Done():
		return false
	}
}

// closeAndWait refuses new requests and waits for those in flight.
func (s *responder) closeAndWait() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.wg.Wait()
}

func tracer() trace.Tracer { return otel.Tracer("github.com/actloop/actloop/internal/predictor") }

// handle answers one request exactly once: with the backend's answer, or
// with an error when it fails or ctx's deadline passes first (a backend
// that ignores its context still holds its slot until it returns).
func (s *responder) handle(ctx context.Context, m *nats.Msg) {
	ctx = otel.GetTextMapPropagator().Extract(ctx, client.HeaderCarrier(m.Header))
	ctx, span := tracer().Start(ctx, "predict", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("messaging.destination.name", m.Subject)))
	defer span.End()

	var once sync.Once
	answer := func(rep schema.PredictReply) { once.Do(func() { s.respond(m, rep) }) }
	stop := context.AfterFunc(ctx, func() {
		answer(errorReply(fmt.Errorf("no prediction within %v: %w", s.timeout, context.Cause(ctx))))
	})
	defer stop()

	rep, trajID, err := s.predict(ctx, m.Data)
	if trajID != "" {
		span.SetAttributes(attribute.String("traj_id", trajID))
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		s.log.Debug("no prediction", "traj_id", trajID, "error", err)
		answer(errorReply(err))
		return
	}
	span.SetAttributes(attribute.String("source", rep.Source))
	answer(rep)
}

// predict decodes a request and asks the backend; a panic is an error.
func (s *responder) predict(ctx context.Context, data []byte) (rep schema.PredictReply, trajID string, err error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("predictor panicked", "traj_id", trajID, "panic", p, "stack", string(debug.Stack()))
			rep, err = schema.PredictReply{}, fmt.Errorf("predictor failed: panic: %v", p)
		}
	}()
	req, err := schema.Decode[schema.PredictRequest](data)
	if err != nil {
		return schema.PredictReply{}, "", fmt.Errorf("bad request: %w", err)
	}
	rep, err = s.p.Predict(ctx, req)
	if err != nil {
		return schema.PredictReply{}, req.TrajID, err
	}
	rep.V, rep.Error = schema.Version, ""
	if err := rep.Validate(); err != nil {
		return schema.PredictReply{}, req.TrajID, fmt.Errorf("backend answered an invalid prediction: %w", err)
	}
	return rep, req.TrajID, nil
}

func errorReply(err error) schema.PredictReply {
	return schema.PredictReply{V: schema.Version, Error: err.Error()}
}

// respond sends rep as the reply to m; a request without a reply subject
// gets none.
func (s *responder) respond(m *nats.Msg, rep schema.PredictReply) {
	if m.Reply == "" {
		s.log.Debug("predict request without a reply subject", "subject", m.Subject)
		return
	}
	b, err := json.Marshal(rep)
	if err != nil { // a NaN or infinity from a backend
		b, _ = json.Marshal(errorReply(fmt.Errorf("backend answered an unencodable prediction: %w", err)))
	}
	if err := m.Respond(b); err != nil {
		s.log.Debug("predict reply failed", "error", err)
	}
}
