package predictor

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/pkg/schema"
)

// stuckBackend ignores its context: it returns only when released.
type stuckBackend struct {
	entered atomic.Int32
	release chan struct{}
}

func (b *stuckBackend) Predict(context.Context, schema.PredictRequest) (schema.PredictReply, error) {
	b.entered.Add(1)
	<-b.release
	return schema.PredictReply{RemainingTokens: 1, RemainingTurns: 1, Source: "stuck"}, nil
}

func withBackend(p interface {
	Predict(context.Context, schema.PredictRequest) (schema.PredictReply, error)
}) func(*Gateway) {
	return func(g *Gateway) { g.backend = p }
}

// A backend that ignores the deadline still gets the caller an answer by
// the deadline; once every slot is held by one, a new request is refused
// as busy.
func TestDeadlineWithoutBackendHelp(t *testing.T) {
	b := &stuckBackend{release: make(chan struct{})}
	e := newEnv(t, testkit.PreferredRedis(t))
	e.start(t, Config{Timeout: 50 * time.Millisecond}, withBackend(b))
	t.Cleanup(func() { close(b.release) }) // runs before the gateway stops

	rep := e.ask(t, request("d-0", "", 1, 1))
	if !strings.Contains(rep.Error, "no prediction within 50ms") {
		t.Fatalf("stuck backend: %+v, want a deadline error", rep)
	}
	for i := 1; i < MaxInFlight; i++ {
		if rep := e.ask(t, request("d-1", "", 1, 1)); rep.Error == "" {
			t.Fatalf("stuck backend answered %+v", rep)
		}
	}
	testkit.Eventually(t, wait, "every slot held", func() bool { return b.entered.Load() == MaxInFlight })
	if rep := e.ask(t, request("d-2", "", 1, 1)); rep.Error != ErrBusy.Error() {
		t.Fatalf("with every slot held: %+v, want %q", rep, ErrBusy)
	}
}

type panicBackend struct{}

func (panicBackend) Predict(context.Context, schema.PredictRequest) (schema.PredictReply, error) {
	panic("boom")
}

type invalidBackend struct{}

func (invalidBackend) Predict(context.Context, schema.PredictRequest) (schema.PredictReply, error) {
	return schema.PredictReply{RemainingTokens: -3, RemainingTurns: 1, Source: "bad"}, nil
}

func TestBackendMisbehaves(t *testing.T) {
	e := newEnv(t, testkit.PreferredRedis(t))
	e.start(t, Config{Timeout: wait}, withBackend(panicBackend{}))
	if rep := e.ask(t, request("p-0", "", 1, 1)); !strings.Contains(rep.Error, "panic: boom") {
		t.Fatalf("panicking backend: %+v", rep)
	}
	if rep := e.ask(t, request("p-1", "", 1, 1)); !strings.Contains(rep.Error, "panic: boom") {
		t.Fatalf("gateway gone after a panic: %+v", rep)
	}

	e2 := newEnv(t, testkit.PreferredRedis(t))
	e2.start(t, Config{Timeout: wait}, withBackend(invalidBackend{}))
	if rep := e2.ask(t, request("i-0", "", 1, 1)); !strings.Contains(rep.Error, "invalid prediction") {
		t.Fatalf("invalid answer: %+v", rep)
	}
}
