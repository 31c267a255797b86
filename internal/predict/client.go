package predict

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/pkg/schema"
	"github.com/nats-io/nats.go"
)

// ErrNoPrediction: predictor-gw did not answer in time, or answered that it
// cannot predict; scheduling treats the trajectory's length as unknown
// (fcfs among the unknown).
var ErrNoPrediction = errors.New("no prediction")

// Client asks predictor-gw over NATS request-reply. It logs the first
// failure and the recovery after it, not every failure.
type Client struct {
	NC      *nats.Conn
	Timeout time.Duration // 0 disables predictions
	Log     *slog.Logger

	failing  atomic.Bool
	Failures atomic.Int64 // requests that got no prediction
}

// Predict returns the predicted remaining work of the trajectory in req.
func (p *Client) Predict(ctx context.Context, req schema.PredictRequest) (schema.PredictReply, error) {
	if p.Timeout <= 0 {
		return schema.PredictReply{}, fmt.Errorf("%w: predictions are off", ErrNoPrediction)
	}
	req.V = schema.Version
	data, err := json.Marshal(req)
	if err != nil {
		return schema.PredictReply{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, p.Timeout)
	defer cancel()
	rep, err := p.ask(ctx, data)
	if err != nil {
		p.Failures.Add(1)
		if !p.failing.Swap(true) {
			p.Log.Warn("no prediction: scheduling falls back to fcfs for unpredicted trajectories until predictor-gw answers",
				"traj_id", req.TrajID, "error", err)
		}
		return schema.PredictReply{}, err
	}
	if p.failing.Swap(false) {
		p.Log.Info("predictions are back")
	}
	return rep, nil
}

func (p *Client) ask(ctx context.Context, data []byte) (schema.PredictReply, error) {
	msg, err := p.NC.RequestWithContext(ctx, bus.SubjectPredict, data)
	if err != nil {
		return schema.PredictReply{}, fmt.Errorf("%w: %v", ErrNoPrediction, err)
	}
	rep, err := schema.Decode[schema.PredictReply](msg.Data)
	if err != nil {
		return schema.PredictReply{}, fmt.Errorf("%w: reply: %v", ErrNoPrediction, err)
	}
	if rep.Error != "" {
		return schema.PredictReply{}, fmt.Errorf("%w: %s", ErrNoPrediction, rep.Error)
	}
	return rep, nil
}
