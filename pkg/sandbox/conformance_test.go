package sandbox_test

import (
	"testing"
	"time"

	"github.com/actloop/actloop/pkg/sandbox"
	"github.com/actloop/actloop/pkg/sandbox/sandboxtest"
)

func TestLocalConformance(t *testing.T) {
	sandboxtest.Run(t, func(t *testing.T) sandbox.Backend {
		return newLocal(t, sandbox.LocalConfig{})
	})
}

func TestLocalBwrapConformance(t *testing.T) {
	skipWithoutBwrap(t)
	sandboxtest.Run(t, func(t *testing.T) sandbox.Backend {
		return newLocal(t, sandbox.LocalConfig{Isolation: sandbox.IsolationBwrap})
	})
}

func TestSimConformance(t *testing.T) {
	sandboxtest.Run(t, func(t *testing.T) sandbox.Backend {
		return sandbox.NewSim(sandbox.SimConfig{
			StartLatency: 2 * time.Second,
			ExecLatency:  time.Second,
			Jitter:       0.5,
			TimeScale:    0.001, // a simulated second is a real millisecond
			Seed:         1,
		})
	})
}

// newLocal returns a Local rooted in a fresh temporary directory.
func newLocal(t testing.TB, cfg sandbox.LocalConfig) *sandbox.Local {
	t.Helper()
	if cfg.Root == "" {
		cfg.Root = t.TempDir()
	}
	l, err := sandbox.NewLocal(cfg)
	if err != nil {
		t.Fatalf("NewLocal: %v", err)
	}
	return l
}

// skipWithoutBwrap skips tests of bwrap isolation where bubblewrap is
// missing or does not work (common in containers).
func skipWithoutBwrap(t testing.TB) {
	t.Helper()
	if _, err := sandbox.NewLocal(sandbox.LocalConfig{Root: t.TempDir(), Isolation: sandbox.IsolationBwrap}); err != nil {
		t.Skipf("bwrap isolation unavailable: %v", err)
	}
}
