package bus

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/actloop/actloop/internal/telemetry"
	"github.com/actloop/actloop/pkg/client"
)

// Tracing runs the chain inside it in one consumer span named name per
// message, a child of the trace context in the message's headers (the
// publisher's), with room for log attributes (telemetry.WithLogAttrs) that
// the handler fills in (traj_id, seq), so every log line about the message
// carries them and the trace id. An error the chain returns is recorded on
// the span.
func Tracing(name string) Middleware {
	return func(next Handler) Handler {
		return func(ctx context.Context, m jetstream.Msg) error {
			ctx = otel.GetTextMapPropagator().Extract(ctx, client.HeaderCarrier(m.Headers()))
			ctx, span := tracer().Start(ctx, name, trace.WithSpanKind(trace.SpanKindConsumer),
				trace.WithAttributes(attribute.String("messaging.destination.name", m.Subject())))
			defer span.End()
			err := next(telemetry.WithLogAttrs(ctx), m)
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			return err
		}
	}
}

// tracer is looked up per use so that a tracer provider installed after
// start-up (or replaced in tests) takes effect.
func tracer() trace.Tracer { return otel.Tracer("github.com/actloop/actloop/internal/bus") }
