package bus

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Chain wraps the first middleware outermost.
func TestChainOrder(t *testing.T) {
	var got []string
	mw := func(name string) Middleware {
		return func(next Handler) Handler {
			return func(ctx context.Context, m jetstream.Msg) error {
				got = append(got, name+">")
				err := next(ctx, m)
				got = append(got, "<"+name)
				return err
			}
		}
	}
	h := func(context.Context, jetstream.Msg) error {
		got = append(got, "h")
		return errTransient
	}
	if err := Chain(h, mw("a"), mw("b"))(context.Background(), newFakeMsg(1)); !errors.Is(err, errTransient) {
		t.Fatalf("returned %v", err)
	}
	if s := strings.Join(got, " "); s != "a> b> h <b <a" {
		t.Fatalf("order %s", s)
	}
	if Chain(h) == nil {
		t.Fatal("no middleware: want the handler")
	}
}

var errBad = errors.New("field x: missing")

// The Runner's chain settles each outcome as its doc says: every middleware
// together, on a fake message.
func TestRunnerChainOutcomes(t *testing.T) {
	tests := []struct {
		name        string
		h           Handler
		delivered   uint64
		stopping    bool
		dlFail      error
		reportErr   error
		reportPanic bool
		want        string
		wantLetters int
		wantReports int
		wantErr     error
	}{
		{name: "done", h: returning(nil), delivered: 1, want: "ack"},
		{name: "malformed", h: returning(Malformed(errBad)), delivered: 1, want: "term:malformed", wantLetters: 1, wantErr: errBad},
		{name: "malformed on the last delivery: dead-lettered only", h: returning(Malformed(errBad)), delivered: 3,
			want: "term:malformed", wantLetters: 1, wantErr: errBad},
		{name: "malformed, dead letters down", h: returning(Malformed(errBad)), delivered: 1, dlFail: errDLQDown,
			want: "nak_delay", wantErr: errDLQDown},
		{name: "transient", h: returning(errTransient), delivered: 1, want: "nak_delay", wantErr: errTransient},
		{name: "a copy of a running step, many deliveries: not given up", h: returning(errBusy), delivered: 9, want: "nak_delay",
			wantErr: errBusy},
		{name: "deliveries ran out", h: returning(errTransient), delivered: 3, want: "term:gave up", wantReports: 1, wantErr: errTransient},
		{name: "deliveries ran out, report fails", h: returning(errTransient), delivered: 3, reportErr: errEventsDown,
			want: "nak_delay", wantReports: 1, wantErr: errEventsDown},
		{name: "deliveries ran out, report panics", h: returning(errTransient), delivered: 3, reportPanic: true,
			want: "nak_delay", wantReports: 1, wantErr: ErrPanic},
		{name: "fatal", h: returning(Fatal(errTransient)), delivered: 1, want: "term:gave up", wantReports: 1, wantErr: errTransient},
		{name: "panic", h: func(context.Context, jetstream.Msg) error { panic("boom") }, delivered: 1, want: "nak_delay", wantErr: ErrPanic},
		{name: "panic on the last delivery", h: func(context.Context, jetstream.Msg) error { panic("boom") }, delivered: 3,
			want: "term:gave up", wantReports: 1, wantErr: ErrPanic},
		{name: "stopping: handed back", h: returning(errTransient), delivered: 3, stopping: true, want: "nak", wantErr: errTransient},
		{name: "stopping, fatal: handed back", h: returning(Fatal(errTransient)), delivered: 1, stopping: true, want: "nak", wantErr: errTransient},
		{name: "stopping, malformed: dead-lettered", h: returning(Malformed(errBad)), delivered: 1, stopping: true,
			want: "term:malformed", wantLetters: 1, wantErr: errBad},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			reports := 0
			r := &Runner{Name: "c1", Handler: tt.h, Log: discard(), AckWait: time.Second, MaxDeliver: 3,
				GiveUp: func(context.Context, jetstream.Msg, error) error {
					mu.Lock()
					defer mu.Unlock()
					reports++
					if tt.reportPanic {
						panic("report bug")
					}
					return tt.reportErr
				}}
			dl := &fakeDeadLetters{fail: tt.dlFail}
			m := newFakeMsg(tt.delivered)
			err := r.chain(dl)(ctxFor(tt.stopping), m)
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Errorf("returned %v, want %v", err, tt.wantErr)
			}
			if got := m.outcome(); got != tt.want {
				t.Errorf("settled %q, want %q", got, tt.want)
			}
			if dl.count() != tt.wantLetters || reports != tt.wantReports {
				t.Errorf("%d dead letters and %d reports, want %d and %d", dl.count(), reports, tt.wantLetters, tt.wantReports)
			}
		})
	}
}

// The caller's middleware runs inside Recover and sees the handler's
// outcome before the standard layers do.
func TestRunnerChainCallerMiddleware(t *testing.T) {
	var seen error
	r := &Runner{Name: "c1", Log: discard(), MaxDeliver: 3, Handler: returning(errTransient),
		Middleware: []Middleware{func(next Handler) Handler {
			return func(ctx context.Context, m jetstream.Msg) error {
				seen = next(ctx, m)
				panic("middleware bug")
			}
		}}}
	m := newFakeMsg(1)
	err := r.chain(&fakeDeadLetters{})(ctxFor(false), m)
	if !errors.Is(seen, errTransient) || !errors.Is(err, ErrPanic) || m.outcome() != "nak_delay" {
		t.Fatalf("middleware saw %v; chain returned %v and settled %q", seen, err, m.outcome())
	}
}
