package devstack_test

import (
	"os"
	"testing"

	"github.com/actloop/actloop/pkg/sandbox"
)

func TestMain(m *testing.M) {
	if code, ok := sandbox.Forwarder(os.Args); ok { // a proxy-flow sandbox's port forwarder, under bwrap
		os.Exit(code)
	}
	os.Exit(m.Run())
}
