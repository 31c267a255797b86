package traj_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
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

// create stores a new trajectory for sample(id) on replica r0.
func create(t *testing.T, s *traj.Store, id string) {
	t.Helper()
	if err := s.Create(context.Background(), traj.Admission{Sample: sample(id), Replica: "r0"}); err != nil {
		t.Fatal(err)
	}
}

func load(t *testing.T, s *traj.Store, id string, parts traj.Parts) *traj.Trajectory {
	t.Helper()
	tr, err := s.Load(context.Background(), id, parts)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestCreateLoadCommit(t *testing.T) {
	forEachRedis(t, func(t *testing.T, s *traj.Store) {
		ctx := context.Background()
		create(t, s, "a")
		if err := s.Create(ctx, traj.Admission{Sample: sample("a")}); !errors.Is(err, traj.ErrExists) {
			t.Fatalf("second create: %v", err)
		}
		mem := load(t, s, "a", traj.WithAll)
		if err := s.Commit(ctx, mem, traj.Started{Owner: "w1", Handle: "h1",
			Messages: []schema.Message{{Role: "system", Content: "s"}, {Role: "user", Content: "u\x00é"}},
			Prompt:   []int32{1, 2, 3}}); err != nil {
			t.Fatal(err)
		}
		if err := s.Commit(ctx, mem, traj.Generated{Action: "ls", Turn: traj.Turn{
			Output: []int32{-7, 1 << 30}, Logprobs: []float32{-0.25, -3.5}, Version: 4, CloseTurn: []int32{5}, Text: "x"}}); err != nil {
			t.Fatal(err)
		}
		got := load(t, s, "a", traj.WithAll)
		for _, tr := range []*traj.Trajectory{got, mem} {
			if tr.Seq != 2 || tr.Status != traj.StatusNeedsEnvStep || tr.Replica != "r0" || tr.Calls != 1 || tr.Sample.ID != "a" ||
				tr.Owner != "w1" || tr.Handle != "h1" || tr.Action != "ls" || tr.PromptLen != 3 || tr.GenTokens != 2 || tr.GenCtx != 5 {
				t.Fatalf("hash: %+v", tr)
			}
			if !slices.Equal(tr.Tokens, []int32{1, 2, 3, -7, 1 << 30, 5}) ||
				!slices.Equal(tr.Logprobs, []float32{0, 0, 0, -0.25, -3.5, 0}) ||
				!slices.Equal(tr.Mask, []int8{0, 0, 0, 1, 1, 0}) ||
				!slices.Equal(tr.Versions, []int32{-1, -1, -1, 4, 4, -1}) {
				t.Fatalf("arrays: %+v", tr)
			}
			if len(tr.Messages) != 3 || tr.Messages[1].Content != "u\x00é" || tr.Messages[2].Role != schema.RoleAssistant {
				t.Fatalf("messages: %+v", tr.Messages)
			}
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
		create(t, s, "b")
		var wg sync.WaitGroup
		var mu sync.Mutex
		applied, stale := 0, 0
		for range 8 {
			wg.Go(func() {
				mine := &traj.Trajectory{ID: "b", Status: traj.StatusStarting}
				err := s.Commit(ctx, mine, traj.Started{Messages: []schema.Message{{Role: "user", Content: "x"}}, Prompt: []int32{9}})
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
		tr := load(t, s, "b", traj.WithAll)
		if len(tr.Tokens) != 1 || len(tr.Messages) != 1 || tr.Seq != 1 {
			t.Fatalf("after racing commits: %+v", tr)
		}
		ids := load(t, s, "b", traj.WithTokenIDs)
		if len(ids.Tokens) != 1 || ids.Tokens[0] != tr.Tokens[0] || ids.Logprobs != nil || ids.Mask != nil ||
			ids.Versions != nil || ids.Messages != nil {
			t.Fatalf("loaded with the ids only: %+v", ids)
		}
		gone := &traj.Trajectory{ID: "nope", Status: traj.StatusStarting}
		if err := s.Commit(ctx, gone, traj.Started{}); !errors.Is(err, traj.ErrNotFound) {
			t.Fatalf("commit missing: %v", err)
		}
		if err := s.Commit(ctx, tr, traj.Submitted{}); !errors.Is(err, traj.ErrTransition) || tr.Seq != 1 {
			t.Fatalf("submitted from needs_generation: %v (seq %d), want ErrTransition and nothing changed", err, tr.Seq)
		}
		if err := s.Commit(ctx, tr, traj.Generated{Turn: traj.Turn{Output: []int32{1, 2}, Logprobs: []float32{-1}}}); err == nil {
			t.Fatal("commit with uneven arrays succeeded")
		}
	})
}

// A restart empties messages and token arrays before the next start
// appends, in Redis and in the committed state alike.
func TestCommitReset(t *testing.T) {
	forEachRedis(t, func(t *testing.T, s *traj.Store) {
		ctx := context.Background()
		create(t, s, "r")
		mem := load(t, s, "r", traj.WithAll)
		steps := []traj.Transition{
			traj.Started{Messages: []schema.Message{{Role: "user", Content: "old"}}, Prompt: []int32{1, 2}},
			traj.Interrupted{Output: []int32{3}, Logprobs: []float32{-3}, RID: "rid"},
			traj.Restarted{},
			traj.Started{Messages: []schema.Message{{Role: "system", Content: "new"}}, Prompt: []int32{7}},
		}
		for _, st := range steps {
			if err := s.Commit(ctx, mem, st); err != nil {
				t.Fatal(err)
			}
		}
		got := load(t, s, "r", traj.WithAll)
		for _, tr := range []*traj.Trajectory{got, mem} {
			if !slices.Equal(tr.Tokens, []int32{7}) || !slices.Equal(tr.Mask, []int8{0}) || !slices.Equal(tr.Versions, []int32{-1}) ||
				len(tr.Logprobs) != 1 || len(tr.Messages) != 1 || tr.Messages[0].Content != "new" || tr.Restarts != 1 || tr.Seq != 4 ||
				tr.RID != "" || tr.TurnGen != 0 || tr.GenTokens != 0 || tr.PromptLen != 1 {
				t.Fatalf("after reset: %+v", tr)
			}
		}
	})
}

// Put stores a whole state that Load reads back as it was.
func TestPutLoad(t *testing.T) {
	forEachRedis(t, func(t *testing.T, s *traj.Store) {
		ctx := context.Background()
		want := &traj.Trajectory{ID: "p", Status: traj.StatusFinishing, Seq: 7, Replica: "r1", Owner: "w", Handle: "h",
			Reason: "step limit", Diff: "d", Tests: map[string]string{"t1": "PASSED"}, Reward: 0.5, Trace: "tp", Sample: sample("p"),
			Calls: 3, Commands: 2, GenTokens: 9, PromptLen: 4, RID: "rid", TurnGen: 1, GenCtx: 13, Preempts: 1, Restarts: 2,
			PreemptedAt: time.UnixMilli(1000), AdmittedAt: time.UnixMilli(2000), UpdatedAt: time.UnixMilli(3000),
			FinishedAt: time.UnixMilli(4000), Messages: []schema.Message{{Role: "user", Content: "m"}},
			Tokens: []int32{1, 2}, Logprobs: []float32{0, -1}, Mask: []int8{0, 1}, Versions: []int32{-1, 3}}
		if err := s.Put(ctx, want); err != nil {
			t.Fatal(err)
		}
		got := load(t, s, "p", traj.WithAll)
		if fmt.Sprint(*got) != fmt.Sprint(*want) {
			t.Fatalf("Load after Put:\n got %+v\nwant %+v", *got, *want)
		}
	})
}

func TestActiveIndexAndExpire(t *testing.T) {
	forEachRedis(t, func(t *testing.T, s *traj.Store) {
		ctx := context.Background()
		for _, id := range []string{"x", "y"} {
			if err := s.AddActive(ctx, id, traj.ActiveEntry{Replica: "r1", GroupID: "g", GroupSize: 2}); err != nil {
				t.Fatal(err)
			}
		}
		for range 2 { // counted once
			if _, err := s.RemoveActive(ctx, "x", schema.StatusSubmitted); err != nil {
				t.Fatal(err)
			}
		}
		act, err := s.Active(ctx)
		if err != nil || len(act) != 1 || act["y"] != (traj.ActiveEntry{Replica: "r1", GroupID: "g", GroupSize: 2}) {
			t.Fatalf("active %v %v", act, err)
		}
		counts, err := s.Counts(ctx)
		if err != nil || counts[schema.StatusSubmitted] != 1 {
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
		create(t, s, "e")
		if err := s.Expire(ctx, "e", time.Hour); err != nil {
			t.Fatal(err)
		}
		p, err := s.Progress(ctx, []string{"e", "gone"})
		if err != nil || len(p) != 1 || p["e"].Status != traj.StatusStarting {
			t.Fatalf("progress %v %v", p, err)
		}
	})
}

// A coordinator's writes carry its term: a trajectory stamped by a later
// term refuses them (ErrFenced, and the Store's onFenced hears of it),
// changing nothing; the later term's writes and the workers' (term 0) go
// through; a term's writes stamp what they touch.
func TestFencedWrites(t *testing.T) {
	forEachRedis(t, func(t *testing.T, s *traj.Store) {
		ctx := context.Background()
		var refused []error
		old := s.Fenced(5, func(err error) { refused = append(refused, err) })
		next := s.Fenced(6, nil)
		if err := old.Create(ctx, traj.Admission{Sample: sample("a"), Replica: "r0"}); err != nil {
			t.Fatal(err)
		}
		create(t, old, "b")
		// The old term still writes what it stamped.
		if err := old.SetReplica(ctx, "a", "r1"); err != nil {
			t.Fatal(err)
		}
		// The next term takes over a and b.
		if err := next.Stamp(ctx, []string{"a", "b", "gone"}); err != nil {
			t.Fatal(err)
		}
		a := load(t, s, "a", traj.WithAll)
		b := load(t, s, "b", 0)
		for what, err := range map[string]error{
			"commit":      old.Commit(ctx, a, traj.Aborted{Reason: "stalled: old view"}),
			"set replica": old.SetReplica(ctx, "a", "r2"),
			"stamp":       old.Stamp(ctx, []string{"b"}),
		} {
			if !errors.Is(err, traj.ErrFenced) {
				t.Fatalf("%s by the old term: %v, want ErrFenced", what, err)
			}
		}
		if _, err := old.SetOwner(ctx, "b", "w0", "w9"); !errors.Is(err, traj.ErrFenced) {
			t.Fatalf("set owner by the old term: %v, want ErrFenced", err)
		}
		if len(refused) != 4 {
			t.Fatalf("onFenced heard %d refusals, want 4", len(refused))
		}
		if got := load(t, s, "a", 0); got.Seq != 0 || got.Status != traj.StatusStarting || got.Replica != "r1" {
			t.Fatalf("a after refused writes: seq %d %s on %s", got.Seq, got.Status, got.Replica)
		}
		// A worker (term 0) and the new term write on.
		a = load(t, s, "a", traj.WithAll)
		if err := s.Commit(ctx, a, traj.Started{Owner: "w1", Messages: []schema.Message{{Role: "user", Content: "u"}},
			Prompt: []int32{1}}); err != nil {
			t.Fatal(err)
		}
		if err := next.SetReplica(ctx, "a", "r2"); err != nil {
			t.Fatal(err)
		}
		if err := next.Commit(ctx, b, traj.Aborted{Reason: "stalled"}); err != nil {
			t.Fatal(err)
		}
	})
}

// Every write that moves a trajectory's seq appends one line to its audit
// log, in the same script: a refused (stale) commit appends nothing.
func TestAuditLog(t *testing.T) {
	forEachRedis(t, func(t *testing.T, s *traj.Store) {
		ctx := context.Background()
		create(t, s, "a")
		tr := load(t, s, "a", traj.WithAll)
		stale := *tr
		if err := s.Commit(ctx, tr, traj.Started{Owner: "w1", Messages: []schema.Message{{Role: "user", Content: "u"}},
			Prompt: []int32{1}}); err != nil {
			t.Fatal(err)
		}
		if err := s.Commit(ctx, &stale, traj.Aborted{Reason: "late"}); !errors.Is(err, traj.ErrStale) {
			t.Fatalf("stale commit: %v", err)
		}
		if err := s.Commit(ctx, tr, traj.Aborted{Reason: "done"}); err != nil {
			t.Fatal(err)
		}
		log, err := s.Audit(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, l := range log {
			f := strings.Fields(l)
			if len(f) != 3 {
				t.Fatalf("audit line %q", l)
			}
			got = append(got, f[0]+" "+f[1])
		}
		if want := []string{"0 Created", "1 Started", "2 Aborted"}; !slices.Equal(got, want) {
			t.Fatalf("audit %q, want %q", got, want)
		}
	})
}

// ClaimRID records a first generation's request id at its step: the first
// claim wins and later ones get it; a claim for a step past, or of a
// trajectory that is gone, is refused; a restart clears the rid, and the
// next run claims its own.
func TestClaimRID(t *testing.T) {
	forEachRedis(t, func(t *testing.T, s *traj.Store) {
		ctx := context.Background()
		create(t, s, "c")
		mem := load(t, s, "c", traj.WithAll)
		if err := s.Commit(ctx, mem, traj.Started{Prompt: []int32{1}}); err != nil {
			t.Fatal(err)
		}
		seq := mem.Seq
		if got, err := s.ClaimRID(ctx, "c", seq, "first"); err != nil || got != "first" {
			t.Fatalf("first claim: %q %v", got, err)
		}
		if got, err := s.ClaimRID(ctx, "c", seq, "second"); err != nil || got != "first" {
			t.Fatalf("second claim: %q %v, want the first's rid", got, err)
		}
		if got := load(t, s, "c", 0); got.RID != "first" {
			t.Fatalf("stored rid %q", got.RID)
		}
		if _, err := s.ClaimRID(ctx, "c", seq-1, "stale"); !errors.Is(err, traj.ErrStale) {
			t.Fatalf("claim at a step past: %v, want ErrStale", err)
		}
		if _, err := s.ClaimRID(ctx, "gone", 0, "x"); !errors.Is(err, traj.ErrNotFound) {
			t.Fatalf("claim of a trajectory that is gone: %v, want ErrNotFound", err)
		}
		if _, err := s.Load(ctx, "gone", 0); !errors.Is(err, traj.ErrNotFound) {
			t.Fatalf("a refused claim left state behind: %v", err)
		}
		// The generation's commit keeps the claimed rid; a restart clears it.
		mem = load(t, s, "c", traj.WithAll)
		for _, st := range []traj.Transition{traj.Interrupted{Output: []int32{3}, Logprobs: []float32{-3}, RID: "first"}, traj.Restarted{},
			traj.Started{Prompt: []int32{7}}} {
			if err := s.Commit(ctx, mem, st); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := s.ClaimRID(ctx, "c", mem.Seq, "next-run"); err != nil || got != "next-run" {
			t.Fatalf("claim after a restart: %q %v", got, err)
		}
	})
}
