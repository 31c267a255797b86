package predict

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/actloop/actloop/pkg/schema"
)

// SourceLearned names the learned model's replies.
const SourceLearned = "learned"

// LearnedConfig configures a Learned. Zero values take the defaults.
type LearnedConfig struct {
	// MinExamples is the weight of examples the model needs before it
	// answers; until then History answers. Default 200.
	MinExamples float64
	// Decay scales what was learned before each finished trajectory is
	// added: 0.999 forgets half of it over about 700 trajectories, so the
	// model follows a policy that changes as it trains. Default 0.999.
	Decay float64
	// Lambda is the ridge penalty. Default 1.
	Lambda float64
	// Refit is how long a fitted model is used before the shared
	// statistics are read again. Default 1 s.
	Refit time.Duration
	// AskTTL is how long the features asked of a trajectory wait for its
	// result. Default 24 h.
	AskTTL time.Duration
	// SeenTTL is how long a trajectory stays marked as learned from.
	// Default 7 days.
	SeenTTL time.Duration
}

// Defaults of LearnedConfig.
const (
	DefaultMinExamples = 200
	DefaultDecay       = 0.999
	DefaultLambda      = 1.0
	DefaultRefit       = time.Second
	DefaultAskTTL      = 24 * time.Hour
	// maxAsks bounds the features kept per trajectory (one per model call).
	maxAsks = 1024
)

func (c LearnedConfig) withDefaults() LearnedConfig {
	if c.MinExamples <= 0 {
		c.MinExamples = DefaultMinExamples
	}
	if c.Decay <= 0 || c.Decay > 1 {
		c.Decay = DefaultDecay
	}
	if c.Lambda <= 0 {
		c.Lambda = DefaultLambda
	}
	if c.Refit <= 0 {
		c.Refit = DefaultRefit
	}
	if c.AskTTL <= 0 {
		c.AskTTL = DefaultAskTTL
	}
	if c.SeenTTL <= 0 {
		c.SeenTTL = DefaultSeenTTL
	}
	return c
}

// Learned predicts with a regression on what the conversation says
// (Features), learned online from finished trajectories, with History's
// answer among its features; until it has MinExamples it answers as
// History. Every prediction's features are kept in Redis until the
// trajectory's result, which turns each into an example (what it had
// left); the statistics are shared by every predictor-gw instance. Keys,
// beside History's (one hash tag):
//
//	actloop:{predict}:learned           hash: the Regression's statistics, field i = Stats()[i]
//	actloop:{predict}:ask:<traj_id>     list of "<gen_tokens> <turns> <x0> … <xn>", one per prediction
//	actloop:{predict}:learned:<traj_id> marker: this result was learned from
type Learned struct {
	h   *History
	rdb redis.UniversalClient
	cfg LearnedConfig
	now func() time.Time

	mu     sync.Mutex
	model  Model
	ready  bool
	fitted time.Time
}

var _ Predictor = (*Learned)(nil)

// NewLearned returns a Learned over rdb, with h for its history features
// and until it is trained.
func NewLearned(rdb redis.UniversalClient, h *History, cfg LearnedConfig) *Learned {
	return &Learned{h: h, rdb: rdb, cfg: cfg.withDefaults(), now: time.Now}
}

func statsKey() string            { return keyPrefix + "learned" }
func askKey(traj string) string   { return keyPrefix + "ask:" + traj }
func learnedKey(id string) string { return keyPrefix + "learned:" + id }

// Predict answers from the model once it is trained, else as History
// does; either way it keeps req's features for learning.
func (l *Learned) Predict(ctx context.Context, req schema.PredictRequest) (schema.PredictReply, error) {
	if err := req.Validate(); err != nil { // its id names a key
		return schema.PredictReply{}, fmt.Errorf("predict: %w", err)
	}
	hist, herr := l.h.Predict(ctx, req)
	if herr != nil && !errors.Is(herr, ErrNoEvidence) {
		return schema.PredictReply{}, herr
	}
	x := Features(req, hist, herr == nil)
	pipe := l.rdb.Pipeline()
	pipe.RPush(ctx, askKey(req.TrajID), encodeAsk(Ask{Tokens: req.GenTokens, Turns: req.Turns, X: x}))
	pipe.LTrim(ctx, askKey(req.TrajID), -maxAsks, -1)
	pipe.PExpire(ctx, askKey(req.TrajID), l.cfg.AskTTL)
	var stats *redis.MapStringStringCmd
	refit := l.stale()
	if refit {
		stats = pipe.HGetAll(ctx, statsKey())
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return schema.PredictReply{}, fmt.Errorf("predict %s: %w", req.TrajID, err)
	}
	if refit {
		l.fit(stats.Val())
	}
	l.mu.Lock()
	m, ready := l.model, l.ready
	l.mu.Unlock()
	if !ready {
		return hist, herr
	}
	tokens, turns := m.Predict(x)
	return schema.PredictReply{V: schema.Version, RemainingTokens: tokens, RemainingTurns: turns, Source: SourceLearned}, nil
}

func (l *Learned) stale() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.now().Sub(l.fitted) >= l.cfg.Refit
}

// fit refits the model from the shared statistics as read.
func (l *Learned) fit(h map[string]string) {
	s := make([]float64, regressionLen)
	for i := range s {
		s[i], _ = strconv.ParseFloat(h[strconv.Itoa(i)], 64)
	}
	var r Regression
	r.SetStats(s)
	m, ok := r.Trained(l.cfg.Lambda, l.cfg.MinExamples)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fitted = l.now()
	l.model, l.ready = m, ok
}

// learnScript adds one trajectory's examples: KEYS[1] its marker, KEYS[2]
// the statistics, KEYS[3] its asks; ARGV[1] the marker's TTL (ms), ARGV[2]
// the decay, ARGV[3..] the statistics to add. A trajectory already
// learned from changes nothing; the marker goes first (no rollback).
var learnScript = redis.NewScript(`
if not redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[1]) then return 0 end
local decay = tonumber(ARGV[2])
for i = 3, #ARGV do
  local f = tostring(i - 3)
  local cur = tonumber(redis.call('HGET', KEYS[2], f) or '0')
  redis.call('HSET', KEYS[2], f, string.format('%.17g', cur * decay + tonumber(ARGV[i])))
end
redis.call('DEL', KEYS[3])
return 1
`)

// Observe records r in History and learns from the predictions asked of
// it; a fallback teaches nothing (its features are dropped). Idempotent
// per traj_id.
func (l *Learned) Observe(ctx context.Context, r schema.ResultHead) error {
	if err := l.h.Observe(ctx, r); err != nil {
		return err
	}
	if !schema.Trainable(r.Status) || r.Turns < 1 {
		return l.rdb.Del(ctx, askKey(r.TrajID)).Err()
	}
	entries, err := l.rdb.LRange(ctx, askKey(r.TrajID), 0, -1).Result()
	if err != nil {
		return fmt.Errorf("learn %s: %w", r.TrajID, err)
	}
	var asks []Ask
	for _, e := range entries {
		if a, ok := decodeAsk(e); ok {
			asks = append(asks, a)
		}
	}
	if len(asks) == 0 {
		return nil
	}
	args := []any{l.cfg.SeenTTL.Milliseconds(), strconv.FormatFloat(l.cfg.Decay, 'g', -1, 64)}
	for _, v := range Delta(asks, Total{Tokens: r.GenTokens, Turns: r.Turns}) {
		args = append(args, strconv.FormatFloat(v, 'g', -1, 64))
	}
	if err := learnScript.Run(ctx, l.rdb, []string{learnedKey(r.TrajID), statsKey(), askKey(r.TrajID)}, args...).Err(); err != nil {
		return fmt.Errorf("learn %s: %w", r.TrajID, err)
	}
	return nil
}

func encodeAsk(a Ask) string {
	var b strings.Builder
	b.WriteString(strconv.Itoa(a.Tokens))
	b.WriteByte(' ')
	b.WriteString(strconv.Itoa(a.Turns))
	for _, v := range a.X {
		b.WriteByte(' ')
		b.WriteString(strconv.FormatFloat(v, 'g', 9, 64))
	}
	return b.String()
}

// decodeAsk parses an entry of an ask list; one that does not parse (or
// has another feature count, from another version) is skipped.
func decodeAsk(s string) (Ask, bool) {
	f := strings.Fields(s)
	if len(f) != 2+NumFeatures {
		return Ask{}, false
	}
	var a Ask
	var err1, err2 error
	a.Tokens, err1 = strconv.Atoi(f[0])
	a.Turns, err2 = strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || a.Tokens < 0 || a.Turns < 0 {
		return Ask{}, false
	}
	a.X = make([]float64, NumFeatures)
	for i, v := range f[2:] {
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			return Ask{}, false
		}
		a.X[i] = x
	}
	return a, true
}
