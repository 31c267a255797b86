package traj_test

import (
	"context"
	"testing"

	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/schema"
)

// BenchmarkCommit is one step's seq-checked commit (a turn: 200 generated
// tokens and a message) and the Load that precedes it, on each Redis kind.
func BenchmarkCommit(b *testing.B) {
	for _, kind := range testkit.RedisKinds(b) {
		b.Run(kind, func(b *testing.B) {
			rdb, _ := testkit.StartRedis(b, kind)
			s := traj.New(rdb, nil)
			ctx := context.Background()
			if err := s.Create(ctx, sample("bench"), traj.StatusNeedsGeneration, nil); err != nil {
				b.Fatal(err)
			}
			toks := make([]int32, 200)
			lps := make([]float32, 200)
			b.ReportAllocs()
			for b.Loop() {
				t, err := s.Load(ctx, "bench", 0)
				if err != nil {
					b.Fatal(err)
				}
				c := traj.Commit{ID: "bench", Seq: t.Seq, Set: map[string]string{traj.FieldStatus: string(traj.StatusNeedsGeneration)},
					Messages: []schema.Message{{Role: schema.RoleAssistant, Content: "THOUGHT: x\n\n```bash\nls\n```"}}}
				c.Append(toks, lps, 1, 0)
				if err := s.Commit(ctx, c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
