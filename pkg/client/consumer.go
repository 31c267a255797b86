package client

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/pkg/schema"
)

// AckWait is how long a delivery may go unacknowledged before the server
// delivers it again (Delivery.InProgress resets the clock).
const AckWait = time.Minute

// Consumer is a durable consumer on the results stream: one name, one
// position, kept by the server across connections.
type Consumer struct {
	c      jetstream.Consumer
	name   string
	seen   *dedupe
	bodies *Bodies
	prefix string // a run's consumer: the subjects it yields (RunSubjectPrefix); "" yields all
}

// Results creates, or takes up again, the durable consumer name of
// finished trajectories (schema.Result on actloop.results.<traj_id>), starting at the
// oldest result the stream keeps.
func (c *Client) Results(ctx context.Context, name string) (*Consumer, error) {
	return c.consumer(ctx, name, schema.SubjectResults, "", trajKey)
}

// Groups creates, or takes up again, the durable consumer name of
// completed groups (schema.GroupDone on actloop.groups.<group_id>). Give it a name of
// its own: a consumer's name is its position.
func (c *Client) Groups(ctx context.Context, name string) (*Consumer, error) {
	return c.consumer(ctx, name, schema.SubjectGroups, "", groupKey)
}

// RunResults is Results for one run (RunPattern): the consumer records
// its run, so its name cannot be taken up for another (ErrConsumerConflict),
// and Fetch yields only the results of ids that start with run + ".",
// acknowledging the others unseen (the run's samples are submitted with
// such ids: "<run>.<id>"). Give every run a consumer name of its own.
func (c *Client) RunResults(ctx context.Context, name, run string) (*Consumer, error) {
	return c.consumer(ctx, name, schema.SubjectResults, run, trajKey)
}

// RunGroups is Groups for one run, as RunResults is Results.
func (c *Client) RunGroups(ctx context.Context, name, run string) (*Consumer, error) {
	return c.consumer(ctx, name, schema.SubjectGroups, run, groupKey)
}

// ConsumerInactive is how long a trainer's consumer may go without a pull
// before the server deletes it, by default (the coordinator's
// ACTLOOP_TRAINER_CONSUMER_INACTIVE sets it for the consumers it makes):
// a trainer cannot delete consumers, and names used once would pile up.
const ConsumerInactive = 7 * 24 * time.Hour

// ConsumerConfig is the durable consumer name of subject's messages
// (schema.SubjectResults, schema.SubjectGroups) on the results stream, as
// Results and Groups make it: explicit acks, from the oldest message kept,
// AckWait, deleted by the server after ConsumerInactive without a pull.
func ConsumerConfig(name, subject string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{Durable: name, AckPolicy: jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy, FilterSubject: subject, AckWait: AckWait,
		InactiveThreshold: ConsumerInactive}
}

// consumer makes the consumer name of subject, of run when not "".
func (c *Client) consumer(ctx context.Context, name, subject, run string, key func([]byte) string) (*Consumer, error) {
	if schema.ServiceConsumer(name) {
		return nil, fmt.Errorf("consumer %s: a service's consumer of %s; name one of your own", name, schema.StreamResults)
	}
	cons, err := EnsureConsumerRequest(ctx, c.nc, c.js, ConsumerRequest{Name: name, Subject: subject, Run: run})
	if err != nil {
		return nil, fmt.Errorf("consumer %s of %s: %w", name, subject, err)
	}
	prefix := ""
	if run != "" {
		prefix = RunSubjectPrefix(subject, run)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := c.seen[name+"\x00"+subject]
	if seen == nil {
		seen = newDedupe(key)
		c.seen[name+"\x00"+subject] = seen
	}
	return &Consumer{c: cons, name: name, seen: seen, bodies: c.bodies, prefix: prefix}, nil
}

// Fetch pulls up to batch deliveries, yielding each as it arrives, until
// that many have come or wait has passed. A result whose traj_id (a group
// whose group_id) this Client has acknowledged on this consumer name
// before is a late duplicate: it is acknowledged and not yielded; one
// whose twin was yielded and is not yet settled is handed back for later.
// So within one Client's life a trainer sees each trajectory once. A failed pull, or ctx ending, yields a nil
// Delivery and the error, last. Deliveries left when the loop stops early
// are nak'd (delivered again at once) before Fetch returns, which may take
// until wait has passed; those pending when ctx ends are delivered again
// after AckWait.
func (c *Consumer) Fetch(ctx context.Context, batch int, wait time.Duration) iter.Seq2[*Delivery, error] {
	return func(yield func(*Delivery, error) bool) {
		fctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		b, err := c.c.Fetch(batch, jetstream.FetchContext(fctx))
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			yield(nil, fmt.Errorf("fetch from %s: %w", c.name, err))
			return
		}
		msgs := b.Messages()
		for m := range msgs {
			if ctx.Err() != nil {
				break // the rest come again after AckWait
			}
			if !strings.HasPrefix(m.Subject(), c.prefix) {
				_ = m.Ack() // another run's, on this run's consumer
				continue
			}
			key := c.seen.key(m.Data())
			switch c.seen.take(key, time.Now()) {
			case duplicate:
				_ = m.Ack()
				continue
			case twin:
				_ = m.NakWithDelay(AckWait / 4)
				continue
			}
			if !yield(&Delivery{m: m, seen: c.seen, key: key, bodies: c.bodies}, nil) {
				for m := range msgs {
					_ = m.Nak()
				}
				return
			}
		}
		switch err := b.Error(); {
		case ctx.Err() != nil:
			yield(nil, fmt.Errorf("fetch from %s: %w", c.name, ctx.Err()))
		case err != nil && !errors.Is(err, context.DeadlineExceeded): // wait has passed
			yield(nil, fmt.Errorf("fetch from %s: %w", c.name, err))
		}
	}
}

// Backlog is what a consumer has yet to finish.
type Backlog struct {
	Pending uint64 // in the stream, not yet delivered to it
	Unacked uint64 // delivered, not yet acknowledged
}

// Backlog asks the server how far the consumer is behind.
func (c *Consumer) Backlog(ctx context.Context) (Backlog, error) {
	info, err := c.c.Info(ctx)
	if err != nil {
		return Backlog{}, fmt.Errorf("consumer %s: %w", c.name, err)
	}
	return Backlog{Pending: info.NumPending, Unacked: uint64(info.NumAckPending)}, nil
}

// Delivery is one message from a Consumer. Acknowledge it (Ack), hand it
// back (Nak), or take longer (InProgress) within AckWait.
type Delivery struct {
	m      jetstream.Msg
	seen   *dedupe
	key    string
	bodies *Bodies
}

// Subject is the subject it was published on.
func (d *Delivery) Subject() string { return d.m.Subject() }

// Data is the message as published: one JSON object (for a result, its
// head).
func (d *Delivery) Data() []byte { return d.m.Data() }

// Head decodes and validates the message as a result's head: everything
// but the token arrays, messages, diff, tests and metadata.
func (d *Delivery) Head() (schema.ResultHead, error) {
	return schema.Decode[schema.ResultHead](d.m.Data())
}

// Result decodes the message as a result's head and fetches and verifies
// its body (see Bodies.Result). A body that is gone (ErrBodyGone) or does
// not match (schema.ErrBodyMismatch) will not come back: Term such a
// delivery.
func (d *Delivery) Result(ctx context.Context) (schema.Result, error) {
	return d.bodies.Decode(ctx, d.m.Data())
}

// Group decodes and validates the message as a completed group.
func (d *Delivery) Group() (schema.GroupDone, error) {
	return schema.Decode[schema.GroupDone](d.m.Data())
}

// Ack acknowledges the delivery and waits for the server to confirm it:
// once Ack returns nil this consumer does not see the message again.
func (d *Delivery) Ack(ctx context.Context) error {
	if err := d.m.DoubleAck(ctx); err != nil {
		return fmt.Errorf("ack: %w", err)
	}
	d.seen.settled(d.key, true)
	return nil
}

// Nak hands the delivery back to be delivered again at once.
func (d *Delivery) Nak() error {
	d.seen.settled(d.key, false)
	return d.m.Nak()
}

// InProgress tells the server the delivery is still being worked on,
// restarting its AckWait.
func (d *Delivery) InProgress() error { return d.m.InProgress() }

// Term tells the server never to deliver the message again to this
// consumer (one that cannot be decoded, say).
func (d *Delivery) Term() error {
	d.seen.settled(d.key, true) // never again: as good as acknowledged
	return d.m.Term()
}
