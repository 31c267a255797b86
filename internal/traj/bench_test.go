package traj_test

import (
	"context"
	"testing"

	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/traj"
)

// BenchmarkCommit is one step's seq-checked commit (a turn: 200 generated
// tokens and a message, ending in a format error so that the status stays) and the Load that precedes it, on each Redis kind.
func BenchmarkCommit(b *testing.B) {
	for _, kind := range testkit.RedisKinds(b) {
		b.Run(kind, func(b *testing.B) {
			rdb, _ := testkit.StartRedis(b, kind)
			s := traj.New(rdb, nil)
			ctx := context.Background()
			if err := s.Put(ctx, &traj.Trajectory{ID: "bench", Status: traj.StatusNeedsGeneration, Sample: sample("bench")}); err != nil {
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
				if err := s.Commit(ctx, t, traj.FormatErrored{Turn: traj.Turn{Output: toks, Logprobs: lps,
					Text: "THOUGHT: x\n\n```bash\nls\n```"}}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
