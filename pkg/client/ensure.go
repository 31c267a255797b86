package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/pkg/schema"
)

// SubjectConsumerCreate is where a trainer asks the coordinator to create,
// or take up again, a consumer of results or groups of its own
// (ConsumerRequest, answered with a ConsumerReply). A trainer may not
// create consumers itself: permissions cannot look into a create request,
// and one with a deliver subject would have the server publish the stream
// on any subject of the account, the services' work streams included.
const SubjectConsumerCreate = "actloop.consumers.create"

// ConsumerRequest asks for the durable pull consumer Name of Subject
// (schema.SubjectResults or schema.SubjectGroups) on the results stream,
// made as ConsumerConfig makes it.
type ConsumerRequest struct {
	V       int    `json:"v"`
	Name    string `json:"name"`
	Subject string `json:"subject"`
}

// ConsumerReply answers a ConsumerRequest: Error is empty when the
// consumer exists as asked.
type ConsumerReply struct {
	V     int    `json:"v"`
	Error string `json:"error,omitempty"`
}

// Validate reports what is wrong with r: a subject other than results' or
// groups', a name that is not a consumer name, or a service's consumer.
func (r ConsumerRequest) Validate() error {
	var errs []error
	if r.Subject != schema.SubjectResults && r.Subject != schema.SubjectGroups {
		errs = append(errs, fmt.Errorf("subject %q: want %s or %s", r.Subject, schema.SubjectResults, schema.SubjectGroups))
	}
	if r.Name == "" || strings.ContainsAny(r.Name, ".*> \t\r\n/\\") {
		errs = append(errs, fmt.Errorf("consumer name %q: want a name without '.', '*', '>', '/', '\\' or whitespace", r.Name))
	}
	if schema.ServiceConsumer(r.Name) {
		errs = append(errs, fmt.Errorf("consumer %s: a service's consumer of %s; name one of your own", r.Name, schema.StreamResults))
	}
	return errors.Join(errs...)
}

// EnsureConsumer creates, or takes up again, the durable consumer name of
// subject on the results stream: it asks the coordinator
// (SubjectConsumerCreate) and looks the consumer up. With no coordinator
// listening it creates the consumer itself, which a user allowed to (not
// the trainer's) may.
func EnsureConsumer(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, name, subject string) (jetstream.Consumer, error) {
	req := ConsumerRequest{V: 1, Name: name, Subject: subject}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	m, err := nc.RequestWithContext(ctx, SubjectConsumerCreate, b)
	if errors.Is(err, nats.ErrNoResponders) {
		return js.CreateOrUpdateConsumer(ctx, schema.StreamResults, ConsumerConfig(name, subject))
	}
	if err != nil {
		return nil, fmt.Errorf("ask the coordinator on %s: %w", SubjectConsumerCreate, err)
	}
	var reply ConsumerReply
	if err := json.Unmarshal(m.Data, &reply); err != nil {
		return nil, fmt.Errorf("the coordinator's answer on %s: %w", SubjectConsumerCreate, err)
	}
	if reply.Error != "" {
		return nil, fmt.Errorf("the coordinator: %s", reply.Error)
	}
	return js.Consumer(ctx, schema.StreamResults, name)
}
