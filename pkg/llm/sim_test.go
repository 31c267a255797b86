package llm_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/sim"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/pkg/llm"
)

// TestServerTokenizerOnSimulator round-trips text, special tokens
// included, through the simulator's /tokenize and /detokenize in both
// dialects, and checks them against the byte tokenizer it simulates.
func TestServerTokenizerOnSimulator(t *testing.T) {
	ts := httptest.NewServer(sim.New(sim.Config{}))
	t.Cleanup(ts.Close)
	const text = "<|im_start|>user\nList the files in /tmp.<|im_end|>\n"
	for _, api := range []llm.API{llm.APISGLang, llm.APIOpenAI} {
		tok := llm.NewServerTokenizer(ts.URL, api, llm.SGLangOptions{HTTPClient: ts.Client()})
		b := tok.Bind(context.Background(), 5*time.Second)
		var _ tokenize.Tokenizer = b
		ids := b.Encode(text)
		if want := (tokenize.Bytes{}).Encode(text); len(ids) != len(want) || ids[0] != tokenize.ImStart {
			t.Fatalf("%s: Encode = %v, want %v", api, ids, want)
		}
		if got := b.Decode(ids); got != text {
			t.Fatalf("%s: Decode = %q", api, got)
		}
		if err := b.Err(); err != nil {
			t.Fatalf("%s: %v", api, err)
		}
	}
}

// TestSGLangPauseOnSimulator pauses the simulator in place, sees a
// generation wait, and continues it.
func TestSGLangPauseOnSimulator(t *testing.T) {
	s := sim.New(sim.Config{DecodeTokensPerSec: 5000, TimeScale: 1})
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	c := llm.NewSGLang(ts.URL, llm.SGLangOptions{HTTPClient: ts.Client()})
	ctx := context.Background()
	if err := c.PauseGeneration(ctx, llm.PauseModeInPlace); err != nil {
		t.Fatal(err)
	}
	req := llm.Request{RID: llm.NewRID(), InputIDs: []int32{1, 2}, Reply: "ok",
		Sampling: llm.SamplingParams{MaxNewTokens: 10, StopTokenIDs: []int32{tokenize.ImEnd}}}
	done := make(chan error, 1)
	go func() { _, err := c.Generate(ctx, req); done <- err }()
	testkit.Eventually(t, 10*time.Second, "the generation queued (held: paused)", func() bool {
		return s.Stats().Waiting == 1
	})
	if err := c.ContinueGeneration(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Both clients read the simulator's context length, and a generation that
// does not fit it is refused with an error that matches
// llm.ErrContextLength and is not temporary; one that fits to the last
// token but one goes through.
func TestContextLengthOnSimulator(t *testing.T) {
	const n = 64
	ts := httptest.NewServer(sim.New(sim.Config{ContextLength: n}))
	t.Cleanup(ts.Close)
	ctx := context.Background()
	for _, g := range []interface {
		llm.Generator
		llm.ContextLengthReader
	}{llm.NewSGLang(ts.URL, llm.SGLangOptions{}), llm.NewOpenAI(ts.URL, llm.OpenAIOptions{})} {
		if got, err := g.ContextLength(ctx); got != n || err != nil {
			t.Fatalf("%T: ContextLength = %d, %v; want %d", g, got, err, n)
		}
		input := make([]int32, 40)
		req := llm.Request{RID: llm.NewRID(), InputIDs: input, Reply: "ok",
			Sampling: llm.SamplingParams{MaxNewTokens: n - len(input) - 1, StopTokenIDs: []int32{tokenize.ImEnd}}}
		if _, err := g.Generate(ctx, req); err != nil {
			t.Fatalf("%T: a request that fits: %v", g, err)
		}
		req.RID, req.Sampling.MaxNewTokens = llm.NewRID(), 1_040_000
		_, err := g.Generate(ctx, req)
		if !errors.Is(err, llm.ErrContextLength) || llm.Temporary(err) {
			t.Fatalf("%T: a request past the context: %v; want ErrContextLength, not temporary", g, err)
		}
	}
}

// TestClientsTokenizeOnSimulator: both generators' Tokenize answer the
// simulator's own tokenizer's ids, at /tokenize; a server without the
// endpoint answers ErrNoTokenize.
func TestClientsTokenizeOnSimulator(t *testing.T) {
	tok, err := tokenize.OpenTokenizer("qwen")
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(sim.New(sim.Config{Tokenizer: tok}))
	t.Cleanup(ts.Close)
	const text = "<|im_start|>user\nFix `f(x)` in main.py — 数字 ≥ 10 🙂<|im_end|>\n"
	want := tok.Encode(text)
	for _, c := range []llm.Tokenizer{
		llm.NewSGLang(ts.URL, llm.SGLangOptions{HTTPClient: ts.Client()}),
		llm.NewOpenAI(ts.URL, llm.OpenAIOptions{HTTPClient: ts.Client()}),
	} {
		got, err := c.Tokenize(context.Background(), text, false)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("%T: Tokenize = %v, %v; want %v", c, got, err, want)
		}
	}
	none := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(none.Close)
	_, err = llm.NewSGLang(none.URL, llm.SGLangOptions{HTTPClient: none.Client()}).Tokenize(context.Background(), text, false)
	if !errors.Is(err, llm.ErrNoTokenize) {
		t.Fatalf("no endpoint: %v, want ErrNoTokenize", err)
	}
}
