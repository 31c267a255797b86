package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/schema"
)

// groupMinTTL is the least time a group's bookkeeping is kept: its members
// can finish hours apart, far beyond the result TTL of each trajectory.
const groupMinTTL = 24 * time.Hour

// groupResult counts r towards its group and, when r completes the group,
// publishes a schema.GroupDone on actloop.groups. Only a result with a group
// id and a group size of at least 1 belongs to a group, and a validation
// rollout's to none; a group of one completes with its single result.
//
// Exactly once: the store hands out the member ids whenever the group is
// complete and not yet marked published, so a coordinator that crashed
// between the store call and the publish gets them again from the
// redelivered result. The publish carries Nats-Msg-Id "group:<group_id>":
// the stream drops a second copy within its duplicate window (2 min), which
// covers such a redelivery and a racing copy of a member. Once the GroupDone
// is stored the group is marked published, so a result re-published or
// redelivered later publishes nothing. What is left is a crash between the
// publish and the mark with the coordinator away longer than the duplicate
// window: then the GroupDone is sent twice (at least once, never lost).
//
// A result whose group fields are unusable is logged and counted as
// nothing: retrying cannot fix it. One whose index another trajectory
// holds, or whose group_size is not the one the group's first result gave,
// means the group can never complete as its members say: the group is
// ended (endGroup), naming both.
func (c *Coordinator) groupResult(ctx context.Context, r schema.ResultHead) error {
	if r.GroupID == "" || r.GroupSize < 1 || r.Purpose == schema.PurposeValidation {
		return nil
	}
	if !schema.ValidID(r.GroupID) || r.GroupIndex < 0 || r.GroupIndex >= r.GroupSize {
		c.d.Log.Warn("result with invalid group fields", "traj_id", r.TrajID, "group_id", r.GroupID,
			"group_index", r.GroupIndex, "group_size", r.GroupSize)
		return nil
	}
	ttl := max(c.d.Common.ResultTTL, groupMinTTL)
	ids, err := c.store.GroupResult(ctx, r.GroupID, r.GroupIndex, r.TrajID, r.GroupSize, ttl)
	if errors.Is(err, traj.ErrGroupConflict) {
		c.d.Log.Warn("group member conflict: group ended", "traj_id", r.TrajID, "group_id", r.GroupID, "error", err)
		return c.endGroup(ctx, r.GroupID, r.GroupSize, fmt.Sprintf("trajectory %s: %v", r.TrajID, err))
	}
	if err != nil || ids == nil {
		return err
	}
	done := schema.GroupDone{V: schema.Version, GroupID: r.GroupID, Size: r.GroupSize, TrajIDs: ids,
		At: c.d.Now().UTC()}
	b, err := json.Marshal(done)
	if err != nil {
		return err
	}
	if _, err := c.d.Pub.PublishFirst(ctx, schema.SubjectGroup(r.GroupID), "group:"+r.GroupID, b); err != nil {
		return err
	}
	return c.store.GroupPublished(ctx, r.GroupID, ttl)
}

// endGroup ends group id, which can never complete as its members say (one
// was refused, two hold one index, or two say different sizes), with a
// GroupDone of the group's size whose Reason says why and which lists no
// member, so that a trainer waiting for the group is not left waiting; the
// members admitted still run and each has its result. A group that already
// has its GroupDone (complete, or ended before) keeps it: the stream stores
// one per group. Once stored, the group is marked published, so no later
// result of it publishes another.
func (c *Coordinator) endGroup(ctx context.Context, id string, size int, reason string) error {
	if !schema.ValidID(id) || size < 1 {
		return nil
	}
	ttl := max(c.d.Common.ResultTTL, groupMinTTL)
	done := schema.GroupDone{V: schema.Version, GroupID: id, Size: size, TrajIDs: []string{},
		Reason: clipReason("ended incomplete: " + reason), At: c.d.Now().UTC()}
	b, err := json.Marshal(done)
	if err != nil {
		return err
	}
	stored, err := c.d.Pub.PublishFirst(ctx, schema.SubjectGroup(id), "group:"+id, b)
	if err != nil {
		return err
	}
	if stored {
		c.d.Log.Warn("group ended incomplete", "group_id", id, "reason", done.Reason)
	}
	return c.store.GroupPublished(ctx, id, ttl)
}

// maxGroupReason bounds a GroupDone's reason, as a result's is bounded.
const maxGroupReason = 4 << 10

// clipReason cuts s to maxGroupReason bytes, on a rune boundary.
func clipReason(s string) string {
	if len(s) <= maxGroupReason {
		return s
	}
	cut := maxGroupReason
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
