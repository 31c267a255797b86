package testkit

import (
	"testing"

	"go.uber.org/goleak"
)

// VerifyNoLeaks runs m's tests and then fails if goroutines are left,
// ignoring the one nats.go leaks itself: its jetstream starts
// resetPendingAcksOnReconnect with the first async publish, and when the
// connection closes before that goroutine has read its status channel it
// reads the nil channel the close left and never returns (nats.go v1.55.0,
// jetstream/publish.go). Not ours to stop.
func VerifyNoLeaks(m *testing.M, opts ...goleak.Option) {
	goleak.VerifyTestMain(m, append(opts,
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"))...)
}
