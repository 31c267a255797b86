// Command coordinator admits samples, assigns replicas, ends stuck
// trajectories with fallback results and serves /v1/status.
package main

import (
	"fmt"
	"os"

	"github.com/actloop/actloop/internal/launch"
)

func main() {
	if err := launch.Run("coordinator"); err != nil {
		fmt.Fprintln(os.Stderr, "coordinator:", err)
		os.Exit(1)
	}
}
