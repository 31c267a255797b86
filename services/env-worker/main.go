// Command env-worker runs environment steps: sandbox start-up, commands,
// the final diff and eval, and publishes results.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/actloop/actloop/internal/envworker"
	"github.com/actloop/actloop/internal/service"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "env-worker:", err)
		os.Exit(1)
	}
}

func run() error {
	var cfg envworker.Config
	return service.Main("env-worker", &cfg, func(ctx context.Context, d *service.Deps) error {
		w, err := envworker.New(ctx, cfg, d)
		if err != nil {
			return err
		}
		return w.Run(ctx)
	})
}
