// Command gen-worker serves one inference replica: it runs generation steps
// with at most ACTLOOP_SLOTS at once.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/actloop/actloop/internal/genworker"
	"github.com/actloop/actloop/internal/service"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gen-worker:", err)
		os.Exit(1)
	}
}

func run() error {
	var cfg genworker.Config
	return service.Main("gen-worker", &cfg, func(ctx context.Context, d *service.Deps) error {
		w, err := genworker.New(ctx, cfg, d, nil)
		if err != nil {
			return err
		}
		return w.Run(ctx)
	})
}
