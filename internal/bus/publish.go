package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel"

	"github.com/actloop/actloop/pkg/schema"
)

// Publisher publishes JSON messages to JetStream and waits for the stream's
// acknowledgement.
type Publisher struct {
	js           jetstream.JetStream
	deadLettered atomic.Int64
}

// NewPublisher returns a Publisher over js.
func NewPublisher(js jetstream.JetStream) *Publisher { return &Publisher{js: js} }

// Publish marshals v and publishes it on subject with Nats-Msg-Id msgID (none
// when empty) and the trace context of ctx. It returns once the stream has
// stored the message.
func (p *Publisher) Publish(ctx context.Context, subject, msgID string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("publish %s: %w", subject, err)
	}
	return p.PublishRaw(ctx, subject, msgID, data)
}

// PublishAttempt bounds one attempt of a publish: an acknowledgement lost
// with a stream leader that died (or the server the client was on) is not
// waited for longer; the publish is sent again under the same message id,
// so the stream stores it once.
const PublishAttempt = 3 * time.Second

// PublishRaw publishes data as it is. It tries again, under the same
// Nats-Msg-Id (one is made when msgID is empty), while the stream does not
// answer (a leader election, a restarting server), until ctx ends or, when
// ctx has no deadline, for 30 s.
func (p *Publisher) PublishRaw(ctx context.Context, subject, msgID string, data []byte) error {
	m := nats.NewMsg(subject)
	m.Data = data
	otel.GetTextMapPropagator().Inject(ctx, HeaderCarrier(m.Header))
	if msgID == "" {
		msgID = nuid.Next()
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	wait := 20 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, PublishAttempt)
		_, err := p.js.PublishMsg(actx, m, jetstream.WithMsgID(msgID))
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || !unanswered(err) {
			return fmt.Errorf("publish %s: %w", subject, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("publish %s: %w", subject, err)
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// unanswered reports a publish whose stream did not answer: worth sending
// again.
func unanswered(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)
}

// DeadLetter publishes the original bytes of a message no consumer can take,
// with the reason, on actloop.dlq.
func (p *Publisher) DeadLetter(ctx context.Context, consumer string, m jetstream.Msg, reason string) error {
	e := schema.DLQEntry{V: schema.Version, Subject: m.Subject(), Consumer: consumer, Reason: reason,
		Data: m.Data(), Headers: m.Headers(), At: time.Now().UTC()}
	if err := p.Publish(ctx, schema.SubjectDLQ, "", e); err != nil {
		return err
	}
	p.deadLettered.Add(1)
	return nil
}

// DeadLettered counts the messages DeadLetter has published.
func (p *Publisher) DeadLettered() int64 { return p.deadLettered.Load() }

// HeaderCarrier adapts nats.Header to OpenTelemetry's TextMapCarrier without
// canonicalising keys, so "traceparent" stays lower-case for non-Go readers.
type HeaderCarrier nats.Header

// Get implements propagation.TextMapCarrier.
func (h HeaderCarrier) Get(key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set implements propagation.TextMapCarrier.
func (h HeaderCarrier) Set(key, value string) { h[key] = []string{value} }

// Keys implements propagation.TextMapCarrier.
func (h HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}
