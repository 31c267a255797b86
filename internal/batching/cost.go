package batching

import (
	"errors"
	"fmt"
)

// Shape is what an iteration computes, as its time depends on it.
type Shape struct {
	// PrefillTokens is the input tokens computed (every chunk in it).
	PrefillTokens int
	// PrefillAttn is the query-key pairs of the prefill chunks' attention:
	// for a chunk of n tokens after c tokens of context, n × (c + (n+1)/2).
	PrefillAttn float64
	// DecodeBatch is the requests decoding one token each; DecodeKV the
	// KV tokens their attention reads (each one's context).
	DecodeBatch, DecodeKV int
}

// Cost is an iteration's time as a linear function of its shape, in
// seconds:
//
//	Fixed
//	  + [prefill] PerPrefillToken × PrefillTokens + PerAttnPair × PrefillAttn
//	  + [decode]  DecodeFixed + PerDecodeSeq × DecodeBatch + PerKVToken × DecodeKV
//
// Fixed is the floor of any iteration (reading the weights once, launching
// the kernels); the per-token terms carry the operators that see each token
// once (projections, MLP, norms) with attention's linear part; the pair
// term is prefill attention's quadratic work and the KV term decode's
// reading of each request's context.
type Cost struct {
	Name            string
	Fixed           float64
	PerPrefillToken float64
	PerAttnPair     float64
	DecodeFixed     float64
	PerDecodeSeq    float64
	PerKVToken      float64
	Layers          int // the model's layers (documentation)
	Source          string
}

// Seconds is the time of an iteration of shape sh.
func (c Cost) Seconds(sh Shape) float64 {
	t := c.Fixed
	if sh.PrefillTokens > 0 {
		t += c.PerPrefillToken*float64(sh.PrefillTokens) + c.PerAttnPair*sh.PrefillAttn
	}
	if sh.DecodeBatch > 0 {
		t += c.DecodeFixed + c.PerDecodeSeq*float64(sh.DecodeBatch) + c.PerKVToken*float64(sh.DecodeKV)
	}
	return t
}

// Validate reports a model that could give an iteration no time.
func (c Cost) Validate() error {
	if c.Fixed <= 0 || c.DecodeFixed < 0 || c.PerPrefillToken < 0 || c.PerAttnPair < 0 || c.PerDecodeSeq < 0 || c.PerKVToken < 0 {
		return fmt.Errorf("server model: cost %q: the fixed term must be > 0 and the others >= 0: %+v", c.Name, c)
	}
	return nil
}

// ErrNoCalibration is returned for a cost model name not known.
var ErrNoCalibration = errors.New("unknown cost model")
