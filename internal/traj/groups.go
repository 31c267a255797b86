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
// have a result, the group's size, and whether the group's completion was
// published. The keys of a group share the hash tag {group:<id>}, so one
// script may touch them on Redis Cluster; only the coordinator writes them.
//
//	actloop:{group:<id>}:members    hash: group_index -> traj id
//	actloop:{group:<id>}:size       the group_size its first member with a result said
//	actloop:{group:<id>}:published  "1" once the group's GroupDone is stored
//
// Group ids must be unique for the TTL the caller passes, as sample ids are:
// a second round under the same id would find the first round's members.

// ErrGroupConflict: another trajectory already holds the member's index,
// or the member says another group_size than the group's members with a
// result did. Either way the group can never complete as its members say.
var ErrGroupConflict = errors.New("group member conflicts with the group")

func groupKeys(groupID string) []string {
	base := "actloop:{group:" + groupID + "}"
	return []string{base + ":members", base + ":published", base + ":size"}
}

// GroupResult records that trajID, member index of the group groupID of size
// members, has a result, and refreshes the group's TTL. It returns the
// group's traj ids in index order whenever the group is complete and not yet
// marked published (GroupPublished), whether or not this call added the
// member: a caller that crashed between this call and its publish gets the
// ids again from the redelivered result. It returns nil while the group is
// incomplete or once it is published, and ErrGroupConflict, changing
// nothing, if the index is held by another trajectory or size is not the
// size the group's first member with a result gave (which the group keeps):
// members that disagree on the size would otherwise complete the group at
// whichever size the last of them said, or never.
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
	case groupConflict, groupSizeConflict:
		held := ""
		if len(res) > 1 {
			held, _ = res[1].(string)
		}
		if code == groupSizeConflict {
			return nil, fmt.Errorf("group %s member %d (%s): group_size %d, but its members with a result said %s: %w",
				groupID, index, trajID, size, held, ErrGroupConflict)
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
			return nil, nil // members recorded before the size was kept, disagreeing on it
		}
	}
	return ids, nil
}

// GroupRecorded is what the group groupID holds of its members with a
// result: the size the first of them gave (0: none yet) and member index
// to traj id.
func (s *Store) GroupRecorded(ctx context.Context, groupID string) (size int, members map[int]string, err error) {
	k := groupKeys(groupID)
	var sizeCmd *redis.StringCmd
	var membersCmd *redis.MapStringStringCmd
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		sizeCmd = p.Get(ctx, k[2])
		membersCmd = p.HGetAll(ctx, k[0])
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, nil, fmt.Errorf("group %s: %w", groupID, err)
	}
	if v, err := sizeCmd.Result(); err == nil {
		if size, err = strconv.Atoi(v); err != nil {
			return 0, nil, fmt.Errorf("group %s: size %q: %w", groupID, v, err)
		}
	}
	members = map[int]string{}
	for i, id := range membersCmd.Val() {
		n, err := strconv.Atoi(i)
		if err != nil {
			return 0, nil, fmt.Errorf("group %s: member index %q: %w", groupID, i, err)
		}
		members[n] = id
	}
	return size, members, nil
}

// GroupPublished marks groupID's completion as published: GroupResult
// returns nothing for it from then on. Both keys keep ttl.
func (s *Store) GroupPublished(ctx context.Context, groupID string, ttl time.Duration) error {
	k := groupKeys(groupID)
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, k[1], "1", ttl)
		p.PExpire(ctx, k[0], ttl)
		p.PExpire(ctx, k[2], ttl)
		return nil
	})
	if err != nil {
		return fmt.Errorf("group %s published: %w", groupID, err)
	}
	return nil
}

// Replies of groupResultScript; complete is followed by the members hash,
// a conflict by what the group holds (the index's traj id, or its size).
const (
	groupSizeConflict = -2
	groupConflict     = -1
	groupIncomplete   = 0
	groupComplete     = 1
	groupPublished    = 2
)

// groupResultScript checks everything before its first write (Lua in Redis
// has no rollback). A complete group is returned as the whole hash, ordered
// in Go: unpack over a large group would hit Lua's stack limit.
var groupResultScript = redis.NewScript(`
local size = redis.call('GET', KEYS[3])
if size and size ~= ARGV[3] then return {-2, size} end
local held = redis.call('HGET', KEYS[1], ARGV[1])
if held and held ~= ARGV[2] then return {-1, held} end
if redis.call('EXISTS', KEYS[2]) == 1 then return {2} end
if not held then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
if redis.call('HLEN', KEYS[1]) < tonumber(ARGV[3]) then return {0} end
local out = {1}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all do out[#out + 1] = all[i] end
return out
`)
