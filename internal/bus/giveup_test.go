package bus

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

var errEventsDown = errors.New("events stream unavailable")

// A message is given up on when its error is Fatal or its deliveries ran
// out, never while its Runner stops or when it is malformed; a failed
// report hands it back.
func TestGiveUp(t *testing.T) {
	errWait := Wait(time.Second, errors.New("held"))
	fatal := Fatal(errors.New("sandbox lost"))
	malformed := Malformed(errors.New("bad"))
	tests := []struct {
		name       string
		err        error
		delivered  uint64
		maxDeliver int
		stopping   bool
		noReport   bool  // GiveUp without a report function
		reportErr  error // the report fails with it
		wantReport bool
		wantFatal  bool
		wantRetry  bool
		wantErr    error
	}{
		{name: "done", delivered: 5, maxDeliver: 3},
		{name: "transient, deliveries left", err: errTransient, delivered: 2, maxDeliver: 3, wantErr: errTransient},
		{name: "transient, last delivery", err: errTransient, delivered: 3, maxDeliver: 3,
			wantReport: true, wantFatal: true, wantErr: errTransient},
		{name: "transient, past the last delivery", err: errTransient, delivered: 7, maxDeliver: 3,
			wantReport: true, wantFatal: true, wantErr: errTransient},
		{name: "a copy of a running step is never given up on", err: errBusy, delivered: 30, maxDeliver: 3, wantErr: errBusy},
		{name: "no limit", err: errTransient, delivered: 1000, maxDeliver: 0, wantErr: errTransient},
		{name: "a step that waits is never given up on", err: errWait, delivered: 30, maxDeliver: 3, wantErr: errWait},
		{name: "no metadata: first delivery", err: errTransient, delivered: 0, maxDeliver: 2, wantErr: errTransient},
		{name: "fatal, first delivery", err: fatal, delivered: 1, maxDeliver: 3, wantReport: true, wantFatal: true, wantErr: fatal},
		{name: "fatal, no limit", err: fatal, delivered: 1, maxDeliver: 0, wantReport: true, wantFatal: true, wantErr: fatal},
		{name: "fatal, no report function", err: fatal, delivered: 1, maxDeliver: 3, noReport: true, wantFatal: true, wantErr: fatal},
		{name: "malformed: dead-lettered, not given up", err: malformed, delivered: 3, maxDeliver: 3, wantErr: malformed},
		{name: "stopping: handed back", err: errTransient, delivered: 3, maxDeliver: 3, stopping: true, wantErr: errTransient},
		{name: "fatal while stopping: handed back", err: fatal, delivered: 1, maxDeliver: 3, stopping: true,
			wantFatal: true, wantErr: fatal}, // not reported; Acker naks it
		{name: "report fails", err: errTransient, delivered: 3, maxDeliver: 3, reportErr: errEventsDown,
			wantReport: true, wantRetry: true, wantErr: errEventsDown},
		{name: "report of a fatal error fails", err: fatal, delivered: 1, maxDeliver: 3, reportErr: errEventsDown,
			wantReport: true, wantRetry: true, wantFatal: true, wantErr: fatal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var reported []error
			report := func(_ context.Context, _ jetstream.Msg, err error) error {
				mu.Lock()
				defer mu.Unlock()
				reported = append(reported, err)
				return tt.reportErr
			}
			if tt.noReport {
				report = nil
			}
			m := newFakeMsg(tt.delivered)
			err := GiveUp(tt.maxDeliver, report)(returning(tt.err))(ctxFor(tt.stopping), m)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("returned %v, want %v", err, tt.wantErr)
			}
			if IsFatal(err) != tt.wantFatal {
				t.Errorf("returned %v: fatal %v, want %v", err, IsFatal(err), tt.wantFatal)
			}
			var retry *retryError
			if errors.As(err, &retry) != tt.wantRetry {
				t.Errorf("returned %v: retry %v, want %v", err, !tt.wantRetry, tt.wantRetry)
			}
			if (len(reported) == 1) != tt.wantReport || len(reported) > 1 {
				t.Fatalf("reported %v, want a report: %v", reported, tt.wantReport)
			}
			if tt.wantReport && reported[0] != tt.err {
				t.Errorf("reported %v, want the handler's error %v", reported[0], tt.err)
			}
			if o := m.outcome(); o != "" {
				t.Errorf("GiveUp settled the message: %s", o)
			}
		})
	}
}
