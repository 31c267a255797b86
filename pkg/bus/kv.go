package bus

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// KV buckets: what every process must agree on.
const (
	// BucketPriority holds each replica's priority snapshot, keyed by
	// replica.
	BucketPriority = "actloop_priority"
)

// EnsureKV creates or updates the KV buckets; safe to call from every
// service at start.
func (t Topology) EnsureKV(ctx context.Context, js jetstream.JetStream) error {
	storage := jetstream.FileStorage
	if t.Memory {
		storage = jetstream.MemoryStorage
	}
	for _, cfg := range []jetstream.KeyValueConfig{
		{Bucket: BucketPriority, Description: "priority snapshot per replica", History: 1, Storage: storage, Replicas: t.Replicas},
	} {
		if _, err := js.CreateOrUpdateKeyValue(ctx, cfg); err != nil {
			return fmt.Errorf("ensure kv %s: %w", cfg.Bucket, err)
		}
	}
	return nil
}
