package priority

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"
)

// randomFacts draws n facts whose times and predictions come from small sets,
// so ties are common; about a quarter of the predictions are unknown.
func randomFacts(r *rand.Rand, n int, now time.Time) []Fact {
	facts := make([]Fact, n)
	for i := range facts {
		f := Fact{
			TrajID:     fmt.Sprintf("t%03d", r.IntN(1000)), // may repeat
			Replica:    fmt.Sprintf("r%d", r.IntN(3)),
			AdmittedAt: now.Add(-time.Duration(r.IntN(20)) * time.Second),
			Turns:      r.IntN(30),
			Tokens:     r.IntN(10000),
		}
		switch k := r.IntN(8); {
		case k == 0:
			f.Predicted = 0
		case k == 1:
			f.Predicted = []float64{-5, math.NaN(), math.Inf(1), math.Inf(-1)}[r.IntN(4)]
		case k < 5:
			f.Predicted = float64(100 * (1 + r.IntN(10))) // frequent ties
		default:
			f.Predicted = r.Float64() * 1e5
		}
		switch k := r.IntN(10); {
		case k == 0: // not waiting
		default:
			f.WaitingSince = now.Add(-time.Duration(r.IntN(240)) * time.Second)
		}
		facts[i] = f
	}
	return facts
}

// oracleMedian is the median of the positive finite predictions, computed
// separately from the package's own.
func oracleMedian(facts []Fact) float64 {
	var ps []float64
	for _, f := range facts {
		if p := f.Predicted; p > 0 && !math.IsInf(p, 0) {
			ps = append(ps, p)
		}
	}
	if len(ps) == 0 {
		return 0
	}
	sort.Float64s(ps)
	n := len(ps)
	if n%2 == 1 {
		return ps[n/2]
	}
	return (ps[n/2-1] + ps[n/2]) / 2
}

func oracleEffective(f Fact, median float64) float64 {
	if f.Predicted > 0 && !math.IsInf(f.Predicted, 1) {
		return f.Predicted
	}
	return median
}

func oracleAged(f Fact, now time.Time, limit time.Duration) bool {
	return limit > 0 && !f.WaitingSince.IsZero() && !f.WaitingSince.Add(limit).After(now)
}

// factKey identifies a fact exactly (NaN included) for multiset comparison.
type factKey struct {
	id, replica, group, family string
	admitted, waiting          int64
	turns, tokens              int
	pred                       uint64
}

func keyOf(f Fact) factKey {
	return factKey{f.TrajID, f.Replica, f.GroupID, f.Family, f.AdmittedAt.UnixNano(), f.WaitingSince.UnixNano(), f.Turns, f.Tokens, math.Float64bits(f.Predicted)}
}

func TestRankProperties(t *testing.T) {
	now := t0
	limits := []time.Duration{0, time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute}
	for seed := range uint64(1000) {
		r := rand.New(rand.NewPCG(seed, 0x5eed))
		facts := randomFacts(r, r.IntN(60), now)
		limit := limits[r.IntN(len(limits))]
		median := oracleMedian(facts)
		for _, name := range Names() {
			p := mustNew(t, name, Config{AgeLimit: limit})
			got := p.Rank(facts, now)
			where := fmt.Sprintf("seed %d %s limit %v", seed, name, limit)

			// (1) A permutation of the input.
			count := map[factKey]int{}
			for _, f := range facts {
				count[keyOf(f)]++
			}
			for _, f := range got {
				count[keyOf(f)]--
			}
			if len(got) != len(facts) {
				t.Fatalf("%s: %d facts in, %d out", where, len(facts), len(got))
			}
			for k, n := range count {
				if n != 0 {
					t.Fatalf("%s: fact %+v appears %+d times more in the input than the output", where, k, n)
				}
			}

			// (3) Every aged fact precedes every non-aged one, oldest wait first.
			firstFresh := len(got)
			for i, f := range got {
				aged := oracleAged(f, now, limit)
				if !aged && firstFresh == len(got) {
					firstFresh = i
				}
				if aged && i > firstFresh {
					t.Fatalf("%s: aged %s at %d after non-aged %s at %d", where, f.TrajID, i, got[firstFresh].TrajID, firstFresh)
				}
				if aged && i > 0 && f.WaitingSince.Before(got[i-1].WaitingSince) {
					t.Fatalf("%s: aged %s waited longer than %s before it", where, f.TrajID, got[i-1].TrajID)
				}
			}

			// (2) Among non-aged facts, the policy's key is monotone, and ties
			// go to the earlier admission, then the smaller id.
			fresh := got[firstFresh:]
			for i := 1; i < len(fresh); i++ {
				a, b := fresh[i-1], fresh[i]
				var c int
				switch name {
				case NameFCFS:
					c = 0
				case NameLPT:
					c = cmp.Compare(oracleEffective(b, median), oracleEffective(a, median))
				case NameSJF:
					c = cmp.Compare(oracleEffective(a, median), oracleEffective(b, median))
				}
				if c > 0 {
					t.Fatalf("%s: %s (%v) before %s (%v) breaks the policy order", where, a.TrajID, oracleEffective(a, median), b.TrajID, oracleEffective(b, median))
				}
				if c == 0 {
					if d := a.AdmittedAt.Compare(b.AdmittedAt); d > 0 || d == 0 && a.TrajID > b.TrajID {
						t.Fatalf("%s: tie between %s and %s broken the wrong way", where, a.TrajID, b.TrajID)
					}
				}
			}

			// Deterministic: input order does not matter when ids are unique.
			uniq := slices.Clone(facts)
			for i := range uniq {
				uniq[i].TrajID = fmt.Sprintf("u%03d", i)
			}
			want := ids(p.Rank(uniq, now))
			r.Shuffle(len(uniq), func(i, j int) { uniq[i], uniq[j] = uniq[j], uniq[i] })
			if again := ids(p.Rank(uniq, now)); !slices.Equal(again, want) {
				t.Fatalf("%s: order depends on input order:\n%v\n%v", where, want, again)
			}
		}
	}
}
