package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
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
	buckets map[string]bucket
}

// bucket is an object store and its stream: an object's metadata is read
// through the one, its chunks by direct gets on the other.
type bucket struct {
	obs    jetstream.ObjectStore
	stream jetstream.Stream
}

// NewBodies returns a Bodies reading through js.
func NewBodies(js jetstream.JetStream) *Bodies {
	return &Bodies{js: js, buckets: map[string]bucket{}}
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
	bk, err := b.bucket(ctx, ref.Bucket)
	if err != nil {
		return schema.Result{}, fmt.Errorf("result %s: %w", head.TrajID, err)
	}
	// Read one byte past the size the head gives, to tell a longer body.
	data, err := bk.read(ctx, ref.Name, ref.Size+1)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return schema.Result{}, fmt.Errorf("result %s: body %s: %w", head.TrajID, ref.Name, ErrBodyGone)
	}
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

func (b *Bodies) bucket(ctx context.Context, name string) (bucket, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if bk, ok := b.buckets[name]; ok {
		return bk, nil
	}
	obs, err := b.js.ObjectStore(ctx, name)
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return bucket{}, fmt.Errorf("object store %s: %w", name, ErrBodyGone)
	}
	if err != nil {
		return bucket{}, fmt.Errorf("object store %s: %w", name, err)
	}
	stream, err := b.js.Stream(ctx, "OBJ_"+name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return bucket{}, fmt.Errorf("object store %s: %w", name, ErrBodyGone)
	}
	if err != nil {
		return bucket{}, fmt.Errorf("object store %s: %w", name, err)
	}
	b.buckets[name] = bucket{obs: obs, stream: stream}
	return b.buckets[name], nil
}

// read returns up to limit bytes of object name. It reads the chunks by
// direct gets ($JS.API.DIRECT.GET.OBJ_<bucket>, the next message on the
// object's chunk subject), not as ObjectStore.Get does, through an
// ordered push consumer: a user that may create a consumer with a deliver
// subject may have the server publish a stream's messages on any subject
// of the account (issue 31), so a trainer may create none.
func (bk bucket) read(ctx context.Context, name string, limit int64) ([]byte, error) {
	info, err := bk.obs.GetInfo(ctx, name)
	if err != nil {
		return nil, err
	}
	if info.Deleted {
		return nil, jetstream.ErrObjectNotFound
	}
	subject := "$O." + info.Bucket + ".C." + info.NUID
	var data []byte
	seq := uint64(1)
	for range info.Chunks {
		if int64(len(data)) >= limit {
			break
		}
		m, err := bk.stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, fmt.Errorf("chunk after sequence %d: %w", seq-1, jetstream.ErrObjectNotFound)
		}
		if err != nil {
			return nil, fmt.Errorf("chunk after sequence %d: %w", seq-1, err)
		}
		data = append(data, m.Data...)
		seq = m.Sequence + 1
	}
	if int64(len(data)) > limit {
		data = data[:limit]
	}
	return data, nil
}
