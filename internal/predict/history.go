package predict

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/actloop/actloop/pkg/schema"
)

// HistoryConfig configures a History. Zero values take the defaults.
type HistoryConfig struct {
	// Keep is how many totals (the newest) each key keeps. Default 256.
	Keep int
	// MinFamily and MinGlobal are how many totals a family's and the
	// global key need before Predict uses them; a group needs one. Default
	// 3 each.
	MinFamily, MinGlobal int
	// SeenTTL is how long a trajectory stays marked as observed: a result
	// redelivered within it counts once. Default 7 days (results stay in
	// their stream for as long by default).
	SeenTTL time.Duration
	// GroupTTL is how long a group's totals live after its last result:
	// groups are many and short-lived. Default 24h.
	GroupTTL time.Duration
}

// Defaults of HistoryConfig.
const (
	DefaultKeep      = 256
	DefaultMinFamily = 3
	DefaultMinGlobal = 3
	DefaultSeenTTL   = 7 * 24 * time.Hour
	DefaultGroupTTL  = 24 * time.Hour
)

func (c HistoryConfig) withDefaults() HistoryConfig {
	if c.Keep <= 0 {
		c.Keep = DefaultKeep
	}
	if c.MinFamily <= 0 {
		c.MinFamily = DefaultMinFamily
	}
	if c.MinGlobal <= 0 {
		c.MinGlobal = DefaultMinGlobal
	}
	if c.SeenTTL <= 0 {
		c.SeenTTL = DefaultSeenTTL
	}
	if c.GroupTTL <= 0 {
		c.GroupTTL = DefaultGroupTTL
	}
	return c
}

// History predicts from the totals of finished trajectories, kept in Redis
// so every predictor-gw instance shares them. Keys (one hash tag, so the
// Observe script may touch them all on Redis Cluster):
//
//	actloop:{predict}:group:<group_id>    list of "<gen_tokens> <turns>", newest first
//	actloop:{predict}:family:<family>     same
//	actloop:{predict}:global              same
//	actloop:{predict}:seen:<traj_id>      marker: this result was observed
type History struct {
	rdb redis.UniversalClient
	cfg HistoryConfig
}

var _ Predictor = (*History)(nil)

// NewHistory returns a History over rdb.
func NewHistory(rdb redis.UniversalClient, cfg HistoryConfig) *History {
	return &History{rdb: rdb, cfg: cfg.withDefaults()}
}

const keyPrefix = "actloop:{predict}:"

func groupKey(id string) string      { return keyPrefix + "group:" + id }
func familyKey(f string) string      { return keyPrefix + "family:" + f }
func seenKey(traj string) string     { return keyPrefix + "seen:" + traj }
func globalKey() string              { return keyPrefix + "global" }
func entry(tokens, turns int) string { return strconv.Itoa(tokens) + " " + strconv.Itoa(turns) }

// observeScript records one result: KEYS[1] is its marker, KEYS[2..] the
// lists it joins; ARGV[1] the marker's TTL (ms), ARGV[2] the entry,
// ARGV[3] how many entries a list keeps, ARGV[2+i] the TTL (ms, 0 = none)
// of KEYS[i]. A result already marked changes nothing. The marker goes
// first: a script that fails halfway has no rollback, and a lost
// observation is better than a doubled one.
var observeScript = redis.NewScript(`
if not redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[1]) then return 0 end
local keep = tonumber(ARGV[3])
for i = 2, #KEYS do
  redis.call('LPUSH', KEYS[i], ARGV[2])
  redis.call('LTRIM', KEYS[i], 0, keep - 1)
  local ttl = tonumber(ARGV[2 + i])
  if ttl > 0 then redis.call('PEXPIRE', KEYS[i], ttl) end
end
return 1
`)

// Observe records a finished trajectory's totals (GenTokens, Turns) under
// its group, its family and globally. Only completed results count: a
// fallback's totals say how far it got before something broke, not how long
// it would have run. A result whose traj_id was observed before changes
// nothing, so redelivery is harmless.
func (h *History) Observe(ctx context.Context, r schema.ResultHead) error {
	if !schema.Trainable(r.Status) || r.Turns < 1 {
		return nil
	}
	if !schema.ValidID(r.TrajID) {
		return fmt.Errorf("observe: invalid traj_id %q", r.TrajID)
	}
	if r.GenTokens < 0 {
		return fmt.Errorf("observe %s: gen_tokens %d < 0", r.TrajID, r.GenTokens)
	}
	keys := []string{seenKey(r.TrajID), globalKey()}
	args := []any{h.cfg.SeenTTL.Milliseconds(), entry(r.GenTokens, r.Turns), h.cfg.Keep, 0}
	if r.Family != "" {
		keys = append(keys, familyKey(r.Family))
		args = append(args, 0)
	}
	if r.GroupID != "" {
		keys = append(keys, groupKey(r.GroupID))
		args = append(args, h.cfg.GroupTTL.Milliseconds())
	}
	if err := observeScript.Run(ctx, h.rdb, keys, args...).Err(); err != nil {
		return fmt.Errorf("observe %s: %w", r.TrajID, err)
	}
	return nil
}

// Predict predicts from the most specific evidence with enough totals: the
// group (at least one), else the family (MinFamily), else every trajectory
// (MinGlobal); with none it returns ErrNoEvidence. Among those totals it
// takes the ones that ran longer than req has so far (more tokens and more
// turns) and predicts their mean minus what req has. When none ran longer,
// req is already past everything seen: it predicts a small remainder, a
// tenth of what req has and at least one more turn.
func (h *History) Predict(ctx context.Context, req schema.PredictRequest) (schema.PredictReply, error) {
	type level struct {
		source string
		key    string
		min    int
		cmd    *redis.StringSliceCmd
	}
	var levels []*level
	if req.GroupID != "" {
		levels = append(levels, &level{source: SourceGroup, key: groupKey(req.GroupID), min: 1})
	}
	if req.Family != "" {
		levels = append(levels, &level{source: SourceFamily, key: familyKey(req.Family), min: h.cfg.MinFamily})
	}
	levels = append(levels, &level{source: SourceGlobal, key: globalKey(), min: h.cfg.MinGlobal})
	pipe := h.rdb.Pipeline()
	for _, l := range levels {
		l.cmd = pipe.LRange(ctx, l.key, 0, -1)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return schema.PredictReply{}, fmt.Errorf("predict %s: %w", req.TrajID, err)
	}
	evidence := make([]Level, len(levels))
	for i, l := range levels {
		evidence[i] = Level{Source: l.source, Min: l.min, Totals: parseTotals(l.cmd.Val())}
	}
	tokens, turns, source, ok := Remaining(evidence, req.GenTokens, req.Turns)
	if !ok {
		return schema.PredictReply{}, fmt.Errorf("predict %s: %w", req.TrajID, ErrNoEvidence)
	}
	return schema.PredictReply{V: schema.Version, RemainingTokens: tokens, RemainingTurns: turns, Source: source}, nil
}

// Total is one finished trajectory's totals.
type Total struct{ Tokens, Turns int }

// Level is the evidence at one level (group, family, global): the newest
// totals first, and how many it needs to be used.
type Level struct {
	Source string
	Min    int
	Totals []Total
}

// Remaining is History's decision, with no I/O: from the first level of
// levels with at least its Min totals, the remaining work of a trajectory
// that has generated tokens over turns so far (see History.Predict); ok is
// false when no level has enough.
func Remaining(levels []Level, tokens, turns int) (remTokens, remTurns float64, source string, ok bool) {
	for _, l := range levels {
		if len(l.Totals) < max(l.Min, 1) {
			continue
		}
		remTokens, remTurns = remaining(l.Totals, tokens, turns)
		return remTokens, remTurns, l.Source, true
	}
	return 0, 0, "", false
}

// parseTotals parses a list's entries, skipping any that do not parse.
func parseTotals(entries []string) []Total {
	out := make([]Total, 0, len(entries))
	for _, e := range entries {
		a, b, ok := strings.Cut(e, " ")
		if !ok {
			continue
		}
		tokens, err1 := strconv.Atoi(a)
		turns, err2 := strconv.Atoi(b)
		if err1 != nil || err2 != nil || tokens < 0 || turns < 1 {
			continue
		}
		out = append(out, Total{tokens, turns})
	}
	return out
}

// remaining is the mean remaining work of the totals longer than (tokens,
// turns), or a small remainder when there are none. totals is not empty.
func remaining(totals []Total, tokens, turns int) (float64, float64) {
	var sumTokens, sumTurns, n int
	for _, t := range totals {
		if t.Tokens > tokens && t.Turns > turns {
			sumTokens += t.Tokens
			sumTurns += t.Turns
			n++
		}
	}
	if n > 0 {
		return float64(sumTokens)/float64(n) - float64(tokens), float64(sumTurns)/float64(n) - float64(turns)
	}
	// Longer than everything seen: at least one more turn of the length
	// its turns have had so far (or the evidence's, before its first).
	perTurn := 0.0
	if turns > 0 {
		perTurn = float64(tokens) / float64(turns)
	} else {
		var all, calls int
		for _, t := range totals {
			all += t.Tokens
			calls += t.Turns
		}
		perTurn = float64(all) / float64(calls)
	}
	return math.Max(math.Max(0.1*float64(tokens), perTurn), 1), math.Max(0.1*float64(turns), 1)
}
