package telemetry

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// LogHandler adds to each record logged with a context the trace and span
// ids of the span in it (trace_id, span_id) and the attributes AddLogAttrs
// put in it, so every line about a trajectory's step carries the
// trajectory's id, its seq and its trace.
type LogHandler struct{ slog.Handler }

// Handle implements slog.Handler.
func (h LogHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	if la, ok := ctx.Value(logAttrsKey{}).(*logAttrs); ok {
		has := map[string]bool{}
		r.Attrs(func(a slog.Attr) bool {
			has[a.Key] = true
			return true
		})
		la.mu.Lock()
		for _, a := range la.attrs {
			if !has[a.Key] {
				r.AddAttrs(a)
			}
		}
		la.mu.Unlock()
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h LogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return LogHandler{h.Handler.WithAttrs(as)}
}

// WithGroup implements slog.Handler.
func (h LogHandler) WithGroup(name string) slog.Handler { return LogHandler{h.Handler.WithGroup(name)} }

type logAttrsKey struct{}

type logAttrs struct {
	mu    sync.Mutex
	attrs []slog.Attr
}

// WithLogAttrs returns ctx with room for attributes that AddLogAttrs adds
// later, deeper in the call (a message's handler naming the trajectory it
// decoded), and that every record logged with ctx then carries.
func WithLogAttrs(ctx context.Context) context.Context {
	return context.WithValue(ctx, logAttrsKey{}, &logAttrs{})
}

// AddLogAttrs adds key-value pairs (as slog's args) to the room
// WithLogAttrs made in ctx; without one it does nothing.
func AddLogAttrs(ctx context.Context, args ...any) {
	la, ok := ctx.Value(logAttrsKey{}).(*logAttrs)
	if !ok {
		return
	}
	r := slog.NewRecord(time.Time{}, 0, "", 0)
	r.Add(args...)
	la.mu.Lock()
	defer la.mu.Unlock()
	r.Attrs(func(a slog.Attr) bool {
		la.attrs = append(la.attrs, a)
		return true
	})
}
