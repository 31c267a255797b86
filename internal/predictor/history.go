package predictor

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/pkg/schema"
)

// HistoryConsumer is the durable consumer on ACTLOOP_RESULTS that feeds the
// history backend; every instance shares it, so each result goes to one.
const HistoryConsumer = schema.ConsumerPredictorHistory

// historySlots is how many results one instance observes at once.
const historySlots = 8

// historyRunner returns the Runner that observes finished trajectories.
func (g *Gateway) historyRunner(ctx context.Context, h learner) (*bus.Runner, error) {
	c, err := g.d.Topo.Consumer(ctx, g.d.JS, schema.StreamResults, HistoryConsumer, schema.SubjectResults)
	if err != nil {
		return nil, err
	}
	cm := g.d.Common
	pullWait, stop := cm.PullWait, cm.ShutdownTimeout
	if pullWait <= 0 {
		pullWait = time.Second
	}
	if stop <= 0 {
		stop = 5 * time.Second
	}
	return &bus.Runner{
		Name: HistoryConsumer, Sources: []jetstream.Consumer{c}, Slots: historySlots,
		Handler: observe(h), Publisher: g.d.Pub, Log: g.d.Log,
		AckWait: g.d.Topo.AckWait, MaxDeliver: g.d.Topo.MaxDeliver, PullWait: pullWait, StopTimeout: stop,
	}, nil
}

// observe is the handler of HistoryConsumer: see the package doc for how
// each outcome is acked.
func observe(h learner) bus.Handler {
	return func(ctx context.Context, m jetstream.Msg) error {
		r, err := schema.Decode[schema.ResultHead](m.Data())
		if err != nil {
			return bus.Malformed(fmt.Errorf("decode result: %w", err))
		}
		if r.GenTokens < 0 || r.Turns < 0 {
			return bus.Malformed(fmt.Errorf("result %s: negative gen_tokens %d or turns %d", r.TrajID, r.GenTokens, r.Turns))
		}
		return h.Observe(ctx, r)
	}
}
