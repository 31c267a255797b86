package traj_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/traj"
)

// groupCall is one GroupResult call (or, with publish, one GroupPublished)
// and what it should return.
type groupCall struct {
	group   string
	index   int
	traj    string
	size    int
	publish bool
	want    []string
	wantErr error
}

func TestGroupResult(t *testing.T) {
	call := func(group string, index int, traj string, size int, want ...string) groupCall {
		return groupCall{group: group, index: index, traj: traj, size: size, want: want}
	}
	published := func(group string) groupCall { return groupCall{group: group, publish: true} }
	tests := []struct {
		name  string
		calls []groupCall
	}{
		{"out of order, completes in index order", []groupCall{
			call("g", 2, "c", 3),
			call("g", 0, "a", 3),
			call("g", 1, "b", 3, "a", "b", "c"),
		}},
		{"redelivered member before completion adds nothing", []groupCall{
			call("g", 1, "b", 2),
			call("g", 1, "b", 2),
			call("g", 0, "a", 2, "a", "b"),
		}},
		{"redelivered member after completion, before publish, returns the ids again", []groupCall{
			call("g", 0, "a", 2),
			call("g", 1, "b", 2, "a", "b"),
			call("g", 1, "b", 2, "a", "b"),
			call("g", 0, "a", 2, "a", "b"),
			published("g"),
			call("g", 0, "a", 2),
			call("g", 1, "b", 2),
		}},
		{"group of one completes with its single result", []groupCall{
			call("solo", 0, "s", 1, "s"),
			published("solo"),
			call("solo", 0, "s", 1),
		}},
		{"groups are independent", []groupCall{
			call("g1", 0, "x0", 2),
			call("g2", 1, "y1", 2),
			call("g2", 0, "y0", 2, "y0", "y1"),
			published("g2"),
			call("g1", 1, "x1", 2, "x0", "x1"),
		}},
		{"an index held by another trajectory is a conflict and changes nothing", []groupCall{
			call("g", 0, "a", 2),
			{group: "g", index: 0, traj: "other", size: 2, wantErr: traj.ErrGroupConflict},
			call("g", 1, "b", 2, "a", "b"),
			published("g"),
			{group: "g", index: 1, traj: "other", size: 2, wantErr: traj.ErrGroupConflict},
		}},
		// Members that disagree on the size (issue 31, item 8): the group
		// keeps its first member's, and one saying another is a conflict
		// that changes nothing, whichever order their results come in.
		{"a member saying a larger size is a conflict and changes nothing", []groupCall{
			call("g", 0, "a", 2),
			{group: "g", index: 1, traj: "b", size: 3, wantErr: traj.ErrGroupConflict},
			call("g", 1, "b", 2, "a", "b"),
		}},
		{"a member saying a smaller size does not complete the group at it", []groupCall{
			call("g", 2, "c", 3),
			call("g", 1, "b", 3),
			{group: "g", index: 0, traj: "a", size: 2, wantErr: traj.ErrGroupConflict},
			call("g", 0, "a", 3, "a", "b", "c"),
		}},
		{"a size conflict after completion changes nothing", []groupCall{
			call("g", 0, "a", 1, "a"),
			published("g"),
			{group: "g", index: 0, traj: "a", size: 2, wantErr: traj.ErrGroupConflict},
			call("g", 0, "a", 1),
		}},
	}
	forEachRedis(t, func(t *testing.T, s *traj.Store) {
		ctx := context.Background()
		for n, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				for i, c := range tt.calls {
					group := fmt.Sprintf("case%d-%s", n, c.group) // a fresh group per case
					if c.publish {
						if err := s.GroupPublished(ctx, group, time.Hour); err != nil {
							t.Fatalf("call %d: %v", i, err)
						}
						continue
					}
					got, err := s.GroupResult(ctx, group, c.index, c.traj, c.size, time.Hour)
					if !errors.Is(err, c.wantErr) || (err != nil && c.wantErr == nil) {
						t.Fatalf("call %d (%s #%d = %s): error %v, want %v", i, c.group, c.index, c.traj, err, c.wantErr)
					}
					if !slices.Equal(got, c.want) {
						t.Fatalf("call %d (%s #%d = %s): %q, want %q", i, c.group, c.index, c.traj, got, c.want)
					}
				}
			})
		}
	})
}

func TestGroupResultRejectsBadMembers(t *testing.T) {
	forEachRedis(t, func(t *testing.T, s *traj.Store) {
		ctx := context.Background()
		for _, c := range []groupCall{
			{group: "g", index: 2, traj: "a", size: 2},
			{group: "g", index: -1, traj: "a", size: 2},
			{group: "g", index: 0, traj: "a", size: 0},
			{group: "", index: 0, traj: "a", size: 1},
			{group: "g", index: 0, traj: "", size: 1},
			{group: "g{x}", index: 0, traj: "a", size: 1},
		} {
			if got, err := s.GroupResult(ctx, c.group, c.index, c.traj, c.size, time.Hour); err == nil {
				t.Errorf("%+v: accepted (%q)", c, got)
			}
		}
		if _, err := s.GroupResult(ctx, "g", 0, "a", 1, 0); err == nil {
			t.Error("zero ttl accepted")
		}
	})
}

// Members finishing at once: exactly the call that adds the last one sees
// the group complete.
func TestGroupResultRacingMembers(t *testing.T) {
	forEachRedis(t, func(t *testing.T, s *traj.Store) {
		ctx := context.Background()
		const size = 16
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			dones [][]string
		)
		for i := range size {
			wg.Go(func() {
				ids, err := s.GroupResult(ctx, "race", i, fmt.Sprintf("t%02d", i), size, time.Hour)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Error(err)
				}
				if ids != nil {
					dones = append(dones, ids)
				}
			})
		}
		wg.Wait()
		if len(dones) != 1 {
			t.Fatalf("%d calls saw the group complete, want 1: %q", len(dones), dones)
		}
		for i, id := range dones[0] {
			if id != fmt.Sprintf("t%02d", i) {
				t.Fatalf("ids %q not in index order", dones[0])
			}
		}
	})
}

// A group's keys expire: GroupResult refreshes the TTL, GroupPublished sets
// it on both.
func TestGroupKeysExpire(t *testing.T) {
	for _, kind := range testkit.RedisKinds(t) {
		t.Run(kind, func(t *testing.T) {
			rdb, _ := testkit.StartRedis(t, kind)
			s := traj.New(rdb, nil)
			ctx := context.Background()
			if _, err := s.GroupResult(ctx, "ttl", 0, "a", 2, time.Hour); err != nil {
				t.Fatal(err)
			}
			if err := s.GroupPublished(ctx, "ttl", 2*time.Hour); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"actloop:{group:ttl}:members", "actloop:{group:ttl}:published", "actloop:{group:ttl}:size"} {
				ttl, err := rdb.PTTL(ctx, k).Result()
				if err != nil || ttl <= time.Hour || ttl > 2*time.Hour {
					t.Errorf("%s: ttl %v %v, want just under 2h", k, ttl, err)
				}
			}
		})
	}
}
