package virtual

import (
	"fmt"
	"math"
	"testing"

	"github.com/actloop/actloop/internal/workload"
)

// The lower bound prefills a group's shared prompt once: its rollouts
// find it in the radix cache. A group of four costs as much prefill as one
// of its rollouts alone (their turns add no new input here), and four
// rollouts of four prompts four times as much.
func TestLowerBoundPrefillsASharedPromptOnce(t *testing.T) {
	cfg := Defaults(1, 4)
	rollout := func(id, group string) workload.Trajectory { // a prompt of whole chunks
		return workload.Trajectory{ID: id, GroupID: group, Tokens: []int{1}, Prompt: 4 * cfg.Server.ChunkedPrefill, Startup: 1, Eval: 1}
	}
	var group, apart []workload.Trajectory
	for i := range 4 {
		group = append(group, rollout(fmt.Sprint("g-", i), "g"))
		apart = append(apart, rollout(fmt.Sprint("a-", i), fmt.Sprint("a-", i)))
	}
	one := LowerBound(group[:1], cfg).PrefillS
	if got := LowerBound(group, cfg).PrefillS; math.Abs(got-one) > 1e-9*one {
		t.Errorf("a group of four: %.4f s of prefill, one rollout alone %.4f s", got, one)
	}
	if got := LowerBound(apart, cfg).PrefillS; math.Abs(got-4*one) > 1e-9*one {
		t.Errorf("four prompts: %.4f s of prefill, want 4 × %.4f s", got, one)
	}
}
