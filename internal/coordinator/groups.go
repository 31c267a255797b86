package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"time"

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
// A result whose group fields are unusable, or whose index another
// trajectory holds, is logged and counted as nothing: retrying cannot fix it.
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
		c.d.Log.Warn("group member conflict", "traj_id", r.TrajID, "group_id", r.GroupID, "error", err)
		return nil
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
