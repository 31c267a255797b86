package coordinator

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/actloop/actloop/pkg/priority"
	"github.com/actloop/actloop/pkg/schema"
)

// A batch that has waited longer than the age limit is still admitted in
// the policy's order (priority.AdmissionOrder): by the clock, every sample
// would have aged together and admission fallen back to id order.
func TestWaitingBatchKeepsPolicyOrder(t *testing.T) {
	lpt, err := priority.ByName(priority.NameLPT)
	if err != nil {
		t.Fatal(err)
	}
	arrived := time.Now().Add(-10 * priority.DefaultAgeLimit)
	s := newWaitingSet(0)
	for i, pred := range []float64{300, 900, 100, 700, 500} {
		id := fmt.Sprintf("s%d", i)
		s.add(id, &waitingSample{Sample: schema.Sample{ID: id}, ArrivedAt: arrived, Predicted: pred})
	}
	var got []string
	for _, w := range s.ranked(lpt, 5, -1) {
		got = append(got, w.Sample.ID)
	}
	if want := []string{"s1", "s3", "s4", "s0", "s2"}; !slices.Equal(got, want) {
		t.Fatalf("admission order %v, want lpt's %v", got, want)
	}
}

// A progress report after a model call gives KV admission the context, the
// growth past the prompt and how much of it is replies
// (priority.Reported), as the virtual engine counts them.
func TestProgressFootprint(t *testing.T) {
	s := newActiveSet()
	s.add("a", &activeTraj{fact: priority.Fact{TrajID: "a", Replica: "r0"}})
	s.predicted(schema.Prediction{TrajID: "a", Replica: "r0", TurnSeq: 5, Turns: 3, GenTokens: 600,
		ContextTokens: 5000, PromptTokens: 2000, At: time.Now()})
	want := priority.Footprint{Replica: "r0", Context: 5000, Grown: 3000, Generated: 600, Turns: 3, RemainingTurns: -1}
	if got := s.footprints(); len(got) != 1 || got[0] != want {
		t.Fatalf("footprints %+v, want %+v", got, want)
	}
}
