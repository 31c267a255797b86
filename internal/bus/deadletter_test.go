package bus

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// fakeDeadLetters records dead letters; with fail set, publishing fails.
type fakeDeadLetters struct {
	fail error

	mu      sync.Mutex
	letters []string // "<consumer>|<data>|<reason>"
}

func (f *fakeDeadLetters) DeadLetter(_ context.Context, consumer string, m jetstream.Msg, reason string) error {
	if f.fail != nil {
		return f.fail
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.letters = append(f.letters, consumer+"|"+string(m.Data())+"|"+reason)
	return nil
}

func (f *fakeDeadLetters) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.letters)
}

var errDLQDown = errors.New("actloop.dlq: no responders")

// A malformed message's dead letter is published before it is terminated;
// when it cannot be, the message is retried instead, up to MaxDeliver, and
// at once terminated when no retry can help; nothing else is touched.
func TestDeadLetter(t *testing.T) {
	malformed := Malformed(errors.New("field x: missing"))
	tests := []struct {
		name      string
		err       error
		dlFail    error
		delivered uint64
		want      string // the dead letter
		wantErr   error
		wantRetry bool
	}{
		{name: "done"},
		{name: "transient", err: errTransient, wantErr: errTransient},
		{name: "fatal", err: Fatal(errTransient), wantErr: errTransient},
		{name: "malformed", err: malformed, want: "c1|body|field x: missing", wantErr: malformed},
		{name: "malformed, dead letter fails", err: malformed, dlFail: errDLQDown, wantErr: errDLQDown, wantRetry: true},
		{name: "malformed, dead letter fails on the last delivery: terminated", err: malformed, dlFail: errDLQDown,
			delivered: 3, wantErr: malformed},
		{name: "malformed, dead letter too large: terminated at once", err: malformed, dlFail: nats.ErrMaxPayload,
			wantErr: malformed},
		{name: "transient, dead letters down", err: errTransient, dlFail: errDLQDown, wantErr: errTransient},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dl := &fakeDeadLetters{fail: tt.dlFail}
			m := newFakeMsg(max(tt.delivered, 1))
			err := DeadLetter(dl, "c1", 3)(returning(tt.err))(context.Background(), m)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("returned %v, want %v", err, tt.wantErr)
			}
			var retry *retryError
			if got := errors.As(err, &retry); got != tt.wantRetry || (got && retry.after != DeadLetterRetry) {
				t.Errorf("returned %v: retry %v, want %v after %v", err, got, tt.wantRetry, DeadLetterRetry)
			}
			if tt.wantRetry && !IsMalformed(err) {
				t.Errorf("returned %v: the retry no longer says malformed", err)
			}
			if got := strings.Join(dl.letters, ";"); got != tt.want {
				t.Errorf("dead letters %q, want %q", got, tt.want)
			}
			if o := m.outcome(); o != "" {
				t.Errorf("DeadLetter settled the message: %s", o)
			}
		})
	}
}
