package traj

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/pkg/schema"
)

// Results publishes results in two parts (see schema.BodyRef): the body
// into the Object Store bucket of result bodies, then the head on
// actloop.results. A head is only ever published after its body is
// stored, so a reader that has the head finds the body (until the bucket's
// TTL, the results stream's max age, removes both).
type Results struct {
	pub    *bus.Publisher
	bodies jetstream.ObjectStore
}

// NewResults returns a Results publishing with pub into bodies (from
// bus.Topology.ResultBodies).
func NewResults(pub *bus.Publisher, bodies jetstream.ObjectStore) *Results {
	return &Results{pub: pub, bodies: bodies}
}

// maxHeadReason bounds a head's reason (an error can quote its input), so
// every head stays a few KiB whatever the failure.
const maxHeadReason = 4 << 10

// Publish stores r's body and publishes its head on
// schema.SubjectResult(r.TrajID) with Nats-Msg-Id msgID. A trajectory has
// one result, whatever is published after it: the stream refuses a second
// head on the subject (client.PublishFirst), and that is no error. The
// subject decides, not msgID: a head the stream lost is stored again by
// the next Publish (a redelivered finish, the coordinator's repair), even
// while the stream's duplicate window still remembers msgID. A body
// already stored with the same digest is not stored again; one stored for
// a head the stream then refused is left to the bucket's TTL.
func (w *Results) Publish(ctx context.Context, r schema.Result, msgID string) error {
	body, err := schema.EncodeBody(&r)
	if err != nil {
		return fmt.Errorf("result of %s: %w", r.TrajID, err)
	}
	sum := sha256.Sum256(body)
	digest := hex.EncodeToString(sum[:])
	// The digest is part of the name: a result built again differently
	// (under a newer control state, say) is a different object, and a
	// head names exactly the body it was published with.
	name := r.TrajID + "/" + digest[:16]
	info, err := w.bodies.GetInfo(ctx, name)
	if err != nil || info.Digest != "SHA-256="+base64.URLEncoding.EncodeToString(sum[:]) {
		if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			return fmt.Errorf("result of %s: body %s: %w", r.TrajID, name, err)
		}
		if _, err := w.bodies.Put(ctx, jetstream.ObjectMeta{Name: name}, bytes.NewReader(body)); err != nil {
			return fmt.Errorf("result of %s: store body %s: %w", r.TrajID, name, err)
		}
	}
	head := r.ResultHead
	head.NumTokens = len(r.Tokens)
	head.Body = &schema.BodyRef{Bucket: schema.BucketResultBodies, Name: name, Size: int64(len(body)), SHA256: digest}
	if len(head.Reason) > maxHeadReason {
		head.Reason = strings.ToValidUTF8(head.Reason[:maxHeadReason], "") + "…"
	}
	b, err := json.Marshal(head)
	if err != nil {
		return fmt.Errorf("result of %s: %w", r.TrajID, err)
	}
	_, err = w.pub.PublishFirst(ctx, schema.SubjectResult(r.TrajID), msgID, b)
	return err
}
