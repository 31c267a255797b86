package bus

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
)

// Handler handles one message. What it returns decides the message's ack:
// see Acker for the mapping.
type Handler func(ctx context.Context, m jetstream.Msg) error

// Middleware wraps a Handler with one cross-cutting concern (tracing,
// acking, dead-lettering, ...), as watermill's router middleware does.
type Middleware func(Handler) Handler

// Chain wraps h in mw, the first outermost: Chain(h, a, b) is a(b(h)).
func Chain(h Handler, mw ...Middleware) Handler {
	for i := len(mw) - 1; i >= 0; i-- {
		h = mw[i](h)
	}
	return h
}

// stoppingKey is the context key of the Runner's stop signal.
type stoppingKey struct{}

// withStopping returns ctx marked as the context of a message whose Runner
// begins to shut down when stop is closed.
func withStopping(ctx context.Context, stop <-chan struct{}) context.Context {
	return context.WithValue(ctx, stoppingKey{}, stop)
}

// stopping reports whether the Runner that delivered the message handled
// under ctx has begun to shut down (it pulls nothing more, and a failure
// now is handed back at once rather than retried later or given up on).
// Outside a Runner it reports false.
func stopping(ctx context.Context) bool {
	stop, _ := ctx.Value(stoppingKey{}).(<-chan struct{})
	if stop == nil {
		return false
	}
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// delivered is how many times m has been delivered (1 when its metadata
// cannot be read).
func delivered(m jetstream.Msg) uint64 {
	if meta, err := m.Metadata(); err == nil && meta != nil && meta.NumDelivered > 0 {
		return meta.NumDelivered
	}
	return 1
}
