// Package predictor is predictor-gw: it answers remaining-length prediction
// requests on actloop.predict. This build has no predictor model: every
// request gets an error reply naming that, so callers fall back to fcfs.
package predictor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"

	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/pkg/bus"
)

// Config is predictor-gw's settings (ACTLOOP_ prefix).
type Config struct {
	service.Common
	Addr string `envconfig:"PREDICTOR_ADDR" default:":8083"`
}

// ErrNoModel is the answer to every prediction request in this build.
var ErrNoModel = errors.New("no predictor model in this build: remaining-length prediction comes with priority scheduling; use policy fcfs")

// Reply is the body of a reply on actloop.predict.
type Reply struct {
	Predicted float64 `json:"predicted,omitempty"`
	Error     string  `json:"error,omitempty"`
}

// Gateway answers actloop.predict.
type Gateway struct {
	cfg Config
	d   *service.Deps
}

// New returns a Gateway.
func New(cfg Config, d *service.Deps) *Gateway { return &Gateway{cfg: cfg, d: d} }

// Run serves until ctx ends.
func (g *Gateway) Run(ctx context.Context) error {
	sub, err := g.d.NC.QueueSubscribe(bus.SubjectPredict, "predictor-gw", func(m *nats.Msg) {
		b, _ := json.Marshal(Reply{Error: ErrNoModel.Error()})
		_ = m.Respond(b)
	})
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", bus.SubjectPredict, err)
	}
	defer func() { _ = sub.Drain() }()
	eg, ctx := errgroup.WithContext(ctx)
	eg.Go(func() error { return service.Serve(ctx, g.cfg.Addr, service.HealthMux(g.d), g.d.Log) })
	return eg.Wait()
}
