// Command env-worker runs environment steps: sandbox start-up, commands,
// the final diff and eval, and publishes results.
package main

import (
	"fmt"
	"os"

	"github.com/actloop/actloop/internal/launch"
	"github.com/actloop/actloop/pkg/sandbox"
)

func main() {
	if code, ok := sandbox.Forwarder(os.Args); ok { // a sandbox's port forwarder
		os.Exit(code)
	}
	if err := launch.Run("env-worker"); err != nil {
		fmt.Fprintln(os.Stderr, "env-worker:", err)
		os.Exit(1)
	}
}
