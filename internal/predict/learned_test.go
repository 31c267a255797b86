package predict_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/predict"
	"github.com/actloop/actloop/internal/predict/predicttest"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/pkg/schema"
)

func TestLearnedConformance(t *testing.T) {
	for _, kind := range testkit.RedisKinds(t) {
		t.Run(kind, func(t *testing.T) {
			predicttest.Run(t, func(t *testing.T) predicttest.Setup {
				rdb, _ := testkit.StartRedis(t, kind)
				l := predict.NewLearned(rdb, predict.NewHistory(rdb, predict.HistoryConfig{}),
					predict.LearnedConfig{MinExamples: 20, Refit: time.Nanosecond})
				playEpisodes(t, l, rand.New(rand.NewPCG(1, 2)), 10, "g1")
				return predicttest.Setup{
					Predictor: l,
					Known:     request("k-0", "g1", "", 2, 200),
					// Trained, it answers any valid request; an invalid
					// one (its id names a Redis key) it refuses.
					Unknown: schema.PredictRequest{V: schema.Version, TrajID: "bad id"},
				}
			})
		})
	}
}

// episode is a synthetic trajectory whose end the conversation shows: it
// reads and edits, then runs the tests, and a passing test run is its last
// command but one (the submission follows). Its length is random, so
// History, which sees only how far it has come, cannot tell the end.
type episode struct {
	id, group string
	turns     int
}

func (e episode) request(i int) schema.PredictRequest {
	r := request(e.id, e.group, "", i, 100*i)
	r.ContextTokens, r.PromptTokens = 2000+400*i, 2000
	r.CommandKind, r.ObsTokens = schema.CommandRead, 300
	switch {
	case i == e.turns:
		r.CommandKind = schema.CommandSubmit
	case i == e.turns-1:
		r.CommandKind = schema.CommandTest // the last observation failed; this run passes
		r.ExitCode = 1
	case i%3 == 0:
		r.CommandKind = schema.CommandEdit
	}
	return r
}

// playEpisodes runs n episodes through p, asking at every turn, then
// observes each result; it returns the mean absolute error of p's
// remaining turns over every turn, and over the last two (where the
// conversation shows the end).
func playEpisodes(t testing.TB, p interface {
	predict.Predictor
	observer
}, rng *rand.Rand, n int, group string) (all, end float64) {
	t.Helper()
	ctx := context.Background()
	var sum, sumEnd float64
	var asked, askedEnd int
	for k := range n {
		e := episode{id: group + "-" + string(rune('a'+k%26)) + string(rune('a'+k/26)), group: group, turns: 4 + rng.IntN(20)}
		for i := 1; i <= e.turns; i++ {
			rep, err := p.Predict(ctx, e.request(i))
			if err != nil {
				continue
			}
			d := math.Abs(rep.RemainingTurns - float64(e.turns-i))
			sum += d
			asked++
			if i >= e.turns-1 {
				sumEnd += d
				askedEnd++
			}
		}
		observe(t, p, result(e.id, e.group, "", 100*e.turns, e.turns))
	}
	if asked == 0 || askedEnd == 0 {
		return math.Inf(1), math.Inf(1)
	}
	return sum / float64(asked), sumEnd / float64(askedEnd)
}

// The learned model reads what History cannot: a passing test run after a
// failing one means the end is near.
func TestLearnedReadsTheConversation(t *testing.T) {
	rdb, _ := testkit.StartRedis(t, testkit.PreferredRedis(t))
	h := predict.NewHistory(rdb, predict.HistoryConfig{})
	l := predict.NewLearned(rdb, h, predict.LearnedConfig{MinExamples: 100, Refit: time.Nanosecond})
	playEpisodes(t, l, rand.New(rand.NewPCG(7, 7)), 150, "train")
	// Fresh groups, so History answers from the global level for both.
	learned, learnedEnd := playEpisodes(t, l, rand.New(rand.NewPCG(8, 8)), 40, "held")
	hist, histEnd := playEpisodes(t, history{h}, rand.New(rand.NewPCG(8, 8)), 40, "held2")
	t.Logf("mean absolute error of remaining turns: learned %.2f (%.2f at the end), history %.2f (%.2f)",
		learned, learnedEnd, hist, histEnd)
	if !(learnedEnd < 0.5*histEnd) {
		t.Errorf("at the end: learned MAE %.2f, history %.2f: the model did not learn what the conversation shows", learnedEnd, histEnd)
	}
	if !(learned < hist) {
		t.Errorf("over every turn: learned MAE %.2f, history %.2f", learned, hist)
	}
	rep, err := l.Predict(context.Background(), episode{id: "x", group: "held", turns: 9}.request(3))
	if err != nil || rep.Source != predict.SourceLearned {
		t.Fatalf("trained: %+v, %v; want source %q", rep, err, predict.SourceLearned)
	}
}

// history is a History that observes nothing (it only answers), so the
// held-out comparison does not change what the learned model sees.
type history struct{ *predict.History }

func (history) Observe(context.Context, schema.ResultHead) error { return nil }

// A redelivered result teaches once; a fallback teaches nothing.
func TestLearnedObservesOnce(t *testing.T) {
	rdb, _ := testkit.StartRedis(t, testkit.PreferredRedis(t))
	l := predict.NewLearned(rdb, predict.NewHistory(rdb, predict.HistoryConfig{}), predict.LearnedConfig{})
	ctx := context.Background()
	e := episode{id: "once", group: "g", turns: 5}
	for i := 1; i <= e.turns; i++ {
		// Nothing learned yet: ErrNoEvidence, and the ask is kept.
		if _, err := l.Predict(ctx, e.request(i)); !errors.Is(err, predict.ErrNoEvidence) {
			t.Fatalf("untrained: %v, want ErrNoEvidence", err)
		}
	}
	r := result(e.id, e.group, "", 500, 5)
	observe(t, l, r, r)
	got, err := rdb.HGet(ctx, "actloop:{predict}:learned", "0").Float64()
	if err != nil || got != 5 {
		t.Fatalf("examples after a result delivered twice = %v (%v), want 5", got, err)
	}
	f := schema.PredictRequest{V: schema.Version, TrajID: "fb", Turns: 1, GenTokens: 10, TurnSeq: 2}
	if _, err := l.Predict(ctx, f); !errors.Is(err, predict.ErrNoEvidence) {
		t.Fatalf("untrained: %v, want ErrNoEvidence", err)
	}
	fb := result("fb", "", "", 10, 1)
	fb.Status = schema.StatusFallback
	observe(t, l, fb)
	if n, _ := rdb.Exists(ctx, "actloop:{predict}:ask:fb").Result(); n != 0 {
		t.Fatalf("a fallback's features are kept")
	}
	if got, _ := rdb.HGet(ctx, "actloop:{predict}:learned", "0").Float64(); got != 5 {
		t.Fatalf("examples after a fallback = %v, want 5", got)
	}
}
