package traj

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/actloop/actloop/pkg/schema"
	"github.com/redis/go-redis/v9"
)

// The coordinator's index of admitted trajectories and its counters. These
// keys share the hash tag {coordinator} (one script touches both on Redis
// Cluster); only the coordinator writes them.
const (
	activeKey  = "actloop:{coordinator}:active"  // hash: traj id -> replica
	statsKey   = "actloop:{coordinator}:stats"   // hash: counters
	waitingKey = "actloop:{coordinator}:waiting" // hash: sample id -> waiting entry
)

// ActiveEntry is what the coordinator's index keeps of an admitted
// trajectory besides its id: its replica at admission and what a fallback
// result needs to count towards its group, should the trajectory's own
// state be lost.
type ActiveEntry struct {
	Replica    string `json:"replica"`
	GroupID    string `json:"group_id,omitempty"`
	GroupIndex int    `json:"group_index,omitempty"`
	GroupSize  int    `json:"group_size,omitempty"`
	Family     string `json:"family,omitempty"`
	Purpose    string `json:"purpose,omitempty"`
}

// ActiveEntryOf is the index entry of sample s admitted on replica.
func ActiveEntryOf(s schema.Sample, replica string) ActiveEntry {
	return ActiveEntry{Replica: replica, GroupID: s.GroupID, GroupIndex: s.GroupIndex, GroupSize: s.GroupSize, Family: s.Family,
		Purpose: s.Purpose}
}

// Head is the head of a result for trajectory id that the entry alone can
// give (its group fields, purpose and replica), for a trajectory whose
// state cannot be read; FallbackResult fills the rest.
func (e ActiveEntry) Head(id string) schema.ResultHead {
	return schema.ResultHead{TrajID: id, GroupID: e.GroupID, GroupIndex: e.GroupIndex, GroupSize: e.GroupSize,
		Family: e.Family, Purpose: schema.ResultPurpose(e.Purpose), Replica: e.Replica}
}

// AddActive records an admitted trajectory; idempotent.
func (s *Store) AddActive(ctx context.Context, id string, e ActiveEntry) error {
	b, err := json.Marshal(e)
	if err == nil {
		err = s.rdb.HSet(ctx, activeKey, id, b).Err()
	}
	if err != nil {
		return fmt.Errorf("add active %s: %w", id, err)
	}
	return nil
}

// RemoveActive forgets a finished trajectory and counts it under status
// once: it reports whether id was active.
func (s *Store) RemoveActive(ctx context.Context, id, status string) (bool, error) {
	n, err := removeActiveScript.Run(ctx, s.rdb, []string{activeKey, statsKey}, id, status).Int()
	if err != nil {
		return false, fmt.Errorf("remove active %s: %w", id, err)
	}
	return n == 1, nil
}

var removeActiveScript = redis.NewScript(`
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HINCRBY', KEYS[2], ARGV[2], 1)
return 1
`)

// Active returns every admitted, unfinished trajectory's entry. An entry
// that is not a JSON object (written by a release that kept only the
// replica) reads as that replica.
func (s *Store) Active(ctx context.Context) (map[string]ActiveEntry, error) {
	m, err := s.rdb.HGetAll(ctx, activeKey).Result()
	if err != nil {
		return nil, fmt.Errorf("active: %w", err)
	}
	out := make(map[string]ActiveEntry, len(m))
	for id, v := range m {
		var e ActiveEntry
		if json.Unmarshal([]byte(v), &e) != nil {
			e = ActiveEntry{Replica: v}
		}
		out[id] = e
	}
	return out, nil
}

// Counts returns the finished-trajectory counters by result status.
func (s *Store) Counts(ctx context.Context) (map[string]int64, error) {
	m, err := s.rdb.HGetAll(ctx, statsKey).Result()
	if err != nil {
		return nil, fmt.Errorf("counts: %w", err)
	}
	out := make(map[string]int64, len(m))
	for k, v := range m {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("counts: field %s: %w", k, err)
		}
		out[k] = n
	}
	return out, nil
}

// AddWaiting records a sample waiting for admission (entry is opaque to the
// store); it keeps the first entry of an id and reports whether it added.
func (s *Store) AddWaiting(ctx context.Context, id string, entry []byte) (bool, error) {
	ok, err := s.rdb.HSetNX(ctx, waitingKey, id, entry).Result()
	if err != nil {
		return false, fmt.Errorf("add waiting %s: %w", id, err)
	}
	return ok, nil
}

// UpdateWaiting replaces the entry of a sample still waiting; it does
// nothing for one no longer waiting.
func (s *Store) UpdateWaiting(ctx context.Context, id string, entry []byte) error {
	if err := updateWaitingScript.Run(ctx, s.rdb, []string{waitingKey}, id, entry).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("update waiting %s: %w", id, err)
	}
	return nil
}

var updateWaitingScript = redis.NewScript(`
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
`)

// RemoveWaiting forgets a waiting sample (admitted or dropped); idempotent.
func (s *Store) RemoveWaiting(ctx context.Context, id string) error {
	if err := s.rdb.HDel(ctx, waitingKey, id).Err(); err != nil {
		return fmt.Errorf("remove waiting %s: %w", id, err)
	}
	return nil
}

// Waiting returns every waiting sample's entry by id.
func (s *Store) Waiting(ctx context.Context) (map[string][]byte, error) {
	m, err := s.rdb.HGetAll(ctx, waitingKey).Result()
	if err != nil {
		return nil, fmt.Errorf("waiting: %w", err)
	}
	out := make(map[string][]byte, len(m))
	for k, v := range m {
		out[k] = []byte(v)
	}
	return out, nil
}

// SetReplica moves a trajectory to another replica (its own went down). It
// is not a step: it does not move seq, so a step in flight still commits; the
// next gen step goes to the new replica. A missing trajectory is left alone.
func (s *Store) SetReplica(ctx context.Context, id, replica string) error {
	n, err := setReplicaScript.Run(ctx, s.rdb, []string{keysOf(id).hash}, s.term, replica).Int()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("set replica of %s: %w", id, err)
	}
	if n == -2 {
		return s.fenced("set replica of " + id)
	}
	return nil
}

// SetOwner moves trajectory id to env-worker owner, if it still owns it
// from: a no-op when the trajectory is gone or has moved on to another.
// It reports whether it moved it.
func (s *Store) SetOwner(ctx context.Context, id, from, owner string) (bool, error) {
	n, err := setOwnerScript.Run(ctx, s.rdb, []string{keysOf(id).hash}, s.term, from, owner).Int()
	if err != nil && !errors.Is(err, redis.Nil) {
		return false, fmt.Errorf("set owner of %s: %w", id, err)
	}
	if n == -2 {
		return false, s.fenced("set owner of " + id)
	}
	return n == 1, nil
}

var setOwnerScript = redis.NewScript(`
` + fenceLua + `
if fenced then return -2 end
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 'owner', ARGV[3])
` + stampLua + `
return 1
`)

var setReplicaScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
` + fenceLua + `
if fenced then return -2 end
redis.call('HSET', KEYS[1], 'replica', ARGV[2])
` + stampLua + `
return 1
`)
