package predict

import (
	"errors"
	"math"
	"slices"

	"gonum.org/v1/gonum/mat"

	"github.com/actloop/actloop/pkg/schema"
)

// The learned predictor is a ridge regression of log(1 + remaining
// tokens) and log(1 + remaining turns) on features of the conversation so
// far (Features), kept as its sufficient statistics (Regression) so that
// they add up: every predictor-gw instance adds what it observes to one
// copy in Redis, and the virtual engine keeps one in memory. Its decisions
// are pure; Learned is the I/O around them.

// Features, in order: a constant; log(1 + x) of the turns, generated
// tokens, context, prompt and last observation tokens; whether the last
// command failed; the command's kind, one-hot (schema.CommandKinds); and
// History's answer: whether it had one, log(1 + its remaining tokens and
// turns), and whether it came from the trajectory's group (its siblings).
const (
	featHistory = 7 + 8 // the index of the first of History's features
	NumFeatures = featHistory + 4
)

// Features is the learned model's feature vector of req, given History's
// answer to it (ok false: History had none).
func Features(req schema.PredictRequest, hist schema.PredictReply, ok bool) []float64 {
	x := make([]float64, NumFeatures)
	x[0] = 1
	x[1] = math.Log1p(float64(req.Turns))
	x[2] = math.Log1p(float64(req.GenTokens))
	x[3] = math.Log1p(float64(req.ContextTokens))
	x[4] = math.Log1p(float64(req.PromptTokens))
	x[5] = math.Log1p(float64(req.ObsTokens))
	if req.ExitCode != 0 {
		x[6] = 1
	}
	if k := slices.Index(schema.CommandKinds, req.CommandKind); k >= 0 {
		x[7+k] = 1
	}
	if ok {
		x[featHistory] = 1
		x[featHistory+1] = math.Log1p(math.Max(hist.RemainingTokens, 0))
		x[featHistory+2] = math.Log1p(math.Max(hist.RemainingTurns, 0))
		if hist.Source == SourceGroup {
			x[featHistory+3] = 1
		}
	}
	return x
}

// Regression holds a ridge regression's sufficient statistics over
// NumFeatures features and two targets (remaining tokens and turns, each
// as log(1 + y)), with exponential forgetting: Stats()[0] is the weight of
// the examples, then the upper triangle of XᵀX row by row, then Xᵀy for
// tokens and for turns. The zero value is empty.
type Regression struct {
	s []float64
}

// regressionLen is the length of Regression's statistics.
const regressionLen = 1 + NumFeatures*(NumFeatures+1)/2 + 2*NumFeatures

// Stats returns r's statistics (a copy), in the order the type documents.
func (r *Regression) Stats() []float64 {
	r.init()
	return slices.Clone(r.s)
}

// SetStats replaces r's statistics; a slice of the wrong length leaves r
// empty.
func (r *Regression) SetStats(s []float64) {
	r.s = nil
	if len(s) == regressionLen {
		r.s = slices.Clone(s)
	}
}

func (r *Regression) init() {
	if r.s == nil {
		r.s = make([]float64, regressionLen)
	}
}

// Delta returns the statistics of one trajectory's examples: each asked
// at (tokens, turns) with features x, against its final totals.
func Delta(asks []Ask, total Total) []float64 {
	var r Regression
	for _, a := range asks {
		r.Add(a.X, float64(total.Tokens-a.Tokens), float64(total.Turns-a.Turns))
	}
	return r.Stats()
}

// Ask is one prediction asked of a trajectory: how far it had come, and
// its features then.
type Ask struct {
	Tokens, Turns int
	X             []float64
}

// Add adds an example: features x, and the remaining tokens and turns it
// turned out to have (clamped at 0).
func (r *Regression) Add(x []float64, tokens, turns float64) {
	r.init()
	if len(x) != NumFeatures {
		return
	}
	yt, yu := math.Log1p(math.Max(tokens, 0)), math.Log1p(math.Max(turns, 0))
	r.s[0]++
	k := 1
	for i := range NumFeatures {
		for j := i; j < NumFeatures; j++ {
			r.s[k] += x[i] * x[j]
			k++
		}
	}
	for i := range NumFeatures {
		r.s[k+i] += x[i] * yt
		r.s[k+NumFeatures+i] += x[i] * yu
	}
}

// Merge scales r's statistics by decay (1: keep all; below: forget) and
// adds delta's, as the Redis copy does in one script.
func (r *Regression) Merge(decay float64, delta []float64) {
	r.init()
	if len(delta) != regressionLen {
		return
	}
	for i := range r.s {
		r.s[i] = r.s[i]*decay + delta[i]
	}
}

// Examples is the weight of r's examples (their count without
// forgetting).
func (r *Regression) Examples() float64 {
	if r.s == nil {
		return 0
	}
	return r.s[0]
}

// ErrUnfit: the regression's equations have no solution (too few or
// degenerate examples).
var ErrUnfit = errors.New("learned predictor: cannot fit the examples")

// Fit solves the ridge regression with penalty lambda on every weight but
// the constant's.
func (r *Regression) Fit(lambda float64) (Model, error) {
	r.init()
	a := mat.NewSymDense(NumFeatures, nil)
	k := 1
	for i := range NumFeatures {
		for j := i; j < NumFeatures; j++ {
			v := r.s[k]
			if i == j && i > 0 {
				v += lambda
			}
			a.SetSym(i, j, v)
			k++
		}
	}
	var ch mat.Cholesky
	if !ch.Factorize(a) {
		return Model{}, ErrUnfit
	}
	m := Model{Examples: r.s[0]}
	for t := range 2 {
		b := mat.NewVecDense(NumFeatures, slices.Clone(r.s[k+t*NumFeatures:k+(t+1)*NumFeatures]))
		var w mat.VecDense
		if err := ch.SolveVecTo(&w, b); err != nil {
			return Model{}, ErrUnfit
		}
		m.W[t] = w.RawVector().Data
	}
	return m, nil
}

// Trained fits r when it holds at least minExamples examples; ok is false
// while it does not or cannot be fitted.
func (r *Regression) Trained(lambda, minExamples float64) (m Model, ok bool) {
	if r.Examples() < minExamples {
		return Model{}, false
	}
	m, err := r.Fit(lambda)
	return m, err == nil
}

// Model is a fitted regression.
type Model struct {
	W        [2][]float64 // weights for log(1 + tokens), log(1 + turns)
	Examples float64
}

// maxLog bounds a prediction's logarithm: e^16 ≈ 8.9 M tokens, beyond any
// context.
const maxLog = 16

// Predict returns the remaining tokens and turns m predicts for features x.
func (m Model) Predict(x []float64) (tokens, turns float64) {
	y := [2]float64{}
	for t := range 2 {
		for i, w := range m.W[t] {
			y[t] += w * x[i]
		}
		y[t] = math.Expm1(math.Min(math.Max(y[t], 0), maxLog))
	}
	return y[0], math.Max(y[1], 0)
}
