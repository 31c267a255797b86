package bus

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/actloop/actloop/pkg/priority"
	"github.com/actloop/actloop/pkg/schema"
	"github.com/nats-io/nats.go/jetstream"
)

// WatchKV calls f with every entry of bucket, the current ones first
// (initial true), then each change (puts, deletes, purges), until ctx ends.
// A watch that ends under it (nats.go closes an ordered consumer it cannot
// recreate, as during a NATS node's restart) is opened again from the
// revision after the last one seen, so no change is missed and none is
// passed twice.
func WatchKV(ctx context.Context, js jetstream.JetStream, log *slog.Logger, bucket string, f func(e jetstream.KeyValueEntry, initial bool)) error {
	return watchKV(ctx, js, log, bucket, "", f, nil)
}

// watchKV is WatchKV for one key of bucket ("" : all of them); caughtUp,
// when set, is called once the current entries have been passed to f.
func watchKV(ctx context.Context, js jetstream.JetStream, log *slog.Logger, bucket, key string, f func(e jetstream.KeyValueEntry, initial bool), caughtUp func()) error {
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return fmt.Errorf("kv %s: %w", bucket, err)
	}
	open := func(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
		if key == "" {
			return kv.WatchAll(ctx, opts...)
		}
		return kv.Watch(ctx, key, opts...)
	}
	return follow(ctx, log, bucket, open, f, caughtUp)
}

// rewatchBackoff bounds the pause between attempts to open a watch again.
const rewatchBackoff = 2 * time.Second

// follow passes f what the watchers open returns deliver until ctx ends,
// opening another from the revision after the last one seen whenever one
// ends. Only the first open's failure is returned; later ones are logged
// and tried again.
func follow(ctx context.Context, log *slog.Logger, bucket string, open func(context.Context, ...jetstream.WatchOpt) (jetstream.KeyWatcher, error),
	f func(e jetstream.KeyValueEntry, initial bool), caughtUp func()) error {
	w, err := open(ctx)
	if err != nil {
		return fmt.Errorf("watch %s: %w", bucket, err)
	}
	initial := true // until the first watch's end-of-initial-values marker
	var last uint64 // the newest revision passed to f
	for {
		for ended := false; !ended; {
			select {
			case <-ctx.Done():
				_ = w.Stop()
				return nil
			case e, ok := <-w.Updates():
				switch {
				case !ok:
					ended = true
				case e == nil: // the end of the current values
					if initial && caughtUp != nil {
						caughtUp()
					}
					initial = false
				case e.Revision() > last:
					last = e.Revision()
					f(e, initial)
				}
			}
		}
		log.Warn("watch ended under us: watching again", "bucket", bucket, "from_revision", last+1)
		for pause := 100 * time.Millisecond; ; pause = min(2*pause, rewatchBackoff) {
			var opts []jetstream.WatchOpt
			if last > 0 {
				opts = append(opts, jetstream.ResumeFromRevision(last+1))
			}
			if w, err = open(ctx, opts...); err == nil {
				break
			}
			if ctx.Err() != nil {
				return nil
			}
			log.Warn("watch not opened again; will try again", "bucket", bucket, "error", err, "retry_in", pause)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(pause):
			}
		}
	}
}

// WatchBoard keeps board up to date with the priority snapshots in NATS KV
// until ctx ends: whoever publishes a next gen step classifies it by the
// newest snapshot it has seen. A snapshot that does not decode is logged and
// skipped; the next one replaces it.
func WatchBoard(ctx context.Context, js jetstream.JetStream, board *priority.Board, log *slog.Logger) error {
	return WatchKV(ctx, js, log, BucketPriority, func(e jetstream.KeyValueEntry, _ bool) {
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

// WatchControl calls f with the control state in NATS KV until ctx ends:
// once when the current state is known (schema.DefaultControl when none was
// written yet), then on every change. A state that does not decode is
// logged and skipped.
func WatchControl(ctx context.Context, js jetstream.JetStream, log *slog.Logger, f func(schema.Control)) error {
	seen := false
	return watchKV(ctx, js, log, BucketControl, KeyControl, func(e jetstream.KeyValueEntry, _ bool) {
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
