package flow

import (
	"context"
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
	seen := false
	return watchKV(ctx, js, bus.BucketControl, bus.KeyControl, func(e jetstream.KeyValueEntry, _ bool) {
		if e.Operation() != jetstream.KeyValuePut {
			seen = true
			f(DefaultControl())
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
			f(DefaultControl())
		}
	})
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
