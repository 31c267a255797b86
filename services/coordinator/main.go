// Command coordinator admits samples, assigns replicas, ends stuck
// trajectories with fallback results and serves /v1/status.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/actloop/actloop/internal/coordinator"
	"github.com/actloop/actloop/internal/service"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "coordinator:", err)
		os.Exit(1)
	}
}

func run() error {
	var cfg coordinator.Config
	return service.Main("coordinator", &cfg, func(ctx context.Context, d *service.Deps) error {
		c, err := coordinator.New(ctx, cfg, d)
		if err != nil {
			return err
		}
		return c.Run(ctx)
	})
}
