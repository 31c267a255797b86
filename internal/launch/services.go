// Package launch runs each actloop service by name, with its settings
// read from the environment: the services/* commands and `actloop serve`
// share it.
package launch

// docs/configuration.md's settings tables come from the settings structs.
//go:generate go run ./docgen

import (
	"context"
	"fmt"
	"slices"

	"github.com/actloop/actloop/internal/coordinator"
	"github.com/actloop/actloop/internal/envworker"
	"github.com/actloop/actloop/internal/gateway"
	"github.com/actloop/actloop/internal/genworker"
	"github.com/actloop/actloop/internal/predictor"
	"github.com/actloop/actloop/internal/service"
)

// Names are the services, in the order a stack starts them; the gateway
// (the HTTP trainer API) last, as a trainer's front door.
var Names = []string{"coordinator", "gen-worker", "env-worker", "predictor-gw", "gateway"}

// Run runs the named service until SIGINT or SIGTERM.
func Run(name string) error {
	switch name {
	case "coordinator":
		var cfg coordinator.Config
		return service.Main(name, &cfg, func(ctx context.Context, d *service.Deps) error {
			return coordinator.NewElected(cfg, d).Run(ctx) // leads while it holds the lease
		})
	case "gen-worker":
		var cfg genworker.Config
		return service.Main(name, &cfg, func(ctx context.Context, d *service.Deps) error {
			w, err := genworker.New(ctx, cfg, d, nil)
			if err != nil {
				return err
			}
			return w.Run(ctx)
		})
	case "env-worker":
		var cfg envworker.Config
		return service.Main(name, &cfg, func(ctx context.Context, d *service.Deps) error {
			w, err := envworker.New(ctx, cfg, d)
			if err != nil {
				return err
			}
			return w.Run(ctx)
		})
	case "predictor-gw":
		var cfg predictor.Config
		return service.Main(name, &cfg, func(ctx context.Context, d *service.Deps) error {
			return predictor.New(cfg, d).Run(ctx)
		})
	case "gateway":
		return gateway.Main() // service.Main, NATS alone
	}
	return fmt.Errorf("unknown service %q (one of %v)", name, Names)
}

// Known reports whether name is a service.
func Known(name string) bool { return slices.Contains(Names, name) }

// Settings returns the ACTLOOP_ environment variables the named service
// reads (nil for an unknown name): what a deployment may set for it.
func Settings(name string) []string {
	switch name {
	case "coordinator":
		return service.Settings(coordinator.Config{})
	case "gen-worker":
		return service.Settings(genworker.Config{})
	case "env-worker":
		return service.Settings(envworker.Config{})
	case "predictor-gw":
		return service.Settings(predictor.Config{})
	case "gateway":
		return service.Settings(gateway.Config{})
	}
	return nil
}
