package bus

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/actloop/actloop/pkg/schema"
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
	// BucketLeader holds the coordinator leader lease (key KeyLeader, the
	// leader's id). Its TTL is the lease: the leader renews the key well
	// within it, so a leader that dies or is cut off loses the key when the
	// TTL runs out and a standby creates it anew.
	BucketLeader = "actloop_leader"
	// BucketAdmitted holds the sample of each admitted trajectory until its
	// result is handled (key AdmittedKey(traj_id); JSON: the sample, and how
	// often it was admitted again), so
	// that a trajectory whose Redis state is lost can run again. It lives
	// outside Redis for that reason.
	BucketAdmitted = "actloop_admitted"
)

// AdmittedKey is trajectory id's key in BucketAdmitted: the id with each
// "." written "=" (a KV key may not start or end with a dot, nor hold two
// in a row; no id holds "=").
func AdmittedKey(id string) string { return strings.ReplaceAll(id, ".", "=") }

// KeyLeader is the lease's key in BucketLeader.
const KeyLeader = "coordinator"

// EnvHeartbeatKey is env-worker id's key in BucketHeartbeats (gen-workers'
// keys are "gen.<replica>.<worker>").
func EnvHeartbeatKey(id string) string { return "env." + id }

// KeyControl is the control state's key in BucketControl.
const KeyControl = "state"

const heartbeatKeep = time.Hour

// EnsureKV creates or updates the KV buckets; safe to call from every
// service at start.
func (t Topology) EnsureKV(ctx context.Context, js jetstream.JetStream) error {
	storage := t.storage()
	for _, cfg := range []jetstream.KeyValueConfig{
		{Bucket: BucketPriority, Description: "priority snapshot per replica", History: 1, Storage: storage, Replicas: t.Replicas},
		{Bucket: BucketHeartbeats, Description: "live workers", History: 1, TTL: heartbeatKeep, Storage: storage, Replicas: t.Replicas},
		{Bucket: BucketControl, Description: "pause state, weight version, pause reports", History: 1, Storage: storage, Replicas: t.Replicas},
		{Bucket: BucketAdmitted, Description: "samples of admitted trajectories, until their results", History: 1,
			TTL: t.ResultsAge, Storage: storage, Replicas: t.Replicas},
	} {
		if _, err := js.CreateOrUpdateKeyValue(ctx, cfg); err != nil {
			return fmt.Errorf("ensure kv %s: %w", cfg.Bucket, err)
		}
	}
	return nil
}

func (t Topology) storage() jetstream.StorageType {
	if t.Memory {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

// LeaderKV creates (or updates to lease) and returns the leader lease's
// bucket.
func (t Topology) LeaderKV(ctx context.Context, js jetstream.JetStream, lease time.Duration) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: BucketLeader,
		Description: "coordinator leader lease", History: 1, TTL: lease, Storage: t.storage(), Replicas: t.Replicas})
	if err != nil {
		return nil, fmt.Errorf("ensure kv %s: %w", BucketLeader, err)
	}
	return kv, nil
}

// ResultBodies creates (or updates) and returns the Object Store bucket of
// result bodies (schema.BucketResultBodies), kept as long as the results
// stream keeps heads.
func (t Topology) ResultBodies(ctx context.Context, js jetstream.JetStream) (jetstream.ObjectStore, error) {
	if obs, err := js.ObjectStore(ctx, schema.BucketResultBodies); err == nil {
		if st, err := obs.Status(ctx); err == nil && st.TTL() == t.ResultsAge && st.Replicas() == t.Replicas {
			return obs, nil // as it should be: many services starting at once do not update it over and over
		}
	}
	obs, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: schema.BucketResultBodies,
		Description: "result bodies (token arrays, messages, diff) named by the heads on actloop.results.<traj_id>",
		TTL:         t.ResultsAge, Storage: t.storage(), Replicas: t.Replicas})
	if err != nil {
		return nil, fmt.Errorf("ensure object store %s: %w", schema.BucketResultBodies, err)
	}
	return obs, nil
}
