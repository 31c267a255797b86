package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/pkg/schema"
)

// ErrBodyGone: a result's body is no longer stored (older than the results'
// max age, or its bucket deleted).
var ErrBodyGone = errors.New("result body gone")

// Bodies reads results' bodies (the claim check of schema.BodyRef). It is
// safe for concurrent use.
type Bodies struct {
	js jetstream.JetStream

	mu      sync.Mutex
	buckets map[string]jetstream.ObjectStore
}

// NewBodies returns a Bodies reading through js.
func NewBodies(js jetstream.JetStream) *Bodies {
	return &Bodies{js: js, buckets: map[string]jetstream.ObjectStore{}}
}

// Decode decodes a message from actloop.results.<traj_id> (a head) and returns the
// whole result, its body fetched and verified.
func (b *Bodies) Decode(ctx context.Context, data []byte) (schema.Result, error) {
	head, err := schema.Decode[schema.ResultHead](data)
	if err != nil {
		return schema.Result{}, err
	}
	return b.Result(ctx, head)
}

// Result fetches the body head names and returns the whole result. The
// body must have the size and SHA-256 the head gives (else the error wraps
// schema.ErrBodyMismatch), and decode to head.NumTokens tokens.
func (b *Bodies) Result(ctx context.Context, head schema.ResultHead) (schema.Result, error) {
	ref := head.Body
	if ref == nil {
		return schema.Result{}, fmt.Errorf("result %s: no body named", head.TrajID)
	}
	obs, err := b.bucket(ctx, ref.Bucket)
	if err != nil {
		return schema.Result{}, fmt.Errorf("result %s: %w", head.TrajID, err)
	}
	or, err := obs.Get(ctx, ref.Name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return schema.Result{}, fmt.Errorf("result %s: body %s: %w", head.TrajID, ref.Name, ErrBodyGone)
	}
	if err != nil {
		return schema.Result{}, fmt.Errorf("result %s: body %s: %w", head.TrajID, ref.Name, err)
	}
	// Read one byte past the size the head gives, to tell a longer body;
	// the object store checks its own digest at the end.
	data, err := io.ReadAll(io.LimitReader(or, ref.Size+1))
	_ = or.Close()
	if err != nil {
		return schema.Result{}, fmt.Errorf("result %s: body %s: %w", head.TrajID, ref.Name, err)
	}
	sum := sha256.Sum256(data)
	if int64(len(data)) != ref.Size || hex.EncodeToString(sum[:]) != ref.SHA256 {
		return schema.Result{}, fmt.Errorf("result %s: body %s: %d bytes with sha256 %x, the head says %d with %s: %w",
			head.TrajID, ref.Name, len(data), sum, ref.Size, ref.SHA256, schema.ErrBodyMismatch)
	}
	r := schema.Result{ResultHead: head}
	if err := schema.DecodeBody(data, &r); err != nil {
		return schema.Result{}, fmt.Errorf("result %s: %w", head.TrajID, err)
	}
	if err := r.Validate(); err != nil {
		return schema.Result{}, fmt.Errorf("result %s: %w", head.TrajID, err)
	}
	return r, nil
}

func (b *Bodies) bucket(ctx context.Context, name string) (jetstream.ObjectStore, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if obs, ok := b.buckets[name]; ok {
		return obs, nil
	}
	obs, err := b.js.ObjectStore(ctx, name)
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("object store %s: %w", name, ErrBodyGone)
	}
	if err != nil {
		return nil, fmt.Errorf("object store %s: %w", name, err)
	}
	b.buckets[name] = obs
	return obs, nil
}
