package predict

import (
	"context"
	"errors"

	"github.com/actloop/actloop/pkg/schema"
)

// Predictor predicts the remaining work of the trajectory req describes.
// A reply without error has V set, Source naming the backend and evidence,
// and non-negative remaining tokens and turns.
type Predictor interface {
	Predict(ctx context.Context, req schema.PredictRequest) (schema.PredictReply, error)
}

// Sources a reply names.
const (
	SourceGroup  = "history:group"  // History, from the trajectory's group
	SourceFamily = "history:family" // History, from its task family
	SourceGlobal = "history:global" // History, from every trajectory
	SourceHTTP   = "http"           // an external model server
	SourceOracle = "oracle"         // the simulator's own plan
)

// Errors.
var (
	// ErrNoEvidence: History has not seen enough finished trajectories to
	// predict this one.
	ErrNoEvidence = errors.New("no finished trajectories to learn from yet")
	// ErrBadReply: a model server or the simulator answered something that
	// is not a prediction.
	ErrBadReply = errors.New("bad prediction reply")
	// ErrNotSimulator: the oracle's server is not actloop's simulator.
	ErrNotSimulator = errors.New("the oracle predictor is for the actloop simulator only (benchmarks): " +
		"its server's /get_model_info does not report \"actloop_simulator\": true")
)
