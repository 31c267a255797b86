package bus

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/actloop/actloop/internal/testkit"
)

// While the handler runs, the message's ack timer is reset; once it has
// returned, never again, and the heartbeat's goroutine is gone.
func TestInProgress(t *testing.T) {
	tests := []struct {
		name     string
		every    time.Duration
		beats    int32 // the handler returns after this many heartbeats
		err      error
		wantBeat bool
	}{
		{name: "heartbeats while running", every: time.Millisecond, beats: 3, wantBeat: true},
		{name: "heartbeats while failing", every: time.Millisecond, beats: 2, err: errTransient, wantBeat: true},
		{name: "off", every: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			m := newFakeMsg(1)
			h := func(_ context.Context, _ jetstream.Msg) error {
				if tt.beats > 0 {
					testkit.Eventually(t, time.Minute, "heartbeats", func() bool { return m.inProgress.Load() >= tt.beats })
				}
				return tt.err
			}
			err := Chain(h, Acker(discard()), InProgress(tt.every))(context.Background(), m)
			if !errors.Is(err, tt.err) || (err == nil) != (tt.err == nil) {
				t.Fatalf("returned %v, want %v", err, tt.err)
			}
			if got := m.inProgress.Load() > 0; got != tt.wantBeat {
				t.Errorf("heartbeats %d, want some: %v", m.inProgress.Load(), tt.wantBeat)
			}
			// A heartbeat after the ack would show in the outcome.
			if want := map[bool]string{true: "nak_delay", false: "ack"}[tt.err != nil]; m.outcome() != want {
				t.Errorf("settled %q, want %q alone", m.outcome(), want)
			}
		})
	}
}
