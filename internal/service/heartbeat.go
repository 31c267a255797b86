package service

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/pkg/schema"
)

// Heartbeat keeps a worker's entry, key, in the heartbeats bucket fresh:
// it puts what beat returns at once, every interval and whenever wake
// fires (nil: never), until ctx ends; then it deletes the entry, so the
// coordinator knows at once. While beat reports the worker down (up
// false), the entry is deleted instead, once, so the coordinator moves the
// worker's work without waiting for the entry to age.
func Heartbeat(ctx context.Context, js jetstream.JetStream, key string, interval time.Duration, wake <-chan struct{},
	beat func() (h schema.Heartbeat, up bool), log *slog.Logger) error {
	kv, err := js.KeyValue(ctx, bus.BucketHeartbeats)
	if err != nil {
		return fmt.Errorf("kv %s: %w", bus.BucketHeartbeats, err)
	}
	removed := false // the entry was removed while down
	once := func() {
		h, up := beat()
		switch {
		case up:
			b, _ := json.Marshal(h) // a heartbeat always encodes
			if _, err := kv.Put(ctx, key, b); err != nil && ctx.Err() == nil {
				log.Warn("heartbeat", "error", err)
			}
			removed = false
		case !removed:
			if err := kv.Delete(ctx, key); err != nil {
				if ctx.Err() == nil {
					log.Warn("heartbeat: remove entry", "error", err)
				}
				return
			}
			removed = true
		}
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		once()
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = kv.Delete(dctx, key)
			return nil
		case <-t.C:
		case <-wake:
		}
	}
}
