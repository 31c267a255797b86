package workload

import (
	"math"
	"reflect"
	"slices"
	"strings"
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

// The drifting scenario's batches grow as DriftGrowth says: each batch's
// median reply tokens over the first batch's follow the factors (1 where
// the curve keeps them), and its
// turns are drawn with the median scaled by them (what runs is less at the
// top, where the step cap and the context cut the longest).
func TestDriftBatchesGrowPerTheCurve(t *testing.T) {
	sc, ok := Lookup("swe-rl-drift")
	if !ok || sc.Batches() != len(DriftGrowth) || len(DriftGrowth) < 2 {
		t.Fatalf("swe-rl-drift: %v, %d batches", ok, sc.Batches())
	}
	medians := func(k int) (turns, reply float64) {
		b := sc.Batch(k)
		if b.Name != sc.Name+"-b"+string(rune('1'+k)) || b.Batches() != 1 {
			t.Fatalf("batch %d: named %s, %d batches", k, b.Name, b.Batches())
		}
		var ts, rs []int
		for _, tr := range b.Generate(BatchSeed(1, k), 2048) {
			ts = append(ts, tr.Turns())
			rs = append(rs, tr.Tokens...)
		}
		return float64(quantile(ts, 0.5)), float64(quantile(rs, 0.5))
	}
	t0, r0 := medians(0)
	prevT, prevR := t0, r0
	for k := 1; k < len(DriftGrowth); k++ {
		tk, rk := medians(k)
		g := DriftGrowth[k]
		if got := rk / r0; math.Abs(got-g.Reply) > 0.08*g.Reply {
			t.Errorf("batch %d: median reply %.0f tokens, %.2f× the first batch's, want %.2f×", k+1, rk, got, g.Reply)
		}
		// The draw grows by the factor; what a trajectory runs is then cut
		// by the 50-step cap and the 64k context, but at least half the
		// growth is left.
		if d, ok := sc.Batch(k).Turns.(LogNormal); !ok || math.Abs(d.Median-g.Turns*sc.Turns.(LogNormal).Median) > 1e-9 {
			t.Errorf("batch %d: turns drawn from %s, want the median scaled by %.2f", k+1, sc.Batch(k).Turns, g.Turns)
		}
		if got := tk / t0; got > g.Turns*1.08 || got < 1+(g.Turns-1)/2 {
			t.Errorf("batch %d: median turns %.0f, %.2f× the first batch's, want between %.2f× and %.2f×", k+1, tk, got, 1+(g.Turns-1)/2, g.Turns)
		}
		t.Logf("batch %d: median %.0f turns (%.2f×), %.0f tokens a reply (%.2f×)", k+1, tk, tk/t0, rk, rk/r0)
		if tk < prevT || (g.Reply > DriftGrowth[k-1].Reply && rk <= prevR) {
			t.Errorf("batch %d does not grow: turns %.0f after %.0f, reply %.0f after %.0f", k+1, tk, prevT, rk, prevR)
		}
		prevT, prevR = tk, rk
	}
	// Each batch draws tasks of its own, and batch 1 is the base shape.
	a, b := sc.Batch(0).Generate(BatchSeed(1, 0), 8), sc.Batch(1).Generate(BatchSeed(1, 1), 8)
	if a[0].Prompt == b[0].Prompt && a[1].Prompt == b[1].Prompt {
		t.Errorf("batches 1 and 2 drew the same prompts")
	}
	if sc.Batch(0).Turns.String() != sc.Turns.String() {
		t.Errorf("batch 1 turns %s, want the scenario's %s", sc.Batch(0).Turns, sc.Turns)
	}
}

// A scenario without Drift is one batch, itself.
func TestBatchOfAPlainScenarioIsItself(t *testing.T) {
	sc, _ := Lookup("swe-rl-64k")
	if sc.Batches() != 1 || !reflect.DeepEqual(sc.Batch(0), sc) || BatchSeed(5, 0) != 5 {
		t.Fatalf("swe-rl-64k: %d batches, batch 0 %+v", sc.Batches(), sc.Batch(0))
	}
}

// A "-hicache" variant draws the plans of the scenario it varies (only the
// names differ) on servers with a host tier; "all" (Scenarios) leaves it
// out.
func TestHiCacheVariantsDrawTheSamePlans(t *testing.T) {
	for _, v := range Variants {
		base, ok := Lookup(strings.TrimSuffix(v.Name, HiCacheSuffix))
		if !ok || !v.Server.HiCache || base.Server.HiCache || slices.ContainsFunc(Scenarios, func(s Scenario) bool { return s.Name == v.Name }) {
			t.Fatalf("%s: base found %v, host tier %v (base %v)", v.Name, ok, v.Server.HiCache, base.Server.HiCache)
		}
		a, b := base.Generate(3, 40), v.Generate(3, 40)
		for i := range a {
			b[i].ID, b[i].GroupID = a[i].ID, a[i].GroupID
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s draws other plans than %s", v.Name, base.Name)
		}
	}
	if len(Variants) != 3 {
		t.Errorf("%d variants, want swe-rl-64k, swe-rl-128k and swe-rl-steady", len(Variants))
	}
}
