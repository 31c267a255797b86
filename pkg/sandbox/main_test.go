package sandbox_test

import (
	"os"
	"testing"

	"github.com/actloop/actloop/pkg/sandbox"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if code, ok := sandbox.Forwarder(os.Args); ok { // Serve's forwarder, under bwrap
		os.Exit(code)
	}
	goleak.VerifyTestMain(m)
}
