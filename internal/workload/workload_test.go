package workload

import (
	"math"
	"reflect"
	"slices"
	"testing"

	"github.com/actloop/actloop/internal/sim"
)

func TestGenerateIsDeterministic(t *testing.T) {
	for _, sc := range Scenarios {
		a, b := sc.Generate(7, 50), sc.Generate(7, 50)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: same seed, different batches", sc.Name)
		}
		if c := sc.Generate(8, 50); reflect.DeepEqual(a, c) {
			t.Fatalf("%s: another seed, the same batch", sc.Name)
		}
		if len(a) != 50 {
			t.Fatalf("%s: %d trajectories", sc.Name, len(a))
		}
	}
}

// Every trajectory becomes a valid sample whose directive gives back its
// lengths, and its group fields are consistent.
func TestSamplesCarryTheirPlan(t *testing.T) {
	for _, sc := range Scenarios {
		for _, tr := range sc.Generate(1, 22) {
			s := tr.Sample()
			if err := s.Validate(); err != nil {
				t.Fatalf("%s: %v", tr.ID, err)
			}
			d, ok, err := sim.ParseDirective(s.Task)
			if !ok || err != nil || !reflect.DeepEqual(d.Tokens, tr.Tokens) || len(d.Exec) != len(tr.Exec) {
				t.Fatalf("%s: directive %+v %v %v", tr.ID, d, ok, err)
			}
			if s.GroupIndex >= s.GroupSize || s.Limits.StepLimit <= tr.Turns() {
				t.Fatalf("%s: group %d/%d, step limit %d for %d turns", tr.ID, s.GroupIndex, s.GroupSize, s.Limits.StepLimit, tr.Turns())
			}
		}
	}
}

// Siblings' turn counts are correlated; the long-tailed scenario has a
// long tail.
func TestShapes(t *testing.T) {
	sc, _ := Lookup("swe-longtail")
	ts := sc.Generate(3, 4000)
	var sib, other []float64
	for i := 0; i+1 < len(ts); i += 2 {
		if ts[i].GroupID == ts[i+1].GroupID {
			sib = append(sib, float64(ts[i].Turns()), float64(ts[i+1].Turns()))
		}
	}
	for i := 0; i+4 < len(ts); i += 4 {
		other = append(other, float64(ts[i].Turns()), float64(ts[i+4].Turns()))
	}
	if rs, ro := corr(sib), corr(other); rs < 0.6 || math.Abs(ro) > 0.2 {
		t.Fatalf("correlation of siblings %.2f, of strangers %.2f", rs, ro)
	}
	turns := make([]int, len(ts))
	for i, tr := range ts {
		turns[i] = tr.Turns()
	}
	if p50, p99 := quantile(turns, 0.5), quantile(turns, 0.99); float64(p99) < 4*float64(p50) {
		t.Fatalf("no long tail: p50 %d, p99 %d turns", p50, p99)
	}
}

func corr(pairs []float64) float64 {
	var n, sx, sy, sxx, syy, sxy float64
	for i := 0; i+1 < len(pairs); i += 2 {
		x, y := pairs[i], pairs[i+1]
		n++
		sx, sy, sxx, syy, sxy = sx+x, sy+y, sxx+x*x, syy+y*y, sxy+x*y
	}
	return (n*sxy - sx*sy) / math.Sqrt((n*sxx-sx*sx)*(n*syy-sy*sy))
}

func quantile(xs []int, q float64) int {
	s := slices.Sorted(slices.Values(xs))
	return s[int(q*float64(len(s)-1))]
}
