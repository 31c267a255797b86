package predict

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// A regression recovers the relation its examples were drawn from, and its
// statistics add up: two halves merged fit as the whole does.
func TestRegressionFits(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var whole, a, b Regression
	for i := range 2000 {
		x := make([]float64, NumFeatures)
		x[0], x[1], x[3] = 1, rng.Float64()*4, rng.Float64()*8
		y := math.Expm1(1 + 0.5*x[1] + 0.25*x[3])
		whole.Add(x, y, y/100)
		if i%2 == 0 {
			a.Add(x, y, y/100)
		} else {
			b.Add(x, y, y/100)
		}
	}
	a.Merge(1, b.Stats())
	for name, r := range map[string]*Regression{"whole": &whole, "merged": &a} {
		m, err := r.Fit(1e-6)
		if err != nil {
			t.Fatal(err)
		}
		x := make([]float64, NumFeatures)
		x[0], x[1], x[3] = 1, 2, 4
		tokens, _ := m.Predict(x)
		if want := math.Expm1(3); math.Abs(tokens-want)/want > 0.01 {
			t.Errorf("%s: predicts %.2f tokens, want %.2f", name, tokens, want)
		}
	}
	if !slices.Equal(whole.Stats()[:1], a.Stats()[:1]) {
		t.Errorf("examples: whole %v, merged %v", whole.Examples(), a.Examples())
	}
	var empty Regression
	if _, err := empty.Fit(0); err == nil {
		t.Error("an empty regression without a penalty fits")
	}
}

func FuzzDecodeAsk(f *testing.F) {
	f.Add(encodeAsk(Ask{Tokens: 10, Turns: 2, X: make([]float64, NumFeatures)}))
	f.Add("1 2 3")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		a, ok := decodeAsk(s)
		if !ok {
			return
		}
		if len(a.X) != NumFeatures || a.Tokens < 0 || a.Turns < 0 {
			t.Fatalf("decodeAsk(%q) = %+v", s, a)
		}
		b, ok := decodeAsk(encodeAsk(a))
		if !ok || b.Tokens != a.Tokens || b.Turns != a.Turns {
			t.Fatalf("round trip of %+v: %+v, %v", a, b, ok)
		}
	})
}
