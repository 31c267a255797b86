package batching

import (
	"errors"
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

// TestCalibrationRefitsEveryMachine refits each calibrated machine's cost
// model to its profiles and checks that the committed parameters are what
// the fit gives (to the 4 significant digits they are written with).
func TestCalibrationRefitsEveryMachine(t *testing.T) {
	for _, p := range Profiles {
		t.Run(p.Cost.Name, func(t *testing.T) {
			got, err := Fit(p)
			if err != nil {
				t.Fatal(err)
			}
			want := p.Cost
			for _, f := range []struct {
				name      string
				got, want float64
			}{
				{"Fixed", got.Fixed, want.Fixed}, {"PerPrefillToken", got.PerPrefillToken, want.PerPrefillToken},
				{"PerAttnPair", got.PerAttnPair, want.PerAttnPair}, {"DecodeFixed", got.DecodeFixed, want.DecodeFixed},
				{"PerDecodeSeq", got.PerDecodeSeq, want.PerDecodeSeq}, {"PerKVToken", got.PerKVToken, want.PerKVToken},
			} {
				if math.Abs(f.got-f.want) > 5e-4*math.Abs(f.want) {
					t.Errorf("%s: refit gives %.4g, %s has %.4g", f.name, f.got, want.Name, f.want)
				}
			}
			ps, err := IterationPoints(want)
			if err != nil {
				t.Fatal(err)
			}
			if len(ps) < 300 {
				t.Errorf("fit over %d iterations, want every attention row with a linear row", len(ps))
			}
			if err := want.Validate(); err != nil {
				t.Error(err)
			}
		})
	}
	if _, err := ProfileOf("no-such-model"); !errors.Is(err, ErrNoCalibration) {
		t.Errorf("ProfileOf(unknown): %v, want ErrNoCalibration", err)
	}
}

// TestInterpolate: between two rows linearly, outside them the nearest.
func TestInterpolate(t *testing.T) {
	rows := [][]float64{{10, 1}, {20, 3}}
	for _, tc := range []struct{ x, want float64 }{{5, 1}, {10, 1}, {15, 2}, {20, 3}, {40, 3}} {
		if got := interpolate(rows, tc.x); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("interpolate(%v) = %v, want %v", tc.x, got, tc.want)
		}
	}
}
