// Command coordinator admits samples, assigns replicas, ends stuck
// trajectories with fallback results and serves /v1/status.
package main

import (
	"fmt"
	"os"

	"github.com/actloop/actloop/internal/services"
)

func main() {
	if err := services.Run("coordinator"); err != nil {
		fmt.Fprintln(os.Stderr, "coordinator:", err)
		os.Exit(1)
	}
}
