package sandbox_test

import (
	"testing"
	"time"

	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/pkg/sandbox"
	"github.com/actloop/actloop/pkg/sandbox/sandboxtest"
)

// conformanceLimit is a small output limit, so the cap is quick to reach.
const conformanceLimit = 2000

func TestLocalConformance(t *testing.T) {
	sandboxtest.Run(t, func(t *testing.T) sandbox.Backend {
		return newLocal(t, sandbox.LocalConfig{OutputLimit: conformanceLimit})
	}, sandboxtest.Options{OutputLimit: conformanceLimit, Shell: true})
}

func TestLocalBwrapConformance(t *testing.T) {
	skipWithoutBwrap(t)
	sandboxtest.Run(t, func(t *testing.T) sandbox.Backend {
		return newLocal(t, sandbox.LocalConfig{Isolation: sandbox.IsolationBwrap, OutputLimit: conformanceLimit,
			Limits: sandbox.DefaultLimits()})
	}, sandboxtest.Options{OutputLimit: conformanceLimit, Shell: true})
}

// TestLocalTmpfsConformance runs the suite on sandboxes each on a tmpfs of
// its own (DiskTmpfs), where this host lets the worker mount.
func TestLocalTmpfsConformance(t *testing.T) {
	sandboxtest.Run(t, func(t *testing.T) sandbox.Backend {
		cfg := sandbox.LocalConfig{OutputLimit: conformanceLimit, Limits: sandbox.DefaultLimits()}
		return newDiskLocal(t, cfg, sandbox.DiskTmpfs, false)
	}, sandboxtest.Options{OutputLimit: conformanceLimit, Shell: true})
}

func TestSimConformance(t *testing.T) {
	sandboxtest.Run(t, func(t *testing.T) sandbox.Backend {
		return sandbox.NewSim(sandbox.SimConfig{
			StartLatency: 2 * time.Second,
			ExecLatency:  time.Second,
			Jitter:       0.5,
			TimeScale:    0.001, // a simulated second is a real millisecond
			Seed:         1,
			OutputLimit:  conformanceLimit,
		})
	}, sandboxtest.Options{OutputLimit: conformanceLimit})
}

// newLocal returns a Local rooted in a fresh temporary directory; with
// Isolation "" it is unisolated (explicitly allowed).
func newLocal(t testing.TB, cfg sandbox.LocalConfig) *sandbox.Local {
	t.Helper()
	if cfg.Root == "" {
		cfg.Root = testkit.SearchableTempDir(t)
	}
	if cfg.Isolation == "" {
		cfg.Isolation, cfg.AllowUnisolated = sandbox.IsolationNone, true
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
	if _, err := sandbox.NewLocal(sandbox.LocalConfig{Root: testkit.SearchableTempDir(t), Isolation: sandbox.IsolationBwrap}); err != nil {
		t.Skipf("bwrap isolation unavailable: %v", err)
	}
}
