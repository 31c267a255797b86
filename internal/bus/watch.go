package bus

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/actloop/actloop/internal/sched"
	"github.com/actloop/actloop/pkg/schema"
	"github.com/nats-io/nats.go/jetstream"
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
func WatchBoard(ctx context.Context, js jetstream.JetStream, board *sched.Board, log *slog.Logger) error {
	return WatchKV(ctx, js, BucketPriority, func(e jetstream.KeyValueEntry, _ bool) {
		if e.Operation() != jetstream.KeyValuePut {
			return
		}
		s, err := sched.DecodeSnapshot(e.Value())
		if err != nil {
			log.Warn("undecodable priority snapshot skipped", "key", e.Key(), "error", err)
			return
		}
		board.Set(s)
	})
}

// WatchControl calls f with the control state in NATS KV until ctx ends:
// once when the current state is known (schema.DefaultControl when none was
// written yet), then on every change. A state that does not decode is
// logged and skipped.
func WatchControl(ctx context.Context, js jetstream.JetStream, log *slog.Logger, f func(schema.Control)) error {
	seen := false
	return watchKV(ctx, js, BucketControl, KeyControl, func(e jetstream.KeyValueEntry, _ bool) {
		if e.Operation() != jetstream.KeyValuePut {
			seen = true
			f(schema.DefaultControl())
			return
		}
		c, err := schema.Decode[schema.Control](e.Value())
		if err != nil {
			log.Warn("undecodable control state skipped", "error", err)
			return
		}
		seen = true
		f(c)
	}, func() {
		if !seen {
			seen = true
			f(schema.DefaultControl())
		}
	})
}

// ControlView is the newest control state a process has seen; safe for
// concurrent use. Until the first Set it reports schema.DefaultControl.
type ControlView struct {
	p atomic.Pointer[schema.Control]
}

// Set records c.
func (v *ControlView) Set(c schema.Control) { v.p.Store(&c) }

// Get returns the newest state.
func (v *ControlView) Get() schema.Control {
	if c := v.p.Load(); c != nil {
		return *c
	}
	return schema.DefaultControl()
}
