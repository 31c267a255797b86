package predict_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/actloop/actloop/internal/predict"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/pkg/schema"
)

// forEachRedis runs f on every kind of Redis the tests use.
func forEachRedis(t *testing.T, f func(t *testing.T, rdb *redis.Client)) {
	for _, kind := range testkit.RedisKinds(t) {
		t.Run(kind, func(t *testing.T) {
			rdb, _ := testkit.StartRedis(t, kind)
			f(t, rdb)
		})
	}
}

func TestHistoryEvidenceLevels(t *testing.T) {
	forEachRedis(t, func(t *testing.T, rdb *redis.Client) {
		h := predict.NewHistory(rdb, predict.HistoryConfig{})
		ctx := context.Background()
		// Family "swe": three results in other groups; family "tiny": two.
		observe(t, h,
			result("a0", "ga", "swe", 3000, 10),
			result("b0", "gb", "swe", 5000, 20),
			result("c0", "gc", "swe", 1000, 4),
			result("d0", "gd", "tiny", 100, 1),
			result("e0", "ge", "tiny", 300, 2),
			result("z0", "gz", "", 600, 3),
		)
		tests := []struct {
			name    string
			req     schema.PredictRequest
			want    schema.PredictReply
			wantErr error
		}{
			{
				name: "group first",
				req:  request("a1", "ga", "swe", 0, 0),
				want: reply(3000, 10, predict.SourceGroup),
			},
			{
				name: "group conditioned on progress",
				req:  request("a1", "ga", "swe", 2, 200),
				want: reply(2800, 8, predict.SourceGroup),
			},
			{
				name: "past its group: a small remainder",
				req:  request("a1", "ga", "swe", 12, 4000),
				want: reply(400, 1.2, predict.SourceGroup),
			},
			{
				name: "no group evidence: the family",
				req:  request("n1", "gn", "swe", 10, 1500),
				// Only b0 ran longer than 10 turns and 1500 tokens.
				want: reply(3500, 10, predict.SourceFamily),
			},
			{
				name: "family with too few: global",
				req:  request("n2", "gn", "tiny", 0, 0),
				want: reply(10000.0/6, 40.0/6, predict.SourceGlobal),
			},
			{
				name: "no group id, no family",
				req:  request("n3", "", "", 3, 700),
				// b0 (5000, 20), a0 (3000, 10), c0 (1000, 4).
				want: reply(3000-700, 34.0/3-3, predict.SourceGlobal),
			},
			{
				name: "past everything, before its first turn",
				req:  request("n4", "", "", 0, 9000),
				// One turn of the evidence's mean length, 10000/40 tokens.
				want: reply(900, 1, predict.SourceGlobal),
			},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				got, err := h.Predict(ctx, tt.req)
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Predict: %v, want %v", err, tt.wantErr)
				}
				if !sameReply(got, tt.want) {
					t.Fatalf("Predict = %+v, want %+v", got, tt.want)
				}
			})
		}
	})
}

func TestHistoryNoEvidence(t *testing.T) {
	forEachRedis(t, func(t *testing.T, rdb *redis.Client) {
		h := predict.NewHistory(rdb, predict.HistoryConfig{MinGlobal: 2})
		ctx := context.Background()
		if _, err := h.Predict(ctx, request("a", "g", "f", 0, 0)); !errors.Is(err, predict.ErrNoEvidence) {
			t.Fatalf("empty history: %v, want ErrNoEvidence", err)
		}
		observe(t, h, result("x", "gx", "", 100, 2))
		if _, err := h.Predict(ctx, request("a", "g", "f", 0, 0)); !errors.Is(err, predict.ErrNoEvidence) {
			t.Fatalf("one result, MinGlobal 2: %v, want ErrNoEvidence", err)
		}
		observe(t, h, result("y", "gy", "", 300, 4))
		if got, err := h.Predict(ctx, request("a", "g", "f", 0, 0)); err != nil || !sameReply(got, reply(200, 3, predict.SourceGlobal)) {
			t.Fatalf("two results: %+v, %v", got, err)
		}
	})
}

// A sibling that finishes is evidence for the rest of its group at once.
func TestHistorySiblings(t *testing.T) {
	forEachRedis(t, func(t *testing.T, rdb *redis.Client) {
		h := predict.NewHistory(rdb, predict.HistoryConfig{})
		ctx := context.Background()
		observe(t, h, result("p-0", "p", "", 5000, 25), result("q-0", "q", "", 100, 1), result("r-0", "r", "", 100, 1))
		observe(t, h, result("g-0", "g", "", 800, 4))
		got, err := h.Predict(ctx, request("g-1", "g", "", 1, 150))
		if err != nil || !sameReply(got, reply(650, 3, predict.SourceGroup)) {
			t.Fatalf("sibling: %+v, %v", got, err)
		}
	})
}

func TestHistoryObserveIdempotent(t *testing.T) {
	forEachRedis(t, func(t *testing.T, rdb *redis.Client) {
		h := predict.NewHistory(rdb, predict.HistoryConfig{MinGlobal: 1})
		ctx := context.Background()
		r := result("once", "g", "f", 1000, 5)
		// Redelivered, also concurrently.
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				if err := h.Observe(ctx, r.ResultHead); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		for _, key := range []string{"actloop:{predict}:global", "actloop:{predict}:family:f", "actloop:{predict}:group:g"} {
			if n := rdb.LLen(ctx, key).Val(); n != 1 {
				t.Fatalf("%s holds %d entries, want 1", key, n)
			}
		}
		// A later result of the same trajectory counts neither.
		r.GenTokens = 99999
		observe(t, h, r)
		if n := rdb.LLen(ctx, "actloop:{predict}:global").Val(); n != 1 {
			t.Fatalf("global holds %d entries after a second result of one trajectory", n)
		}
	})
}

func TestHistoryIgnoresFallbacks(t *testing.T) {
	forEachRedis(t, func(t *testing.T, rdb *redis.Client) {
		h := predict.NewHistory(rdb, predict.HistoryConfig{MinGlobal: 1})
		ctx := context.Background()
		fb := result("fb", "g", "f", 10, 1)
		fb.Status = schema.StatusFallback
		observe(t, h, fb)
		if _, err := h.Predict(ctx, request("s", "g", "f", 0, 0)); !errors.Is(err, predict.ErrNoEvidence) {
			t.Fatalf("after a fallback: %v, want ErrNoEvidence", err)
		}
		if keys := rdb.Keys(ctx, "*").Val(); len(keys) != 0 {
			t.Fatalf("a fallback wrote %v", keys)
		}
		// The trajectory may still complete (a redelivered, repaired
		// result): it was not marked.
		observe(t, h, result("fb", "g", "f", 700, 3))
		if got, err := h.Predict(ctx, request("s", "g", "f", 0, 0)); err != nil || !sameReply(got, reply(700, 3, predict.SourceGroup)) {
			t.Fatalf("after completion: %+v, %v", got, err)
		}
	})
}

func TestHistoryBounded(t *testing.T) {
	forEachRedis(t, func(t *testing.T, rdb *redis.Client) {
		h := predict.NewHistory(rdb, predict.HistoryConfig{Keep: 4, MinGlobal: 1})
		ctx := context.Background()
		for i := range 10 {
			observe(t, h, result(fmt.Sprintf("t%d", i), "g", "f", 100*(i+1), 1))
		}
		for _, key := range []string{"actloop:{predict}:global", "actloop:{predict}:family:f", "actloop:{predict}:group:g"} {
			if n := rdb.LLen(ctx, key).Val(); n != 4 {
				t.Fatalf("%s holds %d entries, want 4", key, n)
			}
		}
		// The newest four: 700..1000 tokens.
		if got, err := h.Predict(ctx, request("n", "", "", 0, 0)); err != nil || !sameReply(got, reply(850, 1, predict.SourceGlobal)) {
			t.Fatalf("Predict = %+v, %v", got, err)
		}
		// Every key shares one hash tag; groups expire, the rest do not.
		for _, key := range rdb.Keys(ctx, "*").Val() {
			if !strings.HasPrefix(key, "actloop:{predict}:") {
				t.Fatalf("key %q outside the {predict} hash tag", key)
			}
			ttl := rdb.PTTL(ctx, key).Val()
			switch {
			case strings.Contains(key, ":group:") || strings.Contains(key, ":seen:"):
				if ttl <= 0 {
					t.Fatalf("%s has no TTL (%v)", key, ttl)
				}
			case ttl > 0:
				t.Fatalf("%s expires (%v)", key, ttl)
			}
		}
	})
}

func TestHistoryObserveInvalid(t *testing.T) {
	forEachRedis(t, func(t *testing.T, rdb *redis.Client) {
		h := predict.NewHistory(rdb, predict.HistoryConfig{})
		bad := result("no spaces allowed", "g", "", 10, 1)
		if err := h.Observe(context.Background(), bad.ResultHead); err == nil || !strings.Contains(err.Error(), "traj_id") {
			t.Fatalf("Observe(invalid id): %v", err)
		}
	})
}

// A history that holds an entry it cannot parse skips it.
func TestHistorySkipsCorruptEntries(t *testing.T) {
	forEachRedis(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		rdb.LPush(ctx, "actloop:{predict}:group:g", "garbage", "12 x", "-5 2", "400 2")
		h := predict.NewHistory(rdb, predict.HistoryConfig{})
		if got, err := h.Predict(ctx, request("n", "g", "", 0, 0)); err != nil || !sameReply(got, reply(400, 2, predict.SourceGroup)) {
			t.Fatalf("Predict = %+v, %v", got, err)
		}
	})
}

func reply(tokens, turns float64, source string) schema.PredictReply {
	return schema.PredictReply{V: schema.Version, RemainingTokens: tokens, RemainingTurns: turns, Source: source}
}

// sameReply compares replies, the floats to a relative 1e-9.
func sameReply(a, b schema.PredictReply) bool {
	near := func(x, y float64) bool {
		d := x - y
		if d < 0 {
			d = -d
		}
		return d <= 1e-9*(1+max(x, y, -x, -y))
	}
	return a.V == b.V && a.Source == b.Source && a.Error == b.Error &&
		near(a.RemainingTokens, b.RemainingTokens) && near(a.RemainingTurns, b.RemainingTurns)
}
