package main

import (
	"os"
	"testing"

	"github.com/actloop/actloop/pkg/sandbox"
)

// TestMain lets the test binary be a sandbox's port forwarder, as main
// does: actloop dev --agent serves its agents' endpoint through it under
// bubblewrap.
func TestMain(m *testing.M) {
	if code, ok := sandbox.Forwarder(os.Args); ok {
		os.Exit(code)
	}
	os.Exit(m.Run())
}
