package flow

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/pkg/bus"
	"github.com/actloop/actloop/pkg/priority"
)

// WatchBoard keeps board up to date with the priority snapshots in NATS KV
// until ctx ends: whoever publishes a next gen step classifies it by the
// newest snapshot it has seen. A snapshot that does not decode is logged and
// skipped; the next one replaces it.
func WatchBoard(ctx context.Context, js jetstream.JetStream, board *priority.Board, log *slog.Logger) error {
	kv, err := js.KeyValue(ctx, bus.BucketPriority)
	if err != nil {
		return fmt.Errorf("kv %s: %w", bus.BucketPriority, err)
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watch %s: %w", bus.BucketPriority, err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return nil
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue // nil marks the end of the initial values
			}
			s, err := priority.DecodeSnapshot(e.Value())
			if err != nil {
				log.Warn("undecodable priority snapshot skipped", "key", e.Key(), "error", err)
				continue
			}
			board.Set(s)
		}
	}
}

var _ Classifier = (*priority.Board)(nil)
