// Package llmtest is the conformance suite every llm.Generator backend
// passes: scripted replies, the length cap, log-probs, determinism, abort of a
// running generation by rid (and by rid prefix, for an llm.PrefixAborter),
// and abort of an unknown rid; and, for an llm.Tokenizer, the server's
// tokenization (RunTokenizer). Run it from a backend's tests with a
// constructor for a fresh generator.
//
// The suite scripts replies through Request.Reply, which only the simulator
// (internal/sim) honours, so it targets the simulator behind each client, over
// whichever API the client speaks (SGLang's /generate, the OpenAI-compatible
// /v1/completions).
package llmtest

import (
	"context"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/actloop/actloop/pkg/llm"
)

// Progress is implemented by generators under test that can see their
// backend: Generated reports how many output tokens the live request rid has
// generated so far and whether it is decoding. The abort tests need it to
// abort a request that is known to be running without sleeping; without it
// they are skipped. An aborted generation must return at least the n
// reported before the abort: a backend whose abort keeps only what reached
// the client (the OpenAI client) reports what reached the client.
type Progress interface {
	Generated(rid string) (n int, decoding bool)
}

// WithProgress returns g with a Progress from fn (and g's AbortPrefix, if
// it has one).
func WithProgress(g llm.Generator, fn func(rid string) (n int, decoding bool)) llm.Generator {
	pg := progressGen{Generator: g, fn: fn}
	if pa, ok := g.(llm.PrefixAborter); ok {
		return progressPrefixGen{progressGen: pg, PrefixAborter: pa}
	}
	return pg
}

type progressPrefixGen struct {
	progressGen
	llm.PrefixAborter
}

type progressGen struct {
	llm.Generator
	fn func(rid string) (int, bool)
}

func (p progressGen) Generated(rid string) (int, bool) { return p.fn(rid) }

// waitTimeout bounds every wait in the suite.
const waitTimeout = 30 * time.Second

// Run runs the conformance suite; newGen returns a fresh generator (and
// registers its cleanup on t).
func Run(t *testing.T, newGen func(t *testing.T) llm.Generator) {
	t.Run("ScriptedReply", func(t *testing.T) { t.Parallel(); testScriptedReply(t, newGen(t)) })
	t.Run("LengthCap", func(t *testing.T) { t.Parallel(); testLengthCap(t, newGen(t)) })
	t.Run("Logprobs", func(t *testing.T) { t.Parallel(); testLogprobs(t, newGen(t)) })
	t.Run("Deterministic", func(t *testing.T) { t.Parallel(); testDeterministic(t, newGen(t)) })
	t.Run("AbortRunning", func(t *testing.T) { t.Parallel(); testAbortRunning(t, newGen(t)) })
	t.Run("AbortUnknown", func(t *testing.T) { t.Parallel(); testAbortUnknown(t, newGen(t)) })
	t.Run("AbortPrefix", func(t *testing.T) { t.Parallel(); testAbortPrefix(t, newGen(t)) })
}

// RunTokenizer runs the suite's tokenizer part on a backend's
// llm.Tokenizer (newTok returns a fresh one): the server's ids of ChatML
// text, with and without special tokens added (the simulator's byte
// vocabulary adds none), and an error for a body that is not text.
func RunTokenizer(t *testing.T, newTok func(t *testing.T) llm.Tokenizer) {
	t.Run("Tokenize", func(t *testing.T) { t.Parallel(); testTokenize(t, newTok(t)) })
}

func testTokenize(t *testing.T, tk llm.Tokenizer) {
	const text = "<|im_start|>user\nList the files in /tmp.<|im_end|>\n<|im_start|>assistant\n"
	for _, special := range []bool{false, true} {
		ids, err := tk.Tokenize(ctxFor(t), text, special)
		if err != nil {
			t.Fatalf("Tokenize(special %v): %v", special, err)
		}
		if want := Encode(text); !slices.Equal(ids, want) {
			t.Fatalf("Tokenize(special %v) = %v, want %v", special, ids, want)
		}
	}
	if ids, err := tk.Tokenize(ctxFor(t), "", false); err != nil || len(ids) != 0 {
		t.Fatalf("Tokenize(\"\") = %v, %v; want no ids", ids, err)
	}
}

// The simulator's byte vocabulary: ids 0-255 are the bytes themselves,
// then the ChatML special tokens. The suite renders ChatML over it itself,
// so that it needs nothing beyond this package and llm.
const (
	imStart int32 = 256 // <|im_start|>
	imEnd   int32 = 257 // <|im_end|>
)

var specials = []string{"<|im_start|>", "<|im_end|>", "<|endoftext|>"}

// Encode returns the byte-vocabulary ids of s (special tokens as one id).
func Encode(s string) []int32 {
	ids := make([]int32, 0, len(s))
	for i := 0; i < len(s); {
		special := false
		for k, sp := range specials {
			if strings.HasPrefix(s[i:], sp) {
				ids, i, special = append(ids, imStart+int32(k)), i+len(sp), true
				break
			}
		}
		if !special {
			ids, i = append(ids, int32(s[i])), i+1
		}
	}
	return ids
}

// Decode returns the text of byte-vocabulary ids (U+FFFD outside it).
func Decode(ids []int32) string {
	var b strings.Builder
	for _, id := range ids {
		switch {
		case id >= 0 && id < 256:
			b.WriteByte(byte(id))
		case id >= imStart && int(id-imStart) < len(specials):
			b.WriteString(specials[id-imStart])
		default:
			b.WriteString("\uFFFD")
		}
	}
	return b.String()
}

// Message returns a ChatML message in the byte vocabulary.
func Message(role, content string) []int32 {
	return Encode("<|im_start|>" + role + "\n" + content + "<|im_end|>\n")
}

// GenerationPrompt returns ChatML's generation prompt in the byte vocabulary.
func GenerationPrompt() []int32 { return Encode("<|im_start|>assistant\n") }

// prompt renders a system message, a user task and the generation prompt.
func prompt(task string) []int32 {
	var ids []int32
	ids = append(ids, Message("system", "You are a helpful assistant that can interact with a computer.")...)
	ids = append(ids, Message("user", task)...)
	return append(ids, GenerationPrompt()...)
}

func request(task, reply string, maxNew int) llm.Request {
	return llm.Request{
		RID:      llm.NewRID(),
		InputIDs: prompt(task),
		Sampling: llm.SamplingParams{
			MaxNewTokens: maxNew,
			StopTokenIDs: []int32{imEnd},
		},
		Reply: reply,
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

func generate(t *testing.T, g llm.Generator, req llm.Request) llm.Result {
	t.Helper()
	res, err := g.Generate(ctxFor(t), req)
	if err != nil {
		t.Fatalf("Generate(%s): %v", req.RID, err)
	}
	checkShape(t, req, res)
	return res
}

// checkShape asserts what holds for every result.
func checkShape(t *testing.T, req llm.Request, res llm.Result) {
	t.Helper()
	if len(res.Logprobs) != len(res.OutputIDs) {
		t.Fatalf("%d logprobs for %d output ids", len(res.Logprobs), len(res.OutputIDs))
	}
	for i, lp := range res.Logprobs {
		if lp > 0 || math.IsNaN(float64(lp)) {
			t.Fatalf("logprob[%d] = %v, want <= 0", i, lp)
		}
	}
	if len(res.OutputIDs) > req.Sampling.MaxNewTokens {
		t.Fatalf("%d output ids exceed max_new_tokens %d", len(res.OutputIDs), req.Sampling.MaxNewTokens)
	}
	if res.Finish.Type != llm.FinishAbort {
		if res.PromptTokens != len(req.InputIDs) {
			t.Errorf("PromptTokens = %d, want %d", res.PromptTokens, len(req.InputIDs))
		}
		if res.CompletionTokens != len(res.OutputIDs) {
			t.Errorf("CompletionTokens = %d, want %d", res.CompletionTokens, len(res.OutputIDs))
		}
		if res.CachedTokens < 0 || res.CachedTokens >= len(req.InputIDs) {
			t.Errorf("CachedTokens = %d, want in [0, %d)", res.CachedTokens, len(req.InputIDs))
		}
	}
}

func replyIDs(reply string) []int32 {
	return append(Encode(reply), imEnd)
}

func testScriptedReply(t *testing.T, g llm.Generator) {
	reply := "I will list the files.\n\n```bash\nls -la\n```"
	req := request("List the files.", reply, 1000)
	res := generate(t, g, req)
	if want := replyIDs(reply); !slices.Equal(res.OutputIDs, want) {
		t.Fatalf("OutputIDs = %q, want %q", Decode(res.OutputIDs), Decode(want))
	}
	if res.Finish.Type != llm.FinishStop || res.Finish.Matched != imEnd {
		t.Fatalf("Finish = %+v, want stop matched %d", res.Finish, imEnd)
	}
}

func testLengthCap(t *testing.T, g llm.Generator) {
	reply := strings.Repeat("abcdefghij", 10)
	const maxNew = 17
	res := generate(t, g, request("Say the alphabet.", reply, maxNew))
	if want := replyIDs(reply)[:maxNew]; !slices.Equal(res.OutputIDs, want) {
		t.Fatalf("OutputIDs = %v, want %v", res.OutputIDs, want)
	}
	if res.Finish.Type != llm.FinishLength || res.Finish.Length != maxNew {
		t.Fatalf("Finish = %+v, want length %d", res.Finish, maxNew)
	}
}

func testLogprobs(t *testing.T, g llm.Generator) {
	// Unscripted: the backend's own reply.
	res := generate(t, g, request("Find the bug in parse.go.", "", 2000))
	if len(res.OutputIDs) == 0 {
		t.Fatal("no output")
	}
}

func testDeterministic(t *testing.T, g llm.Generator) {
	a := request("Fix the failing test in pkg/foo.", "", 2000)
	b := a
	b.RID = llm.NewRID()
	ra, rb := generate(t, g, a), generate(t, g, b)
	if !slices.Equal(ra.OutputIDs, rb.OutputIDs) {
		t.Fatalf("outputs differ:\n%q\n%q", Decode(ra.OutputIDs), Decode(rb.OutputIDs))
	}
	if !slices.Equal(ra.Logprobs, rb.Logprobs) {
		t.Fatalf("logprobs differ")
	}
	if ra.Finish != rb.Finish {
		t.Fatalf("finish differs: %+v vs %+v", ra.Finish, rb.Finish)
	}
}

func testAbortRunning(t *testing.T, g llm.Generator) {
	p, ok := g.(Progress)
	if !ok {
		t.Skip("generator does not implement llmtest.Progress")
	}
	reply := strings.Repeat("the quick brown fox jumps over the lazy dog. ", 4000)
	req := request("Write a very long essay.", reply, 1<<18)
	full := replyIDs(reply)

	var (
		wg  sync.WaitGroup
		res llm.Result
		err error
	)
	genCtx, cancel := context.WithCancel(ctxFor(t))
	t.Cleanup(func() { cancel(); wg.Wait() }) // on a failed wait below
	wg.Go(func() { res, err = g.Generate(genCtx, req) })

	// Wait until the request has generated at least one token, then abort.
	seen := waitFor(t, func() (int, bool) {
		n, decoding := p.Generated(req.RID)
		return n, decoding && n >= 1
	})
	if err := g.Abort(ctxFor(t), req.RID); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	wg.Wait()
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	checkShape(t, req, res)
	if res.Finish.Type != llm.FinishAbort {
		t.Fatalf("Finish = %+v, want abort", res.Finish)
	}
	if len(res.OutputIDs) < seen || len(res.OutputIDs) >= len(full) {
		t.Fatalf("%d output ids, want in [%d, %d)", len(res.OutputIDs), seen, len(full))
	}
	if !slices.Equal(res.OutputIDs, full[:len(res.OutputIDs)]) {
		t.Fatalf("output is not a prefix of the full reply: %q", Decode(res.OutputIDs))
	}
}

// testAbortPrefix aborts two running generations whose rids share a prefix
// with one AbortPrefix; a third with another prefix runs on.
func testAbortPrefix(t *testing.T, g llm.Generator) {
	p, ok := g.(Progress)
	if !ok {
		t.Skip("generator does not implement llmtest.Progress")
	}
	pa, ok := g.(llm.PrefixAborter)
	if !ok {
		t.Skip("generator does not implement llm.PrefixAborter")
	}
	reply := strings.Repeat("all work and no play makes jack a dull boy. ", 4000)
	full := replyIDs(reply)
	prefix, other := llm.NewRIDPrefix(), llm.NewRIDPrefix()
	for other == prefix {
		other = llm.NewRIDPrefix()
	}
	reqs := make([]llm.Request, 3)
	for i := range reqs {
		reqs[i] = request("Write a very long story.", reply, 1<<18)
		reqs[i].RID = llm.NewRIDWithPrefix(prefix)
	}
	reqs[2].RID = llm.NewRIDWithPrefix(other)

	var wg sync.WaitGroup
	res := make([]llm.Result, len(reqs))
	errs := make([]error, len(reqs))
	genCtx, cancel := context.WithCancel(ctxFor(t))
	t.Cleanup(func() { cancel(); wg.Wait() })
	for i := range reqs {
		wg.Go(func() { res[i], errs[i] = g.Generate(genCtx, reqs[i]) })
	}
	seen := make([]int, len(reqs))
	for i := range seen {
		seen[i] = waitFor(t, func() (int, bool) {
			n, decoding := p.Generated(reqs[i].RID)
			return n, decoding && n >= 1
		})
	}
	if err := pa.AbortPrefix(ctxFor(t), prefix); err != nil {
		t.Fatalf("AbortPrefix: %v", err)
	}
	for i := range 2 {
		waitFor(t, func() (int, bool) { _, live := p.Generated(reqs[i].RID); return 0, !live })
	}
	if _, live := p.Generated(reqs[2].RID); !live {
		t.Fatal("AbortPrefix ended a generation with another prefix")
	}
	if err := g.Abort(ctxFor(t), reqs[2].RID); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Generate %d: %v", i, err)
		}
		checkShape(t, reqs[i], res[i])
		if res[i].Finish.Type != llm.FinishAbort {
			t.Fatalf("generation %d: Finish = %+v, want abort", i, res[i].Finish)
		}
		if !slices.Equal(res[i].OutputIDs, full[:len(res[i].OutputIDs)]) {
			t.Fatalf("generation %d: output is not a prefix of the full reply", i)
		}
		if len(res[i].OutputIDs) < seen[i] {
			t.Fatalf("generation %d: %d output ids, want at least %d", i, len(res[i].OutputIDs), seen[i])
		}
	}
}

func testAbortUnknown(t *testing.T, g llm.Generator) {
	if err := g.Abort(ctxFor(t), llm.NewRID()); err != nil {
		t.Fatalf("Abort(unknown): %v", err)
	}
	// The server still works afterwards.
	reply := "done"
	res := generate(t, g, request("Say done.", reply, 100))
	if !slices.Equal(res.OutputIDs, replyIDs(reply)) {
		t.Fatalf("OutputIDs = %v", res.OutputIDs)
	}
}

// waitFor polls cond until it reports true, and returns its value then.
func waitFor(t *testing.T, cond func() (int, bool)) int {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	tick := time.NewTicker(200 * time.Microsecond)
	defer tick.Stop()
	for {
		if v, ok := cond(); ok {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", waitTimeout)
		}
		<-tick.C
	}
}
