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

// FuzzParseCalib: a calibration table parses into rows of the width asked
// for, every number finite and >= 0 and every time > 0, or is refused.
func FuzzParseCalib(f *testing.F) {
	f.Add([]byte("num_tokens,ms\n1,0.3\n2,0.31\n"), 2)
	f.Add([]byte("a,b,c\n1,2,3\n"), 3)
	f.Add([]byte("a,b\n1,-2\n"), 2)
	f.Add([]byte("a,b\n1,NaN\n"), 2)
	f.Fuzz(func(t *testing.T, b []byte, cols int) {
		if cols < 1 || cols > 8 {
			return
		}
		rows, err := parseCalib("fuzz", b, cols)
		if err != nil {
			return
		}
		for _, r := range rows {
			if len(r) != cols || r[cols-1] <= 0 {
				t.Fatalf("row %v", r)
			}
			for _, v := range r {
				if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
					t.Fatalf("row %v", r)
				}
			}
		}
	})
}
