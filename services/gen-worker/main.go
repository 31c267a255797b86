// Command gen-worker serves one inference replica: it runs generation steps
// with at most ACTLOOP_SLOTS at once.
package main

import (
	"fmt"
	"os"

	"github.com/actloop/actloop/internal/launch"
)

func main() {
	if err := launch.Run("gen-worker"); err != nil {
		fmt.Fprintln(os.Stderr, "gen-worker:", err)
		os.Exit(1)
	}
}
