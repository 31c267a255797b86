// Command predictor-gw answers remaining-length prediction requests on
// actloop.predict (backend by ACTLOOP_PREDICTOR) and serves /healthz.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/actloop/actloop/internal/predictor"
	"github.com/actloop/actloop/internal/service"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "predictor-gw:", err)
		os.Exit(1)
	}
}

func run() error {
	var cfg predictor.Config
	return service.Main("predictor-gw", &cfg, func(ctx context.Context, d *service.Deps) error {
		return predictor.New(cfg, d).Run(ctx)
	})
}
