package devstack_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/actloop/actloop/internal/devstack"
	"github.com/actloop/actloop/internal/sim"
	"github.com/actloop/actloop/pkg/llm"
	"github.com/actloop/actloop/pkg/schema"
)

// call is one generation a recordingGen sent: its input's length, its
// max_new_tokens, what it generated and whether the server refused it for
// its length.
type call struct {
	input, maxNew, output int
	refused               bool
}

// recordingGen is the SGLang client of a replica's simulator (every
// capability of it kept) that records each generation; reported, when set,
// replaces the context length the server reports.
type recordingGen struct {
	*llm.SGLang
	reported int
	mu       sync.Mutex
	calls    []call
}

func (g *recordingGen) Generate(ctx context.Context, req llm.Request) (llm.Result, error) {
	res, err := g.SGLang.Generate(ctx, req)
	g.mu.Lock()
	g.calls = append(g.calls, call{input: len(req.InputIDs), maxNew: req.Sampling.MaxNewTokens, output: len(res.OutputIDs),
		refused: errors.Is(err, llm.ErrContextLength)})
	g.mu.Unlock()
	return res, err
}

func (g *recordingGen) ContextLength(ctx context.Context) (int, error) {
	if g.reported > 0 {
		return g.reported, nil
	}
	return g.SGLang.ContextLength(ctx)
}

func (g *recordingGen) recorded() []call {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.calls)
}

// contextEnv is a stack whose simulator has a context of contextLen
// tokens, its gen-worker on gen (a recordingGen on the simulator).
func contextEnv(t *testing.T, contextLen, reported int) (*env, *recordingGen) {
	t.Helper()
	e := newEnvWith(t, 1, func(o *devstack.Options) { o.Sim = sim.Config{ContextLength: contextLen} })
	gen := &recordingGen{SGLang: llm.NewSGLang(e.stack.SimURLs["r0"], llm.SGLangOptions{}), reported: reported}
	if _, err := e.stack.StartCoordinator(e.ctx, e.stack.CoordinatorConfig()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.stack.StartGenWorker(e.ctx, "r0", gen); err != nil {
		t.Fatal(err)
	}
	envCfg := e.stack.EnvWorkerConfig("env-0")
	envCfg.SimStartLatency, envCfg.SimExecLatency, envCfg.SimEnvTimeScale = 0, 0, 1
	if _, err := e.stack.StartEnvWorker(e.ctx, envCfg); err != nil {
		t.Fatal(err)
	}
	return e, gen
}

// countTo is a reply whose command prints the numbers from a to b: a long
// observation.
func countTo(a, b int) string {
	return fmt.Sprintf("THOUGHT: let me count on.\n\n```bash\nseq %d %d\n```", a, b)
}

const submitReply = "THOUGHT: done.\n\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"

// checkKept asserts r ended limit_exceeded on the context length after
// turns turns, every generated token kept under a loss mask of 1.
func checkKept(t *testing.T, r schema.Result, turns int) {
	t.Helper()
	if r.Status != schema.StatusLimitExceeded || r.Limit != schema.LimitContextLength || r.Turns != turns ||
		!strings.Contains(r.Reason, "context_length") {
		t.Fatalf("result %s (limit %q) %q after %d turns; want limit_exceeded (context_length) after %d",
			r.Status, r.Limit, r.Reason, r.Turns, turns)
	}
	trained := 0
	for _, m := range r.LossMask {
		trained += int(m)
	}
	if r.GenTokens == 0 || trained != r.GenTokens {
		t.Fatalf("%d tokens under loss mask 1 of %d generated", trained, r.GenTokens)
	}
	if last := r.Messages[len(r.Messages)-1]; last.Role != schema.RoleUser || last.Content != "" {
		t.Fatalf("last message %+v: want the empty terminating message of a limit", last)
	}
	checkConsistent(t, r)
}

// A trajectory whose sample allows far more new tokens than the server's
// context holds (max_new_tokens 1,040,000 on a 4,096-token context, the
// commands printing long outputs) has each call's max_new_tokens capped to
// the room its input leaves, one token spared; a turn that meets the cap
// is cut there and goes on; and when the conversation leaves no room for
// the next call the trajectory ends limit_exceeded (context_length) with
// every generated token trainable.
func TestContextLengthCapsTurnsAndEndsTheTrajectory(t *testing.T) {
	const contextLen = 4096
	e, gen := contextEnv(t, contextLen, 0)
	s := simSample("long-output", countTo(1, 300), countTo(301, 600)+"\n"+strings.Repeat("and more ", 5000),
		countTo(601, 900), submitReply)
	s.Sampling.MaxNewTokens = 1_040_000
	e.submit(s)
	r := e.results(1)[s.ID]
	checkKept(t, r, 2)

	calls := gen.recorded()
	if len(calls) != 2 {
		t.Fatalf("calls %+v: want the two turns'", calls)
	}
	for i, c := range calls {
		if c.refused || c.maxNew != contextLen-1-c.input {
			t.Fatalf("call %d %+v: want max_new_tokens capped to %d - 1 - input", i, c, contextLen)
		}
	}
	// The second turn met its cap: it fills the context to its last token
	// but one, and its cut reply still ran.
	if c := calls[1]; c.output != c.maxNew || c.input+c.output != contextLen-1 {
		t.Fatalf("second call %+v: want its output cut at max_new_tokens", c)
	}
	if gen, full := r.Messages[len(r.Messages)-3], s.Script[1]; gen.Role != schema.RoleAssistant ||
		!strings.HasPrefix(full, gen.Content) || len(gen.Content) >= len(full) {
		t.Fatalf("message %s %.80q…: want the cut reply", gen.Role, gen.Content)
	}
	if r.NumTokens <= contextLen || r.Commands != 2 {
		t.Fatalf("%d tokens, %d commands: want the cut turn's command run and its long output kept", r.NumTokens, r.Commands)
	}
}

// A server whose context is shorter than it reports (or that reports none)
// refuses the call that does not fit with a 400: the trajectory ends
// limit_exceeded (context_length) as it would had the server said, the
// turns before kept, not as a fallback that loses them.
func TestContextLengthRefusalEndsTheTrajectory(t *testing.T) {
	const contextLen = 4096
	e, gen := contextEnv(t, contextLen, 2*contextLen)
	s := simSample("refused", countTo(1, 300), countTo(301, 600), countTo(601, 900), countTo(901, 1200), submitReply)
	s.Sampling.MaxNewTokens = 1500
	e.submit(s)
	r := e.results(1)[s.ID]
	calls := gen.recorded()
	if len(calls) < 2 || !calls[len(calls)-1].refused || slices.ContainsFunc(calls[:len(calls)-1], func(c call) bool { return c.refused }) {
		t.Fatalf("calls %+v: want turns, then one the server refused", calls)
	}
	if c := calls[len(calls)-1]; c.input+c.maxNew <= contextLen {
		t.Fatalf("refused call %+v fits the context", c)
	}
	checkKept(t, r, len(calls)-1)
	if !strings.Contains(r.Reason, "the server refused the call") {
		t.Fatalf("reason %q", r.Reason)
	}
}
