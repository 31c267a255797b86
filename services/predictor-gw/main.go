// Command predictor-gw answers remaining-length prediction requests on
// actloop.predict (backend by ACTLOOP_PREDICTOR) and serves /healthz.
package main

import (
	"fmt"
	"os"

	"github.com/actloop/actloop/internal/launch"
)

func main() {
	if err := launch.Run("predictor-gw"); err != nil {
		fmt.Fprintln(os.Stderr, "predictor-gw:", err)
		os.Exit(1)
	}
}
