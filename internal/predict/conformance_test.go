package predict_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/predict"
	"github.com/actloop/actloop/internal/predict/predicttest"
	"github.com/actloop/actloop/internal/sim"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/schema"
)

func TestHistoryConformance(t *testing.T) {
	for _, kind := range testkit.RedisKinds(t) {
		t.Run(kind, func(t *testing.T) {
			predicttest.Run(t, func(t *testing.T) predicttest.Setup {
				rdb, _ := testkit.StartRedis(t, kind)
				h := predict.NewHistory(rdb, predict.HistoryConfig{})
				observe(t, h, result("g1-0", "g1", "", 1000, 5), result("g1-1", "g1", "", 2000, 8))
				return predicttest.Setup{
					Predictor: h,
					Known:     request("g1-2", "g1", "", 2, 400),
					Want: &schema.PredictReply{V: schema.Version, RemainingTokens: 1100, RemainingTurns: 4.5,
						Source: predict.SourceGroup},
					// Two results in all: below MinGlobal.
					Unknown:    request("g2-0", "g2", "", 0, 0),
					UnknownErr: predict.ErrNoEvidence,
				}
			})
		})
	}
}

func TestHTTPConformance(t *testing.T) {
	predicttest.Run(t, func(t *testing.T) predicttest.Setup {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var req schema.PredictRequest
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			if req.TrajID == "unknown" {
				http.Error(w, "no such model", http.StatusNotFound)
				return
			}
			_ = json.NewEncoder(w).Encode(map[string]float64{
				"remaining_tokens": float64(10*req.GenTokens + 7), "remaining_turns": float64(req.Turns + 1)})
		}))
		t.Cleanup(srv.Close)
		p := predict.NewHTTP(srv.URL, time.Minute)
		t.Cleanup(func() { _ = p.Close() })
		return predicttest.Setup{
			Predictor: p,
			Known:     request("a", "g", "", 3, 50),
			Want: &schema.PredictReply{V: schema.Version, RemainingTokens: 507, RemainingTurns: 4,
				Source: predict.SourceHTTP},
			Unknown: request("unknown", "g", "", 0, 0),
		}
	})
}

func TestOracleConformance(t *testing.T) {
	for _, kind := range testkit.RedisKinds(t) {
		t.Run(kind, func(t *testing.T) {
			predicttest.Run(t, func(t *testing.T) predicttest.Setup {
				simURL := startSim(t, sim.Config{Seed: 11, MaxTurns: 8})
				rdb, _ := testkit.StartRedis(t, kind)
				st := traj.New(rdb, nil)
				game := playLong(t, simURL, 4)
				storeAt(t, st, "traj-2", game, 2, 0)
				o := predict.NewOracle(st, chat, simURL, time.Minute)
				t.Cleanup(func() { _ = o.Close() })
				want := game.remaining(2)
				return predicttest.Setup{
					Predictor:  o,
					Known:      request("traj-2", "", "", 2, game.generated(2)),
					Want:       &want,
					Unknown:    request("missing", "", "", 0, 0),
					UnknownErr: traj.ErrNotFound,
				}
			})
		})
	}
}

// observer is a backend that learns from results.
type observer interface {
	Observe(context.Context, schema.ResultHead) error
}

func observe(t testing.TB, h observer, rs ...schema.Result) {
	t.Helper()
	for _, r := range rs {
		if err := h.Observe(context.Background(), r.ResultHead); err != nil {
			t.Fatalf("Observe(%s): %v", r.TrajID, err)
		}
	}
}

func result(id, group, family string, tokens, turns int) schema.Result {
	return schema.Result{ResultHead: schema.ResultHead{V: schema.Version, TrajID: id, GroupID: group, Family: family,
		Status: schema.StatusSubmitted, GenTokens: tokens, Turns: turns}}
}

func request(id, group, family string, turns, tokens int) schema.PredictRequest {
	return schema.PredictRequest{V: schema.Version, TrajID: id, GroupID: group, Family: family,
		Turns: turns, GenTokens: tokens, TurnSeq: int64(2 * turns)}
}
