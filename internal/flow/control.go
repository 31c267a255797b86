package flow

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/pkg/bus"
	"github.com/actloop/actloop/pkg/schema"
)

// DefaultControl is the control state before a coordinator has written
// one: running, version 0, no staleness limit.
func DefaultControl() schema.Control {
	return schema.Control{V: schema.Version, MaxStaleness: -1, StalePolicy: schema.StaleKeep}
}

// WatchControl calls f with the control state in NATS KV until ctx ends:
// once when the current state is known (DefaultControl when none was
// written yet), then on every change. A state that does not decode is
// logged and skipped.
func WatchControl(ctx context.Context, js jetstream.JetStream, log *slog.Logger, f func(schema.Control)) error {
	kv, err := js.KeyValue(ctx, bus.BucketControl)
	if err != nil {
		return fmt.Errorf("kv %s: %w", bus.BucketControl, err)
	}
	w, err := kv.Watch(ctx, bus.KeyControl)
	if err != nil {
		return fmt.Errorf("watch %s: %w", bus.BucketControl, err)
	}
	defer func() { _ = w.Stop() }()
	seen := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return nil
			}
			switch {
			case e == nil: // the end of the initial values
				if !seen {
					seen = true
					f(DefaultControl())
				}
			case e.Operation() != jetstream.KeyValuePut:
				seen = true
				f(DefaultControl())
			default:
				c, err := schema.Decode[schema.Control](e.Value())
				if err != nil {
					log.Warn("undecodable control state skipped", "error", err)
					continue
				}
				seen = true
				f(c)
			}
		}
	}
}

// ControlView is the newest control state a process has seen; safe for
// concurrent use. Until the first Set it reports DefaultControl.
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
	return DefaultControl()
}
