package flow

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/pkg/bus"
	"github.com/actloop/actloop/pkg/priority"
)

// WatchKV calls f with every entry of bucket, the current ones first
// (initial true), then each change (puts, deletes, purges), until ctx ends.
func WatchKV(ctx context.Context, js jetstream.JetStream, bucket string, f func(e jetstream.KeyValueEntry, initial bool)) error {
	return watchKV(ctx, js, bucket, "", f, nil)
}

// watchKV is WatchKV for one key of bucket ("" : all of them); caughtUp,
// when set, is called once the current entries have been passed to f.
func watchKV(ctx context.Context, js jetstream.JetStream, bucket, key string, f func(e jetstream.KeyValueEntry, initial bool), caughtUp func()) error {
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return fmt.Errorf("kv %s: %w", bucket, err)
	}
	var w jetstream.KeyWatcher
	if key == "" {
		w, err = kv.WatchAll(ctx)
	} else {
		w, err = kv.Watch(ctx, key)
	}
	if err != nil {
		return fmt.Errorf("watch %s: %w", bucket, err)
	}
	defer func() { _ = w.Stop() }()
	initial := true
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return nil
			}
			if e == nil { // the end of the initial values
				if initial && caughtUp != nil {
					caughtUp()
				}
				initial = false
				continue
			}
			f(e, initial)
		}
	}
}

// WatchBoard keeps board up to date with the priority snapshots in NATS KV
// until ctx ends: whoever publishes a next gen step classifies it by the
// newest snapshot it has seen. A snapshot that does not decode is logged and
// skipped; the next one replaces it.
func WatchBoard(ctx context.Context, js jetstream.JetStream, board *priority.Board, log *slog.Logger) error {
	return WatchKV(ctx, js, bus.BucketPriority, func(e jetstream.KeyValueEntry, _ bool) {
		if e.Operation() != jetstream.KeyValuePut {
			return
		}
		s, err := priority.DecodeSnapshot(e.Value())
		if err != nil {
			log.Warn("undecodable priority snapshot skipped", "key", e.Key(), "error", err)
			return
		}
		board.Set(s)
	})
}

var _ Classifier = (*priority.Board)(nil)
