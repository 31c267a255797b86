package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel"
)

// PublishAttempt bounds one attempt of a publish: an acknowledgement lost
// with a stream leader that died (or the server the client was on) is not
// waited for longer; the publish is sent again under the same message id,
// so the stream stores it once.
const PublishAttempt = 3 * time.Second

// Publish publishes data on subject with Nats-Msg-Id msgID and the trace
// context of ctx (a W3C traceparent header), and returns once the stream
// has stored it. It tries again, under the same message id, while the
// stream does not answer (a leader election, a restarting server), until
// ctx ends or, when ctx has no deadline, for 30 s: the stream's duplicate
// window keeps a retry of a publish that did land from being stored twice.
// It is how Submit publishes, and how actloop's services do. opts add to
// the publish (an expected last sequence, say).
func Publish(ctx context.Context, js jetstream.JetStream, subject, msgID string, data []byte, opts ...jetstream.PublishOpt) error {
	_, _, err := publish(ctx, js, subject, msgID, data, opts...)
	return err
}

// publish is Publish, returning the stream's acknowledgement and whether
// it answered an attempt made again (so a duplicate may be the first
// attempt's own message).
func publish(ctx context.Context, js jetstream.JetStream, subject, msgID string, data []byte, opts ...jetstream.PublishOpt) (*jetstream.PubAck, bool, error) {
	m := nats.NewMsg(subject)
	m.Data = data
	otel.GetTextMapPropagator().Inject(ctx, HeaderCarrier(m.Header))
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	wait := 20 * time.Millisecond
	for retried := false; ; retried = true {
		actx, cancel := context.WithTimeout(ctx, PublishAttempt)
		ack, err := js.PublishMsg(actx, m, append([]jetstream.PublishOpt{jetstream.WithMsgID(msgID)}, opts...)...)
		cancel()
		if err == nil {
			return ack, retried, nil
		}
		if ctx.Err() != nil || !Unanswered(err) {
			return nil, retried, fmt.Errorf("publish %s: %w", subject, err)
		}
		select {
		case <-ctx.Done():
			return nil, retried, fmt.Errorf("publish %s: %w", subject, err)
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// jsClusterNotAvailable is nats-server's JSClusterNotAvailErr, "JetStream
// system temporarily unavailable" (no constant for it in nats.go).
const jsClusterNotAvailable jetstream.ErrorCode = 10008

// Unanswered reports an error of a JetStream that did not answer (yet): a
// stream or cluster electing leaders, a node catching up; as opposed to
// one that refused. Worth trying again.
func Unanswered(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		(errors.As(err, &apiErr) && apiErr.ErrorCode == jsClusterNotAvailable)
}

// HeaderCarrier adapts nats.Header to OpenTelemetry's TextMapCarrier
// without canonicalising keys, so "traceparent" stays lower-case for
// readers in other languages (propagation.HeaderCarrier would write
// "Traceparent").
type HeaderCarrier nats.Header

// Get returns the first value of key.
func (h HeaderCarrier) Get(key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set sets key to value.
func (h HeaderCarrier) Set(key, value string) { h[key] = []string{value} }

// Keys lists the keys.
func (h HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

// PublishFirst is Publish on a subject that holds one message ever (a
// trajectory's result, a group's completion): the stream stores data only
// if the subject has no message yet (Nats-Expected-Last-Subject-Sequence:
// 0). It reports whether this call stored it; false with a nil error means
// the subject already had its message, which is kept.
//
// The subject, not msgID, decides: a stream that answers msgID as a
// duplicate (or as one in process) has stored nothing for this call, and
// the message it remembers may be gone (the stream keeps ids for its
// duplicate window, not their messages) or may never be stored (a
// proposal in process can be lost). So PublishFirst then publishes again
// under an id of this attempt's own, which the stream refuses if the
// subject has its message (or, an error to try again on, has one in
// process) and stores if not: a message lost within the window is
// published again, and never twice.
func PublishFirst(ctx context.Context, js jetstream.JetStream, subject, msgID string, data []byte) (bool, error) {
	first := jetstream.WithExpectLastSequencePerSubject(0)
	ack, retried, err := publish(ctx, js, subject, msgID, data, first)
	switch {
	case hasMessage(err):
		return false, nil
	case err == nil && !ack.Duplicate:
		return true, nil
	case err != nil && !inProcess(err):
		return false, err
	}
	_, _, err = publish(ctx, js, subject, msgID+":again-"+nuid.Next(), data, first)
	if hasMessage(err) {
		// Held: stored by this call when the duplicate was this call's own
		// first attempt, whose acknowledgement was lost.
		return retried, nil
	}
	return err == nil, err
}

// hasMessage reports the stream's refusal of a publish expecting an empty
// subject: the subject has its message.
func hasMessage(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// jsDuplicateInProcess is nats-server's JSStreamDuplicateMessageConflict,
// "duplicate message id is in process": a publish under the id is
// proposed and not yet stored (no constant for it in nats.go). A proposal
// lost with its leader leaves the id so for the duplicate window.
const jsDuplicateInProcess jetstream.ErrorCode = 10158

// inProcess reports the stream's answer that a publish under the same id
// is in process.
func inProcess(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jsDuplicateInProcess
}
