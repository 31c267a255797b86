package llm_test

import (
	"net/http/httptest"
	"testing"

	"github.com/actloop/actloop/pkg/llm"
	"github.com/actloop/actloop/pkg/llm/llmtest"
	"github.com/actloop/actloop/pkg/sim"
)

// TestSGLangConformance runs the conformance suite on the SGLang client
// against the simulator.
func TestSGLangConformance(t *testing.T) {
	llmtest.Run(t, func(t *testing.T) llm.Generator {
		s := sim.New(sim.Config{DecodeTokensPerSec: 5000, TimeScale: 1, Seed: 7})
		ts := httptest.NewServer(s)
		t.Cleanup(ts.Close)
		g := llm.NewSGLang(ts.URL, llm.SGLangOptions{HTTPClient: ts.Client()})
		return llmtest.WithProgress(g, func(rid string) (int, bool) {
			info, ok := s.Request(rid)
			return info.Generated, ok && info.Phase == sim.PhaseDecode
		})
	})
}
