package bus

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/internal/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyNoLeaks(m) }

// fakeMsg is a jetstream.Msg that records what was done with it.
type fakeMsg struct {
	subject   string
	data      []byte
	headers   nats.Header
	delivered uint64 // 0: no metadata

	mu         sync.Mutex
	settled    []string // "ack", "nak", "nak_delay", "term:<reason>", in order
	delay      time.Duration
	inProgress atomic.Int32
}

var _ jetstream.Msg = (*fakeMsg)(nil)

func newFakeMsg(delivered uint64) *fakeMsg {
	return &fakeMsg{subject: "actloop.test", data: []byte("body"), headers: nats.Header{}, delivered: delivered}
}

func (f *fakeMsg) Metadata() (*jetstream.MsgMetadata, error) {
	if f.delivered == 0 {
		return nil, errors.New("no metadata")
	}
	return &jetstream.MsgMetadata{NumDelivered: f.delivered, Stream: "TEST", Consumer: "test"}, nil
}
func (f *fakeMsg) Data() []byte                       { return f.data }
func (f *fakeMsg) Headers() nats.Header               { return f.headers }
func (f *fakeMsg) Subject() string                    { return f.subject }
func (f *fakeMsg) Reply() string                      { return "" }
func (f *fakeMsg) Ack() error                         { return f.record("ack", 0) }
func (f *fakeMsg) DoubleAck(context.Context) error    { return f.record("ack", 0) }
func (f *fakeMsg) Nak() error                         { return f.record("nak", 0) }
func (f *fakeMsg) NakWithDelay(d time.Duration) error { return f.record("nak_delay", d) }
func (f *fakeMsg) Term() error                        { return f.record("term:", 0) }
func (f *fakeMsg) TermWithReason(r string) error      { return f.record("term:"+r, 0) }

func (f *fakeMsg) InProgress() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.settled) > 0 {
		f.settled = append(f.settled, "in_progress") // shows in outcome: a bug
		return errors.New("in progress after settling")
	}
	f.inProgress.Add(1)
	return nil
}

func (f *fakeMsg) record(what string, d time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settled = append(f.settled, what)
	f.delay = d
	return nil
}

// outcome is what was done with f: its one settlement, "" when none, or
// every one joined when there were several.
func (f *fakeMsg) outcome() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.settled) == 1 {
		return f.settled[0]
	}
	var s string
	for i, x := range f.settled {
		if i > 0 {
			s += ","
		}
		s += x
	}
	return s
}

// returning is a handler that returns err.
func returning(err error) Handler {
	return func(context.Context, jetstream.Msg) error { return err }
}

// stoppedCtx is the context of a message whose Runner is shutting down.
func stoppedCtx() context.Context {
	stop := make(chan struct{})
	close(stop)
	return withStopping(context.Background(), stop)
}

// ctxFor is the context of a message; stopped: its Runner is shutting down.
func ctxFor(stopped bool) context.Context {
	if stopped {
		return stoppedCtx()
	}
	return withStopping(context.Background(), make(chan struct{}))
}
