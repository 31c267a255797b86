package bus

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
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

// PublishFirst publishes data on a subject that holds one message ever
// (client.PublishFirst): it reports whether this call stored it, false
// when the subject already had its message.
func (p *Publisher) PublishFirst(ctx context.Context, subject, msgID string, data []byte) (bool, error) {
	return client.PublishFirst(ctx, p.js, subject, msgID, data)
}

// maxReason bounds a dead letter's reason (an error can quote its input).
const maxReason = 4 << 10

// MaxPayload is the largest message the NATS server takes (its
// max_payload).
func (p *Publisher) MaxPayload() int64 { return p.js.Conn().MaxPayload() }

// DeadLetter publishes the original bytes of a message no consumer can take,
// with the reason, on actloop.dlq. The envelope always fits the server's
// max_payload: an original too large for it (base64 in JSON grows by a
// third) is cut, and the envelope keeps its size and SHA-256.
func (p *Publisher) DeadLetter(ctx context.Context, consumer string, m jetstream.Msg, reason string) error {
	return p.deadLetter(ctx, consumer, m.Subject(), m.Headers(), m.Data(), reason, false)
}

// DeadLetterCore is DeadLetter for a message of core NATS that every
// subscriber gets (actloop.cancel): its dead letter's message id is the
// message's subject and SHA-256, so the subscribers' copies make one dead
// letter within the stream's duplicate window.
func (p *Publisher) DeadLetterCore(ctx context.Context, consumer string, m *nats.Msg, reason string) error {
	return p.deadLetter(ctx, consumer, m.Subject, m.Header, m.Data, reason, true)
}

// deadLetter publishes the dead letter; byContent names it by the
// original's subject and digest, else it gets a message id of its own.
func (p *Publisher) deadLetter(ctx context.Context, consumer, subject string, headers nats.Header, data []byte, reason string, byContent bool) error {
	sum := sha256.Sum256(data)
	msgID := ""
	if byContent {
		msgID = "dlq:" + subject + ":" + hex.EncodeToString(sum[:])
	}
	if len(reason) > maxReason {
		reason = reason[:maxReason] + "…"
	}
	e := schema.DLQEntry{V: schema.Version, Subject: subject, Consumer: consumer, Reason: reason,
		Size: len(data), SHA256: hex.EncodeToString(sum[:]), Headers: headers, At: time.Now().UTC()}
	head, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("dead letter: %w", err)
	}
	// What the data may take: the payload limit less the rest of the
	// envelope and room for the publish's own headers, in base64.
	room := max((int(p.MaxPayload())-len(head)-dlqHeaderRoom)/4*3, 0)
	if e.Data = data; len(data) > room {
		e.Data, e.Truncated = data[:room], true
	}
	if err := p.Publish(ctx, schema.SubjectDLQ, msgID, e); err != nil {
		return err
	}
	p.deadLettered.Add(1)
	return nil
}

// dlqHeaderRoom is what a dead letter leaves for the NATS headers of its
// publish (message id, trace context) and the protocol line.
const dlqHeaderRoom = 1 << 10

// DeadLettered counts the messages DeadLetter has published.
func (p *Publisher) DeadLettered() int64 { return p.deadLettered.Load() }
