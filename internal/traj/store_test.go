package traj_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/schema"
)

// Every test runs on the real redis-server (where present) and the
// in-process server that `actloop dev` falls back to.
func forEachRedis(t *testing.T, f func(t *testing.T, s *traj.Store)) {
	for _, kind := range testkit.RedisKinds(t) {
		t.Run(kind, func(t *testing.T) {
			rdb, _ := testkit.StartRedis(t, kind)
			f(t, traj.New(rdb, nil))
		})
	}
}

func sample(id string) schema.Sample {
	return schema.Sample{V: schema.Version, ID: id, Task: "t", Env: schema.Env{Backend: schema.BackendSim}}
}

func TestCreateLoadCommit(t *testing.T) {
	forEachRedis(t, func(t *testing.T, s *traj.Store) {
		ctx := context.Background()
		if err := s.Create(ctx, sample("a"), traj.StatusStarting, map[string]string{traj.FieldReplica: "r0"}); err != nil {
			t.Fatal(err)
		}
		if err := s.Create(ctx, sample("a"), traj.StatusStarting, nil); !errors.Is(err, traj.ErrExists) {
			t.Fatalf("second create: %v", err)
		}
		c := traj.Commit{ID: "a", Seq: 0, Set: map[string]string{traj.FieldStatus: string(traj.StatusNeedsGeneration)},
			Messages: []schema.Message{{Role: "system", Content: "s"}, {Role: "user", Content: "u\x00é"}}}
		c.Append([]int32{1, 2, 3}, nil, 0, -1)
		if err := s.Commit(ctx, c); err != nil {
			t.Fatal(err)
		}
		c2 := traj.Commit{ID: "a", Seq: 1, Set: map[string]string{traj.FieldCalls: "1"}}
		c2.Append([]int32{-7, 1 << 30}, []float32{-0.25, -3.5}, 1, 4)
		if err := s.Commit(ctx, c2); err != nil {
			t.Fatal(err)
		}
		tr, err := s.Load(ctx, "a", traj.WithAll)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Seq != 2 || tr.Status != traj.StatusNeedsGeneration || tr.Replica != "r0" || tr.Calls != 1 || tr.Sample.ID != "a" {
			t.Fatalf("hash: %+v", tr)
		}
		if !slices.Equal(tr.Tokens, []int32{1, 2, 3, -7, 1 << 30}) ||
			!slices.Equal(tr.Logprobs, []float32{0, 0, 0, -0.25, -3.5}) ||
			!slices.Equal(tr.Mask, []int8{0, 0, 0, 1, 1}) ||
			!slices.Equal(tr.Versions, []int32{-1, -1, -1, 4, 4}) {
			t.Fatalf("arrays: %+v", tr)
		}
		if len(tr.Messages) != 2 || tr.Messages[1].Content != "u\x00é" {
			t.Fatalf("messages: %+v", tr.Messages)
		}
		if _, err := s.Load(ctx, "missing", 0); !errors.Is(err, traj.ErrNotFound) {
			t.Fatalf("load missing: %v", err)
		}
	})
}

// A redelivered step (same seq) applies nothing the second time, even when
// many copies race.
func TestCommitAppliesOnce(t *testing.T) {
	forEachRedis(t, func(t *testing.T, s *traj.Store) {
		ctx := context.Background()
		if err := s.Create(ctx, sample("b"), traj.StatusStarting, nil); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		applied, stale := 0, 0
		for range 8 {
			wg.Go(func() {
				c := traj.Commit{ID: "b", Seq: 0, Messages: []schema.Message{{Role: "user", Content: "x"}}}
				c.Append([]int32{9}, []float32{-1}, 1, 0)
				err := s.Commit(ctx, c)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					applied++
				case errors.Is(err, traj.ErrStale):
					stale++
				default:
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if applied != 1 || stale != 7 {
			t.Fatalf("applied %d stale %d, want 1 and 7", applied, stale)
		}
		tr, err := s.Load(ctx, "b", traj.WithAll)
		if err != nil {
			t.Fatal(err)
		}
		if len(tr.Tokens) != 1 || len(tr.Messages) != 1 || tr.Seq != 1 {
			t.Fatalf("after racing commits: %+v", tr)
		}
		ids, err := s.Load(ctx, "b", traj.WithTokenIDs)
		if err != nil {
			t.Fatal(err)
		}
		if len(ids.Tokens) != 1 || ids.Tokens[0] != tr.Tokens[0] || ids.Logprobs != nil || ids.Mask != nil ||
			ids.Versions != nil || ids.Messages != nil {
			t.Fatalf("loaded with the ids only: %+v", ids)
		}
		if err := s.Commit(ctx, traj.Commit{ID: "nope", Seq: 0}); !errors.Is(err, traj.ErrNotFound) {
			t.Fatalf("commit missing: %v", err)
		}
		bad := traj.Commit{ID: "b", Seq: 1, Tokens: []int32{1}}
		if err := s.Commit(ctx, bad); err == nil {
			t.Fatal("commit with uneven arrays succeeded")
		}
	})
}

// A reset commit empties messages and token arrays before appending, in
// Redis and in Apply alike.
func TestCommitReset(t *testing.T) {
	forEachRedis(t, func(t *testing.T, s *traj.Store) {
		ctx := context.Background()
		if err := s.Create(ctx, sample("r"), traj.StatusStarting, nil); err != nil {
			t.Fatal(err)
		}
		c := traj.Commit{ID: "r", Seq: 0, Messages: []schema.Message{{Role: "user", Content: "old"}}}
		c.Append([]int32{1, 2, 3}, []float32{-1, -2, -3}, 1, 0)
		if err := s.Commit(ctx, c); err != nil {
			t.Fatal(err)
		}
		mem, err := s.Load(ctx, "r", traj.WithAll)
		if err != nil {
			t.Fatal(err)
		}
		reset := traj.Commit{ID: "r", Seq: 1, Reset: true, Set: map[string]string{traj.FieldRestarts: "1"},
			Messages: []schema.Message{{Role: "system", Content: "new"}}}
		reset.Append([]int32{7}, nil, 0, -1)
		if err := s.Commit(ctx, reset); err != nil {
			t.Fatal(err)
		}
		mem.Apply(reset)
		got, err := s.Load(ctx, "r", traj.WithAll)
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range []*traj.Trajectory{got, mem} {
			if !slices.Equal(tr.Tokens, []int32{7}) || !slices.Equal(tr.Mask, []int8{0}) || !slices.Equal(tr.Versions, []int32{-1}) ||
				len(tr.Logprobs) != 1 || len(tr.Messages) != 1 || tr.Messages[0].Content != "new" || tr.Restarts != 1 || tr.Seq != 2 {
				t.Fatalf("after reset: %+v", tr)
			}
		}
	})
}

func TestActiveIndexAndExpire(t *testing.T) {
	forEachRedis(t, func(t *testing.T, s *traj.Store) {
		ctx := context.Background()
		for _, id := range []string{"x", "y"} {
			if err := s.AddActive(ctx, id, "r1"); err != nil {
				t.Fatal(err)
			}
		}
		for range 2 { // counted once
			if _, err := s.RemoveActive(ctx, "x", schema.StatusCompleted); err != nil {
				t.Fatal(err)
			}
		}
		act, err := s.Active(ctx)
		if err != nil || len(act) != 1 || act["y"] != "r1" {
			t.Fatalf("active %v %v", act, err)
		}
		counts, err := s.Counts(ctx)
		if err != nil || counts[schema.StatusCompleted] != 1 {
			t.Fatalf("counts %v %v", counts, err)
		}
		if ok, err := s.AddWaiting(ctx, "w1", []byte("first")); err != nil || !ok {
			t.Fatalf("add waiting: %v %v", ok, err)
		}
		if ok, err := s.AddWaiting(ctx, "w1", []byte("second")); err != nil || ok {
			t.Fatalf("second add waiting: %v %v", ok, err)
		}
		if w, err := s.Waiting(ctx); err != nil || string(w["w1"]) != "first" {
			t.Fatalf("waiting %v %v", w, err)
		}
		if err := s.UpdateWaiting(ctx, "w1", []byte("updated")); err != nil {
			t.Fatal(err)
		}
		if err := s.UpdateWaiting(ctx, "absent", []byte("x")); err != nil {
			t.Fatal(err)
		}
		if w, err := s.Waiting(ctx); err != nil || string(w["w1"]) != "updated" || len(w) != 1 {
			t.Fatalf("waiting after update %v %v", w, err)
		}
		if err := s.RemoveWaiting(ctx, "w1"); err != nil {
			t.Fatal(err)
		}
		if w, err := s.Waiting(ctx); err != nil || len(w) != 0 {
			t.Fatalf("waiting after remove %v %v", w, err)
		}
		if err := s.Create(ctx, sample("e"), traj.StatusStarting, nil); err != nil {
			t.Fatal(err)
		}
		if err := s.Expire(ctx, "e", time.Hour); err != nil {
			t.Fatal(err)
		}
		p, err := s.Progress(ctx, []string{"e", "gone"})
		if err != nil || len(p) != 1 || p["e"].Status != traj.StatusStarting {
			t.Fatalf("progress %v %v", p, err)
		}
	})
}
