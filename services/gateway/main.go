// Command gateway serves the HTTP trainer API (submit samples, read and
// acknowledge results and groups, pause, resume, abort, status) over NATS,
// logged in as a trainer, and serves /healthz, /readyz and /metrics.
package main

import (
	"fmt"
	"os"

	"github.com/actloop/actloop/internal/launch"
)

func main() {
	if err := launch.Run("gateway"); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}
