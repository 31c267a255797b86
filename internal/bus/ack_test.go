package bus

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"
)

var (
	errTransient = errors.New("redis: connection refused")
	// errBusy stands for traj.ErrBusy (traj imports bus): a second copy of
	// a step whose first copy runs here.
	errBusy = Redundant(fmt.Errorf("trajectory t1, step 3: %w", errors.New("a step of this trajectory is running here")))
)

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Acker maps each outcome to its ack; the first match of its list wins.
func TestAcker(t *testing.T) {
	tests := []struct {
		name      string
		err       error
		stopping  bool
		delivered uint64
		want      string
		wantDelay [2]time.Duration // NakWithDelay's bounds
	}{
		{name: "done", want: "ack", delivered: 1},
		{name: "done while stopping", stopping: true, want: "ack", delivered: 1},
		{name: "malformed", err: Malformed(errors.New("field x: missing")), delivered: 1, want: "term:malformed"},
		{name: "malformed while stopping", err: Malformed(errors.New("bad")), stopping: true, delivered: 1, want: "term:malformed"},
		{name: "fatal", err: Fatal(errors.New("sandbox lost")), delivered: 1, want: "term:gave up"},
		{name: "fatal while stopping: handed back", err: Fatal(errors.New("sandbox lost")), stopping: true, delivered: 1, want: "nak"},
		{name: "transient while stopping: handed back", err: errTransient, stopping: true, delivered: 4, want: "nak"},
		{name: "transient, first delivery", err: errTransient, delivered: 1, want: "nak_delay",
			wantDelay: [2]time.Duration{125 * time.Millisecond, 250 * time.Millisecond}},
		{name: "transient, third delivery", err: errTransient, delivered: 3, want: "nak_delay",
			wantDelay: [2]time.Duration{500 * time.Millisecond, time.Second}},
		{name: "transient, no metadata: first delivery", err: errTransient, delivered: 0, want: "nak_delay",
			wantDelay: [2]time.Duration{125 * time.Millisecond, 250 * time.Millisecond}},
		{name: "transient, capped", err: errTransient, delivered: 50, want: "nak_delay",
			wantDelay: [2]time.Duration{15 * time.Second, 30 * time.Second}},
		{name: "a copy of a step running here: looked at again later", err: errBusy, delivered: 2, want: "nak_delay",
			wantDelay: [2]time.Duration{250 * time.Millisecond, 500 * time.Millisecond}},
		{name: "waits (held): after its own delay, however often delivered", err: Wait(time.Second, errTransient), delivered: 90,
			want: "nak_delay", wantDelay: [2]time.Duration{time.Second, time.Second}},
		{name: "waits while stopping: handed back at once", err: Wait(time.Second, errTransient), stopping: true, delivered: 1,
			want: "nak"},
		{name: "retry asked for", err: retryAfter(3*time.Second, errTransient), delivered: 1, want: "nak_delay",
			wantDelay: [2]time.Duration{3 * time.Second, 3 * time.Second}},
		{name: "retry of a malformed message (dead letter failed)", err: retryAfter(DeadLetterRetry, Malformed(errors.New("bad"))),
			delivered: 1, want: "nak_delay", wantDelay: [2]time.Duration{DeadLetterRetry, DeadLetterRetry}},
		{name: "retry of a fatal error (report failed) while stopping", err: retryAfter(time.Second, Fatal(errTransient)),
			stopping: true, delivered: 1, want: "nak_delay", wantDelay: [2]time.Duration{time.Second, time.Second}},
		{name: "panic", err: fmt.Errorf("%w: boom", ErrPanic), delivered: 1, want: "nak_delay",
			wantDelay: [2]time.Duration{125 * time.Millisecond, 250 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newFakeMsg(tt.delivered)
			err := Acker(discard())(returning(tt.err))(ctxFor(tt.stopping), m)
			if !errors.Is(err, tt.err) {
				t.Errorf("returned %v, want %v passed on", err, tt.err)
			}
			if got := m.outcome(); got != tt.want {
				t.Fatalf("settled %q, want %q", got, tt.want)
			}
			if tt.want == "nak_delay" && (m.delay < tt.wantDelay[0] || m.delay > tt.wantDelay[1]) {
				t.Errorf("delay %v, want within %v", m.delay, tt.wantDelay)
			}
		})
	}
}

// The back-off doubles from 250ms by delivery up to 30s, with jitter in
// its upper half.
func TestBackoff(t *testing.T) {
	tests := []struct {
		delivered uint64
		want      time.Duration
	}{
		{0, 250 * time.Millisecond},
		{1, 250 * time.Millisecond},
		{2, 500 * time.Millisecond},
		{4, 2 * time.Second},
		{8, 30 * time.Second},
		{1000, 30 * time.Second},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.delivered), func(t *testing.T) {
			if got := backoffCeiling(tt.delivered); got != tt.want {
				t.Fatalf("ceiling %v, want %v", got, tt.want)
			}
			for range 100 {
				if d := backoff(tt.delivered); d < tt.want/2 || d > tt.want {
					t.Fatalf("backoff %v outside [%v, %v]", d, tt.want/2, tt.want)
				}
			}
		})
	}
}
