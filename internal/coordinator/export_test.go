package coordinator

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
)

// NewTerm is newTerm, for the tests of package coordinator_test.
var NewTerm = newTerm

// SetSamplesInfo makes the status's look at the samples consumer (its
// Info) call info instead: a source that fails, for the tests of package
// coordinator_test. Call it before the calls that read the status, from
// the goroutine that makes them.
func (c *Coordinator) SetSamplesInfo(info func(context.Context) (*jetstream.ConsumerInfo, error)) {
	c.samples = samplesInfo{Consumer: c.samples, info: info}
}

type samplesInfo struct {
	jetstream.Consumer
	info func(context.Context) (*jetstream.ConsumerInfo, error)
}

func (s samplesInfo) Info(ctx context.Context) (*jetstream.ConsumerInfo, error) { return s.info(ctx) }

// RegisterMetrics registers the coordinator's metrics, as Run does, until
// the returned func.
func (c *Coordinator) RegisterMetrics() func() { return c.registerMetrics().Close }
