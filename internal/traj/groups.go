package traj

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/actloop/actloop/pkg/schema"
)

// Group bookkeeping: which members of a group (the rollouts of one prompt)
// have a result, and whether the group's completion was published. Both keys
// of a group share the hash tag {group:<id>}, so one script may touch them on
// Redis Cluster; only the coordinator writes them.
//
//	actloop:{group:<id>}:members    hash: group_index -> traj id
//	actloop:{group:<id>}:published  "1" once the group's GroupDone is stored
//
// Group ids must be unique for the TTL the caller passes, as sample ids are:
// a second round under the same id would find the first round's members.

// ErrGroupConflict: another trajectory already holds the member's index.
var ErrGroupConflict = errors.New("group index held by another trajectory")

func groupKeys(groupID string) []string {
	base := "actloop:{group:" + groupID + "}"
	return []string{base + ":members", base + ":published"}
}

// GroupResult records that trajID, member index of the group groupID of size
// members, has a result, and refreshes the group's TTL. It returns the
// group's traj ids in index order whenever the group is complete and not yet
// marked published (GroupPublished), whether or not this call added the
// member: a caller that crashed between this call and its publish gets the
// ids again from the redelivered result. It returns nil while the group is
// incomplete or once it is published, and ErrGroupConflict, changing
// nothing, if the index is held by another trajectory.
func (s *Store) GroupResult(ctx context.Context, groupID string, index int, trajID string, size int, ttl time.Duration) ([]string, error) {
	if !schema.ValidID(groupID) || !schema.ValidID(trajID) || index < 0 || index >= size || ttl < time.Millisecond {
		return nil, fmt.Errorf("group %q: invalid member %q at %d of %d (ttl %v)", groupID, trajID, index, size, ttl)
	}
	res, err := groupResultScript.Run(ctx, s.rdb, groupKeys(groupID), index, trajID, size, ttl.Milliseconds()).Slice()
	if err != nil || len(res) == 0 {
		return nil, fmt.Errorf("group %s member %d: %w (reply %v)", groupID, index, err, res)
	}
	code, _ := res[0].(int64)
	switch code {
	case groupIncomplete, groupPublished:
		return nil, nil
	case groupConflict:
		held := ""
		if len(res) > 1 {
			held, _ = res[1].(string)
		}
		return nil, fmt.Errorf("group %s member %d: %s, not %s: %w", groupID, index, held, trajID, ErrGroupConflict)
	case groupComplete:
	default:
		return nil, fmt.Errorf("group %s member %d: unexpected reply %v", groupID, index, res)
	}
	ids := make([]string, size)
	for i := 1; i+1 < len(res); i += 2 {
		f, _ := res[i].(string)
		v, _ := res[i+1].(string)
		if n, err := strconv.Atoi(f); err == nil && n >= 0 && n < size {
			ids[n] = v
		}
	}
	for _, id := range ids {
		if id == "" {
			return nil, nil // members disagree on the size: not complete at this one's
		}
	}
	return ids, nil
}

// GroupPublished marks groupID's completion as published: GroupResult
// returns nothing for it from then on. Both keys keep ttl.
func (s *Store) GroupPublished(ctx context.Context, groupID string, ttl time.Duration) error {
	k := groupKeys(groupID)
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, k[1], "1", ttl)
		p.PExpire(ctx, k[0], ttl)
		return nil
	})
	if err != nil {
		return fmt.Errorf("group %s published: %w", groupID, err)
	}
	return nil
}

// Replies of groupResultScript; complete is followed by the members hash.
const (
	groupConflict   = -1
	groupIncomplete = 0
	groupComplete   = 1
	groupPublished  = 2
)

// groupResultScript checks everything before its first write (Lua in Redis
// has no rollback). A complete group is returned as the whole hash, ordered
// in Go: unpack over a large group would hit Lua's stack limit.
var groupResultScript = redis.NewScript(`
local held = redis.call('HGET', KEYS[1], ARGV[1])
if held and held ~= ARGV[2] then return {-1, held} end
if redis.call('EXISTS', KEYS[2]) == 1 then return {2} end
if not held then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
if redis.call('HLEN', KEYS[1]) < tonumber(ARGV[3]) then return {0} end
local out = {1}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all do out[#out + 1] = all[i] end
return out
`)
