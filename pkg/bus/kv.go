package bus

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// KV buckets: what every process must agree on.
const (
	// BucketPriority holds each replica's priority snapshot, keyed by
	// replica.
	BucketPriority = "actloop_priority"
	// BucketHeartbeats holds live workers' heartbeats, keyed
	// "gen.<replica>.<worker>". Readers judge liveness by the heartbeat's
	// time; the bucket's TTL only clears out workers long gone.
	BucketHeartbeats = "actloop_heartbeats"
	// BucketControl holds the control state (key KeyControl, a
	// schema.Control written by the coordinator) and each gen-worker's
	// answer to the newest pause (key "gen.<replica>.<worker>", a
	// schema.PauseReport).
	BucketControl = "actloop_control"
)

// KeyControl is the control state's key in BucketControl.
const KeyControl = "state"

const heartbeatKeep = time.Hour

// EnsureKV creates or updates the KV buckets; safe to call from every
// service at start.
func (t Topology) EnsureKV(ctx context.Context, js jetstream.JetStream) error {
	storage := jetstream.FileStorage
	if t.Memory {
		storage = jetstream.MemoryStorage
	}
	for _, cfg := range []jetstream.KeyValueConfig{
		{Bucket: BucketPriority, Description: "priority snapshot per replica", History: 1, Storage: storage, Replicas: t.Replicas},
		{Bucket: BucketHeartbeats, Description: "live workers", History: 1, TTL: heartbeatKeep, Storage: storage, Replicas: t.Replicas},
		{Bucket: BucketControl, Description: "pause state, weight version, pause reports", History: 1, Storage: storage, Replicas: t.Replicas},
	} {
		if _, err := js.CreateOrUpdateKeyValue(ctx, cfg); err != nil {
			return fmt.Errorf("ensure kv %s: %w", cfg.Bucket, err)
		}
	}
	return nil
}
