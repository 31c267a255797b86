// Package predicttest is the conformance suite every predict.Predictor
// backend runs (as go-cloud's drivertest does for its drivers).
package predicttest

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/actloop/actloop/internal/predict"
	"github.com/actloop/actloop/pkg/schema"
)

// Setup is one backend ready for the suite.
type Setup struct {
	Predictor predict.Predictor
	// Known is a request the backend can answer; Want, when set, is its
	// answer exactly.
	Known schema.PredictRequest
	Want  *schema.PredictReply
	// Unknown is a request it cannot answer (no evidence, no such
	// trajectory); UnknownErr, when set, is what its error must match.
	Unknown    schema.PredictRequest
	UnknownErr error
}

// Run runs the suite; setup builds a fresh backend for each test.
func Run(t *testing.T, setup func(t *testing.T) Setup) {
	t.Run("Answers", func(t *testing.T) {
		s := setup(t)
		rep, err := s.Predictor.Predict(context.Background(), s.Known)
		if err != nil {
			t.Fatalf("Predict(known): %v", err)
		}
		checkReply(t, rep)
		if s.Want != nil && rep != *s.Want {
			t.Fatalf("Predict(known) = %+v, want %+v", rep, *s.Want)
		}
	})
	t.Run("Deterministic", func(t *testing.T) {
		s := setup(t)
		a, err := s.Predictor.Predict(context.Background(), s.Known)
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.Predictor.Predict(context.Background(), s.Known)
		if err != nil {
			t.Fatal(err)
		}
		if a != b {
			t.Fatalf("same request, different answers: %+v, %+v", a, b)
		}
	})
	t.Run("Unknown", func(t *testing.T) {
		s := setup(t)
		rep, err := s.Predictor.Predict(context.Background(), s.Unknown)
		if err == nil {
			t.Fatalf("Predict(unknown) = %+v, want an error", rep)
		}
		if s.UnknownErr != nil && !errors.Is(err, s.UnknownErr) {
			t.Fatalf("Predict(unknown): %v, want %v", err, s.UnknownErr)
		}
		if err.Error() == "" {
			t.Fatal("empty error text: the caller has nothing to report")
		}
	})
	t.Run("Cancelled", func(t *testing.T) {
		s := setup(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		rep, err := s.Predictor.Predict(ctx, s.Known)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Predict on a cancelled context = %+v, %v; want context.Canceled", rep, err)
		}
	})
	t.Run("Concurrent", func(t *testing.T) {
		s := setup(t)
		want, err := s.Predictor.Predict(context.Background(), s.Known)
		if err != nil {
			t.Fatal(err)
		}
		const n = 16
		errs := make([]error, n)
		reps := make([]schema.PredictReply, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				req := s.Known
				if i%2 == 1 {
					req = s.Unknown
				}
				reps[i], errs[i] = s.Predictor.Predict(context.Background(), req)
			})
		}
		wg.Wait()
		for i := range n {
			switch {
			case i%2 == 0 && (errs[i] != nil || reps[i] != want):
				t.Errorf("concurrent known %d: %+v, %v; want %+v", i, reps[i], errs[i], want)
			case i%2 == 1 && errs[i] == nil:
				t.Errorf("concurrent unknown %d: %+v, want an error", i, reps[i])
			}
		}
	})
}

// checkReply checks what every answer must be.
func checkReply(t testing.TB, rep schema.PredictReply) {
	t.Helper()
	if rep.V != schema.Version || rep.Error != "" || rep.Source == "" {
		t.Fatalf("reply %+v: want v %d, a source and no error", rep, schema.Version)
	}
	if err := rep.Validate(); err != nil {
		t.Fatalf("reply %+v: %v", rep, err)
	}
}
