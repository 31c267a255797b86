package batching

import (
	"math"
	"testing"
)

// TestCalibrationRefits refits the cost model to the profiles in calib/ and
// checks that A100Llama8B is what the fit gives (to the 4 significant
// digits it is written with).
func TestCalibrationRefits(t *testing.T) {
	got, err := FitA100Llama8B()
	if err != nil {
		t.Fatal(err)
	}
	want := A100Llama8B
	for _, p := range []struct {
		name      string
		got, want float64
	}{
		{"Fixed", got.Fixed, want.Fixed}, {"PerPrefillToken", got.PerPrefillToken, want.PerPrefillToken},
		{"PerAttnPair", got.PerAttnPair, want.PerAttnPair}, {"DecodeFixed", got.DecodeFixed, want.DecodeFixed},
		{"PerDecodeSeq", got.PerDecodeSeq, want.PerDecodeSeq}, {"PerKVToken", got.PerKVToken, want.PerKVToken},
	} {
		if math.Abs(p.got-p.want) > 5e-4*math.Abs(p.want) {
			t.Errorf("%s: refit gives %.4g, A100Llama8B has %.4g", p.name, p.got, p.want)
		}
	}
	ps, err := IterationPoints(want)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) < 400 {
		t.Errorf("fit over %d iterations, want every row of calib/ with an mlp row", len(ps))
	}
}
