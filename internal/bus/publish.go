package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/actloop/actloop/pkg/client"
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

// PublishRaw publishes data as it is (client.Publish: retried under the
// same Nats-Msg-Id while the stream does not answer; one is made when msgID
// is empty).
func (p *Publisher) PublishRaw(ctx context.Context, subject, msgID string, data []byte) error {
	if msgID == "" {
		msgID = nuid.Next()
	}
	return client.Publish(ctx, p.js, subject, msgID, data)
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
