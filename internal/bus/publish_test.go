package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/internal/bus"
)

// A publish made while no stream answers (a leader election, a restarting
// server) is sent again until one does, and stored once; a publish that
// never gets an answer fails when its context ends.
func TestPublishWaitsForTheStream(t *testing.T) {
	ctx, js, _ := setup(t)
	nc := js.Conn()
	p := bus.NewPublisher(js)

	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := p.PublishRaw(short, "late.x", "m0", []byte("x")); err == nil {
		t.Fatal("publish with no stream succeeded")
	}

	// A plain subscriber sees each attempt (and answers none of them).
	attempts, err := nc.SubscribeSync("late.x")
	if err != nil {
		t.Fatal(err)
	}
	published := make(chan error, 1)
	go func() { published <- p.PublishRaw(ctx, "late.x", "m1", []byte("x")) }()
	// The stream appears only after an attempt went unanswered.
	if _, err := attempts.NextMsg(time.Minute); err != nil {
		t.Fatalf("no attempt seen: %v", err)
	}
	select {
	case err := <-published:
		t.Fatalf("publish returned before the stream existed: %v", err)
	default:
	}
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "LATE", Subjects: []string{"late.>"}, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-published; err != nil {
		t.Fatalf("publish once the stream exists: %v", err)
	}
	// The same id again (a retry of a publish whose answer was lost) is
	// stored once.
	if err := p.PublishRaw(ctx, "late.x", "m1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Errorf("stream holds %d messages, want 1", info.State.Msgs)
	}
}
