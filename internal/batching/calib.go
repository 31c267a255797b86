package batching

import (
	"bytes"
	"embed"
	"encoding/csv"
	"fmt"
	"math"
	"sort"
	"strconv"

	"gonum.org/v1/gonum/mat"
)

// The cost models' inputs: per-layer operator times (the median of each
// profiled point, milliseconds) from Vidur's profiles (microsoft/vidur,
// MIT, commit 7d47513363ec447a741ac5e47241580b47724fbf); calib/SOURCE.md
// says which files, columns and rows.
//
//go:embed calib/*.csv calib/h100-codellama-34b-tp2/*.csv calib/SOURCE.md
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

// H100CodeLlama34BTP2 is the cost model of CodeLlama-34B in bf16 on two
// H100 80GB at tensor parallel 2, as Fit fits it to H100CodeLlama34BTP2Profile
// (a test refits it and compares). Its linear operators and all-reduces are
// Vidur's H100 profiles; its attention is a stand-in scaled from the A100
// Llama-3-8B profile (calib/SOURCE.md says why and how).
var H100CodeLlama34BTP2 = Cost{
	Name:            "codellama-34b/h100-80gb-tp2",
	Fixed:           1.185e-02,
	PerPrefillToken: 5.630e-05,
	PerAttnPair:     1.985e-09,
	DecodeFixed:     3.057e-03,
	PerDecodeSeq:    3.397e-05,
	PerKVToken:      3.264e-08,
	Layers:          CodeLlama34BLayers,
	Source:          "microsoft/vidur profiles, h100/codellama/CodeLlama-34b-Instruct-hf (mlp.csv) and network/h100_pairwise_nvlink (all_reduce.csv), medians, TP 2; attention scaled from a100/meta-llama/Meta-Llama-3-8B",
}

// CodeLlama34BLayers is CodeLlama-34B's layer count (Vidur's
// CodeLlama34BModelConfig: 48 layers, 64 query heads, 8 KV heads, hidden
// size 8192, MLP 22016).
const CodeLlama34BLayers = 48

// Profile is the set of operator profiles one cost model is fitted to:
// files under calib/, each a header and rows of numbers whose last is
// milliseconds per layer.
type Profile struct {
	// Cost names the model fitted (Cost.Name, Source and Layers).
	Cost Cost
	// Linear is the file of the operators that see each token once
	// (num_tokens, ms).
	Linear string
	// DecodeAttn (batch_size, kv_cache_size, ms) and PrefillAttn
	// (prefill_chunk_size, kv_cache_size, ms) are attention's files;
	// DecodeScale and PrefillScale multiply their times (1 where they were
	// profiled on this model and GPU).
	DecodeAttn, PrefillAttn   string
	DecodeScale, PrefillScale float64
	// AllReduce is the file of all-reduce times by size (size_bytes, ms)
	// at the profile's tensor parallel degree, "" at tensor parallel 1.
	// An iteration of n tokens reduces n × TokenBytes twice a layer (after
	// attention and after the MLP, as Vidur's execution_time.py adds it).
	AllReduce  string
	TokenBytes int
}

// A100Llama8BProfile is what A100Llama8B is fitted to.
var A100Llama8BProfile = Profile{Cost: A100Llama8B, Linear: "mlp.csv",
	DecodeAttn: "attention_decode.csv", PrefillAttn: "attention_prefill.csv", DecodeScale: 1, PrefillScale: 1}

// H100CodeLlama34BTP2Profile is what H100CodeLlama34BTP2 is fitted to. Its
// attention is the A100 Llama-3-8B rows scaled: Vidur's H100 attention
// profile of CodeLlama-34B is held in Git LFS and no copy of it could be
// read. Each GPU computes 32 query heads over 4 KV heads of 128 dimensions
// (Llama-3-8B at TP 1: 32 over 8), so prefill attention does the same work
// and decode reads half the KV; the H100/A100 ratio is that of Vidur's own
// CodeLlama-34B TP 2 linear profiles on both GPUs: 0.568 where they are
// bound by memory (1 to 16 tokens), 0.343 where bound by compute (2048
// tokens and more).
var H100CodeLlama34BTP2Profile = Profile{Cost: H100CodeLlama34BTP2, Linear: "h100-codellama-34b-tp2/mlp.csv",
	DecodeAttn: "attention_decode.csv", PrefillAttn: "attention_prefill.csv",
	DecodeScale: 0.5 * 0.568, PrefillScale: 1 * 0.343,
	AllReduce: "h100-codellama-34b-tp2/all_reduce.csv", TokenBytes: 8192 * 2}

// Profiles are the calibrated machines' profiles.
var Profiles = []Profile{A100Llama8BProfile, H100CodeLlama34BTP2Profile}

// ProfileOf is the profile the cost model named name was fitted to.
func ProfileOf(name string) (Profile, error) {
	for _, p := range Profiles {
		if p.Cost.Name == name {
			return p, nil
		}
	}
	return Profile{}, fmt.Errorf("%w: %q", ErrNoCalibration, name)
}

// FitA100Llama8B fits A100Llama8B to its profiles (Fit).
func FitA100Llama8B() (Cost, error) { return Fit(A100Llama8BProfile) }

// Fit fits the cost model to whole iterations built from p's profiles
// (Profile.Points): least squares on relative error, which is the relative
// error of the throughput the model predicts.
func Fit(p Profile) (Cost, error) {
	ps, err := p.rows()
	if err != nil {
		return Cost{}, err
	}
	c, err := fitRelative(ps, func(pt IterationPoint) []float64 {
		if pt.Kind == "decode" {
			return []float64{1, 0, 0, 1, float64(pt.Batch), float64(pt.Batch * pt.Context)}
		}
		return []float64{1, float64(pt.Chunk), AttnPairs(pt.Chunk, pt.Context), 0, 0, 0}
	})
	if err != nil {
		return Cost{}, err
	}
	return Cost{Name: p.Cost.Name, Layers: p.Cost.Layers, Source: p.Cost.Source,
		Fixed: c[0], PerPrefillToken: c[1], PerAttnPair: c[2], DecodeFixed: c[3], PerDecodeSeq: c[4], PerKVToken: c[5]}, nil
}

// AttnPairs is the query-key pairs of a prefill chunk of n tokens after
// ctx tokens (Shape.PrefillAttn).
func AttnPairs(n, ctx int) float64 { return float64(n) * (float64(ctx) + float64(n+1)/2) }

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

// IterationPoints are the iterations (Profile.Points) of the profile c
// was fitted to (ProfileOf c.Name), with c's prediction.
func IterationPoints(c Cost) ([]IterationPoint, error) {
	p, err := ProfileOf(c.Name)
	if err != nil {
		return nil, err
	}
	return p.Points(c)
}

// Points are every decode and prefill row of p's attention files whose
// token count has a row of its own in p's linear file, as whole
// iterations, with c's prediction.
func (p Profile) Points(c Cost) ([]IterationPoint, error) {
	ps, err := p.rows()
	for i := range ps {
		pt := &ps[i]
		sh := Shape{DecodeBatch: pt.Batch, DecodeKV: pt.Batch * pt.Context}
		if pt.Kind == "prefill" {
			sh = Shape{PrefillTokens: pt.Chunk, PrefillAttn: AttnPairs(pt.Chunk, pt.Context)}
		}
		pt.Predicted = c.Seconds(sh)
		n := float64(pt.Batch + pt.Chunk)
		pt.MeasuredTPS, pt.ModelTPS = n/pt.Measured, n/pt.Predicted
	}
	return ps, err
}

// rows are the measured iterations: the attention row (scaled) plus the
// linear row at the iteration's tokens and, under tensor parallelism, two
// all-reduces of its tokens, over the layers, in seconds.
func (p Profile) rows() ([]IterationPoint, error) {
	mlp, err := readCalib(p.Linear, 2)
	if err != nil {
		return nil, err
	}
	lin := map[int]float64{}
	for _, r := range mlp {
		lin[int(r[0])] = r[1]
	}
	var reduce [][]float64
	if p.AllReduce != "" {
		if reduce, err = readCalib(p.AllReduce, 2); err != nil {
			return nil, err
		}
	}
	perLayer := float64(p.Cost.Layers) / 1000
	var out []IterationPoint
	for _, t := range []struct {
		kind, file string
		scale      float64
	}{{"decode", p.DecodeAttn, p.DecodeScale}, {"prefill", p.PrefillAttn, p.PrefillScale}} {
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
			if reduce != nil {
				l += 2 * interpolate(reduce, float64(n*p.TokenBytes))
			}
			pt := IterationPoint{Kind: t.kind, Context: ctx, Measured: (l + t.scale*r[2]) * perLayer}
			if t.kind == "decode" {
				pt.Batch = n
			} else {
				pt.Chunk = n
			}
			out = append(out, pt)
		}
	}
	return out, nil
}

// interpolate is the time at x of rows (x, ms) sorted by x: linear between
// the two rows around it, the nearest row's outside them.
func interpolate(rows [][]float64, x float64) float64 {
	i := sort.Search(len(rows), func(i int) bool { return rows[i][0] >= x })
	switch {
	case i == 0:
		return rows[0][1]
	case i == len(rows):
		return rows[len(rows)-1][1]
	}
	a, b := rows[i-1], rows[i]
	return a[1] + (b[1]-a[1])*(x-a[0])/(b[0]-a[0])
}
