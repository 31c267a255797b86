package schema

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
)

// A result's reward components are bounded as the env-worker bounds them:
// a head past the bounds is refused naming the field.
func TestRewardComponentsBounds(t *testing.T) {
	many := map[string]float64{}
	for i := range MaxRewardComponents + 1 {
		many[fmt.Sprint("c", i)] = float64(i)
	}
	for _, tt := range []struct {
		name string
		c    map[string]float64
		want string // "" = valid
	}{
		{"none", nil, ""},
		{"some", map[string]float64{"judge": 0.5, "len": -1e9}, ""},
		{"too many", many, fmt.Sprintf("%d components, more than %d", MaxRewardComponents+1, MaxRewardComponents)},
		{"unnamed", map[string]float64{"": 1}, "is not 1 to 128 bytes"},
		{"long name", map[string]float64{strings.Repeat("n", MaxRewardComponentBytes+1): 1}, "is not 1 to 128 bytes"},
		{"bad UTF-8", map[string]float64{"\xff": 1}, "not valid UTF-8"},
		{"NaN", map[string]float64{"x": math.NaN()}, `component "x" is not a finite number`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := ResultHead{V: Version, TrajID: "t", Status: StatusSubmitted, RewardComponents: tt.c}
			r := Result{ResultHead: h}
			err := r.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				b, err := json.Marshal(r)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := Decode[Result](b); err != nil {
					t.Fatalf("Decode: %v", err)
				}
				return
			}
			if !isField(err, "reward_components") || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want reward_components: …%s…", err, tt.want)
			}
		})
	}
}
