package batching

import (
	"bytes"
	"embed"
	"encoding/csv"
	"fmt"
	"math"
	"strconv"

	"gonum.org/v1/gonum/mat"
)

// The cost model's inputs: per-layer operator times (the median of each
// profiled point, milliseconds, tensor parallel 1) of Meta-Llama-3-8B on
// an A100 80GB from Vidur's profiles (microsoft/vidur, MIT, commit
// 7d47513363ec447a741ac5e47241580b47724fbf); calib/SOURCE.md says which
// files, columns and rows.
//
//go:embed calib/*.csv calib/SOURCE.md
var calibFS embed.FS

// CalibLayers is Llama-3-8B's layer count (Vidur's Llama3_8BModelConfig):
// per-layer times are multiplied by it.
const CalibLayers = 32

// A100Llama8B is the cost model of Llama-3.1-8B (the architecture of
// Meta-Llama-3-8B) in bf16 on one A100 80GB, as FitA100Llama8B fits it to
// the profiles in calib/ (a test refits it and compares).
var A100Llama8B = Cost{
	Name:            "llama-3.1-8b/a100-80gb",
	Fixed:           7.002e-03,
	PerPrefillToken: 6.519e-05,
	PerAttnPair:     3.575e-09,
	DecodeFixed:     3.023e-03,
	PerDecodeSeq:    4.357e-05,
	PerKVToken:      7.822e-08,
	Layers:          CalibLayers,
	Source:          "microsoft/vidur profiles, a100/meta-llama/Meta-Llama-3-8B (mlp.csv, attention.csv), medians, TP 1",
}

// FitA100Llama8B fits the cost model to whole iterations built from the
// profiles in calib/ (IterationPoints): least squares on relative error,
// which is the relative error of the throughput the model predicts.
func FitA100Llama8B() (Cost, error) {
	ps, err := iterationRows()
	if err != nil {
		return Cost{}, err
	}
	c, err := fitRelative(ps, func(p IterationPoint) []float64 {
		if p.Kind == "decode" {
			return []float64{1, 0, 0, 1, float64(p.Batch), float64(p.Batch * p.Context)}
		}
		return []float64{1, float64(p.Chunk), attnPairs(p.Chunk, p.Context), 0, 0, 0}
	})
	if err != nil {
		return Cost{}, err
	}
	return Cost{Name: A100Llama8B.Name, Layers: CalibLayers, Source: A100Llama8B.Source,
		Fixed: c[0], PerPrefillToken: c[1], PerAttnPair: c[2], DecodeFixed: c[3], PerDecodeSeq: c[4], PerKVToken: c[5]}, nil
}

// attnPairs is the query-key pairs of a prefill chunk of n tokens after
// ctx tokens.
func attnPairs(n, ctx int) float64 { return float64(n) * (float64(ctx) + float64(n+1)/2) }

// fitRelative solves min Σ ((feat(r)·c − y) / y)² for c, y the row's
// measured time.
func fitRelative(rows []IterationPoint, feat func(IterationPoint) []float64) ([]float64, error) {
	k := len(feat(rows[0]))
	a := mat.NewDense(len(rows), k, nil)
	b := mat.NewVecDense(len(rows), nil)
	for i, r := range rows {
		y := r.Measured
		for j, x := range feat(r) {
			a.Set(i, j, x/y)
		}
		b.SetVec(i, 1)
	}
	var c mat.VecDense
	if err := c.SolveVec(a, b); err != nil {
		return nil, err
	}
	return c.RawVector().Data, nil
}

// readCalib reads calib/name: a header, then rows of cols numbers (the
// last is the measured milliseconds, which must be positive).
func readCalib(name string, cols int) ([][]float64, error) {
	b, err := calibFS.ReadFile("calib/" + name)
	if err != nil {
		return nil, err
	}
	return parseCalib(name, b, cols)
}

// parseCalib parses a calib/ table: a header line, then rows of cols
// numbers >= 0 whose last (a time) is > 0.
func parseCalib(name string, b []byte, cols int) ([][]float64, error) {
	recs, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("calib/%s: %w", name, err)
	}
	if len(recs) < 2 {
		return nil, fmt.Errorf("calib/%s: no rows", name)
	}
	var rows [][]float64
	for i, rec := range recs[1:] {
		if len(rec) != cols {
			return nil, fmt.Errorf("calib/%s line %d: %d fields, want %d", name, i+2, len(rec), cols)
		}
		row := make([]float64, cols)
		for j, f := range rec {
			v, err := strconv.ParseFloat(f, 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				return nil, fmt.Errorf("calib/%s line %d field %d: %q is not a number >= 0", name, i+2, j+1, f)
			}
			row[j] = v
		}
		if row[cols-1] <= 0 {
			return nil, fmt.Errorf("calib/%s line %d: time must be > 0", name, i+2)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// CalibSource is calib/SOURCE.md.
func CalibSource() string {
	b, _ := calibFS.ReadFile("calib/SOURCE.md")
	return string(b)
}

// IterationPoint is one whole iteration the profiles measure, against the
// model: a decode of Batch requests at Context tokens each, or a prefill
// chunk of Chunk tokens after Context tokens. Measured sums the profiled
// operators (the mlp row at the iteration's tokens and the attention row)
// over the layers; both in seconds.
type IterationPoint struct {
	Kind                  string // "decode" or "prefill"
	Batch, Chunk, Context int
	Measured, Predicted   float64
	MeasuredTPS, ModelTPS float64 // tokens per second: decoded or prefilled
}

// Err is the relative error of the model's throughput.
func (p IterationPoint) Err() float64 { return (p.ModelTPS - p.MeasuredTPS) / p.MeasuredTPS }

// IterationPoints are every decode and prefill row of calib/ whose token
// count has an mlp row of its own, as whole iterations, with c's
// prediction.
func IterationPoints(c Cost) ([]IterationPoint, error) {
	ps, err := iterationRows()
	for i := range ps {
		p := &ps[i]
		sh := Shape{DecodeBatch: p.Batch, DecodeKV: p.Batch * p.Context}
		if p.Kind == "prefill" {
			sh = Shape{PrefillTokens: p.Chunk, PrefillAttn: attnPairs(p.Chunk, p.Context)}
		}
		p.Predicted = c.Seconds(sh)
		n := float64(p.Batch + p.Chunk)
		p.MeasuredTPS, p.ModelTPS = n/p.Measured, n/p.Predicted
	}
	return ps, err
}

// iterationRows are the measured iterations: the attention row plus the
// mlp row at the iteration's tokens, over the layers, in seconds.
func iterationRows() ([]IterationPoint, error) {
	mlp, err := readCalib("mlp.csv", 2)
	if err != nil {
		return nil, err
	}
	lin := map[int]float64{}
	for _, r := range mlp {
		lin[int(r[0])] = r[1]
	}
	perLayer := float64(CalibLayers) / 1000
	var out []IterationPoint
	for _, t := range []struct{ kind, file string }{{"decode", "attention_decode.csv"}, {"prefill", "attention_prefill.csv"}} {
		rows, err := readCalib(t.file, 3)
		if err != nil {
			return nil, err
		}
		for _, r := range rows {
			n, ctx := int(r[0]), int(r[1])
			l, ok := lin[n]
			if !ok {
				continue
			}
			p := IterationPoint{Kind: t.kind, Context: ctx, Measured: (l + r[2]) * perLayer}
			if t.kind == "decode" {
				p.Batch = n
			} else {
				p.Chunk = n
			}
			out = append(out, p)
		}
	}
	return out, nil
}
