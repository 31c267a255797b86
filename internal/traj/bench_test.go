package traj_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/actloop/actloop/internal/localredis"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/schema"
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

// BenchmarkStateBytesPerToken measures what one long trajectory costs: the
// bytes its Redis keys hold per token (MEMORY USAGE on redis-server), and
// per token the bytes of its result's body (what goes over NATS, into the
// object store) beside what the whole result takes as JSON, for a 100k-token
// trajectory of 50 turns (5% generated). It reports; it asserts nothing.
func BenchmarkStateBytesPerToken(b *testing.B) {
	if !slices.Contains(testkit.RedisKinds(b), localredis.KindReal) {
		b.Skip("MEMORY USAGE needs redis-server")
	}
	rdb, _ := testkit.StartRedis(b, localredis.KindReal)
	s := traj.New(rdb, nil)
	ctx := context.Background()
	const n, turns = 100_000, 50
	tr := &traj.Trajectory{ID: "long", Status: traj.StatusTerminated, Seq: 2 * turns, Sample: sample("long"), Reason: "submitted",
		Tokens: make([]int32, n), Logprobs: make([]float32, n), Mask: make([]int8, n), Versions: make([]int32, n)}
	rng := rand.New(rand.NewPCG(1, 2)) // token ids as a vocabulary of 151k spreads them
	for i := range n {
		tr.Tokens[i], tr.Versions[i] = int32(rng.IntN(151_000)), -1
		if i%20 == 0 { // generated
			tr.Logprobs[i], tr.Mask[i], tr.Versions[i] = -0.37, 1, 3
		}
	}
	for range 2 * turns {
		tr.Messages = append(tr.Messages, schema.Message{Role: schema.RoleUser, Content: strings.Repeat("output line\n", 170)})
	}
	for b.Loop() {
		if err := s.Put(ctx, tr); err != nil {
			b.Fatal(err)
		}
	}
	var redisBytes int64
	for _, k := range []string{"", ":msgs", ":tok", ":lp", ":mask", ":ver"} {
		v, err := rdb.MemoryUsage(ctx, "actloop:traj:{long}"+k).Result()
		if err != nil {
			b.Fatal(err)
		}
		redisBytes += v
	}
	r := traj.Result(tr, schema.DefaultControl())
	body, err := schema.EncodeBody(&r)
	if err != nil {
		b.Fatal(err)
	}
	asJSON, err := json.Marshal(r)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(redisBytes)/n, "redis-B/token")
	b.ReportMetric(float64(len(body))/n, "body-B/token")
	b.ReportMetric(float64(len(asJSON))/n, "json-B/token")
}
