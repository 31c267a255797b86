package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/pkg/client"
)

// ServeTrainerConsumers creates the trainers' consumers of results and
// groups, asked on client.SubjectConsumerCreate, until ctx ends: each a
// durable pull consumer as client.ConsumerConfig makes it, never one with
// a deliver subject, of a name the trainer chose but the services'. The
// trainer's user may not create consumers itself (docs/security.md):
// permissions cannot look into a create request, and a push consumer's
// deliveries would land on any subject of the account (issue 31).
// Creating is idempotent, so any coordinator of the queue group may
// answer. Each consumer is deleted by the server after
// client.ConsumerInactive without a pull. A run's consumer
// (client.ConsumerRequest.Run) records its run (client.MetaRun); the
// trainer's side refuses a name in use for another subject or run before
// it asks (client.EnsureConsumerRequest), since this user may not look
// consumers up.
func ServeTrainerConsumers(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, log *slog.Logger) error {
	return serveTrainerConsumers(ctx, nc, js, log, client.ConsumerInactive)
}

// serveTrainerConsumers is ServeTrainerConsumers with the consumers'
// inactive threshold (ACTLOOP_TRAINER_CONSUMER_INACTIVE).
func serveTrainerConsumers(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, log *slog.Logger, inactive time.Duration) error {
	sub, err := nc.QueueSubscribe(client.SubjectConsumerCreate, "coordinator", func(m *nats.Msg) {
		reply := client.ConsumerReply{V: 1}
		if err := createTrainerConsumer(ctx, js, m.Data, inactive); err != nil {
			reply.Error = err.Error()
			log.Warn("trainer consumer refused", "subject", m.Subject, "error", err)
		}
		b, _ := json.Marshal(reply)
		_ = m.Respond(b)
	})
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", client.SubjectConsumerCreate, err)
	}
	<-ctx.Done()
	return sub.Unsubscribe()
}

func createTrainerConsumer(ctx context.Context, js jetstream.JetStream, data []byte, inactive time.Duration) error {
	var req client.ConsumerRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return fmt.Errorf("decode consumer request: %w", err)
	}
	if err := req.Validate(); err != nil {
		return err
	}
	if _, err := client.CreateConsumer(ctx, js, req, inactive); err != nil {
		return fmt.Errorf("consumer %s of %s: %w", req.Name, req.Subject, err)
	}
	return nil
}
