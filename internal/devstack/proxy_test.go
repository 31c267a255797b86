package devstack_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/actloop/actloop/internal/agent"
	"github.com/actloop/actloop/internal/coordinator"
	"github.com/actloop/actloop/internal/demo"
	"github.com/actloop/actloop/internal/devstack"
	"github.com/actloop/actloop/internal/sim"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/pkg/schema"
)

// proxyAgent is a test agent written against the OpenAI HTTP API alone
// (python3, standard library). Its first argument says what it does:
//
//	chat N [M] N chat calls of at most M tokens (64), each extending the
//	           last with the reply and a user message; every reply's
//	           content goes to replies.txt
//	rewrite    three calls: two that extend, then one that drops the
//	           history (a new segment)
//	stream     one streamed chat call, its deltas joined into replies.txt
//	text       two text completions, the second's prompt the first's
//	           with its reply's text and more
//	fail       prints 5000 lines and exits 3
//	sleep      one call, then sleeps past the wall clock
//	badkey     one call with a wrong key: writes the status to replies.txt
const proxyAgent = `
import json, os, sys, urllib.request, urllib.error

base, key = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
assert os.environ["OPENAI_API_BASE"] == base

def post(path, body, k=None):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer " + (k or key)})
    with urllib.request.urlopen(req, timeout=600) as r:
        return r.read().decode()

def chat(msgs, **kw):
    return json.loads(post("/chat/completions", dict(model="m", messages=msgs, **kw)))["choices"][0]["message"]["content"]

def note(s):
    with open("replies.txt", "a") as f:
        f.write(s + "\n")

mode = sys.argv[1]
task = os.environ["ACTLOOP_TASK"]
msgs = [{"role": "system", "content": "You are a test."}, {"role": "user", "content": task}]
if mode == "chat":
    for i in range(int(sys.argv[2])):
        r = chat(msgs, max_tokens=int(sys.argv[3]) if len(sys.argv) > 3 else 64)
        note(r)
        msgs += [{"role": "assistant", "content": r}, {"role": "user", "content": "go on %d" % i}]
elif mode == "rewrite":
    for i in range(2):
        r = chat(msgs)
        note(r)
        msgs += [{"role": "assistant", "content": r}, {"role": "user", "content": "go on %d" % i}]
    note(chat([msgs[0], {"role": "user", "content": "summary: " + task}]))
elif mode == "stream":
    body = post("/chat/completions", dict(model="m", messages=msgs, stream=True))
    parts = []
    for line in body.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            d = json.loads(line[6:])["choices"]
            if d and d[0]["delta"].get("content"):
                parts.append(d[0]["delta"]["content"])
    note("".join(parts))
elif mode == "text":
    p = "Q: " + task + "\nA:"
    a = json.loads(post("/completions", dict(model="m", prompt=p, max_tokens=16)))["choices"][0]["text"]
    note(a)
    b = json.loads(post("/completions", dict(model="m", prompt=p + a + "\nQ: more\nA:", max_tokens=16)))["choices"][0]["text"]
    note(b)
elif mode == "fail":
    for i in range(5000):
        print("line", i)
    print("the agent gave up")
    sys.exit(3)
elif mode == "sleep":
    chat(msgs)
    import time
    time.sleep(600)
elif mode == "badkey":
    try:
        post("/chat/completions", dict(model="m", messages=msgs), k="sk-wrong")
        note("200")
    except urllib.error.HTTPError as e:
        note(str(e.code))
`

// proxyEnv is a stack for the proxy flow's tests, with the test agent
// written under a directory mounted read-only in the sandboxes.
func proxyEnv(t *testing.T) (*env, string) {
	t.Helper()
	e, cmd, _ := proxyEnvWith(t, nil)
	return e, cmd
}

// proxyEnvWith is proxyEnv with tweak applied to the stack's options; it
// returns the coordinator too.
func proxyEnvWith(t *testing.T, tweak func(*devstack.Options)) (*env, string, *coordinator.Coordinator) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the local sandbox backend runs on Linux")
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not on PATH: the test agent needs it")
	}
	dir := testkit.SearchableTempDir(t)
	script := filepath.Join(dir, "agent.py")
	if err := os.WriteFile(script, []byte(proxyAgent), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, 1, func(o *devstack.Options) {
		o.ReadOnlyBinds = []string{dir}
		if tweak != nil {
			tweak(o)
		}
	})
	coord := startOneOfEach(t, e, e.stack.CoordinatorConfig(), nil)
	return e, "python3 " + script, coord
}

func (e *env) proxySample(id, command string, script ...string) schema.Sample {
	s := demo.Samples(1, e.ws, id)[0]
	s.ID, s.GroupID, s.GroupSize, s.GroupIndex = id, "", 0, 0
	s.Flow, s.Agent = schema.FlowProxy, &schema.Agent{Command: command}
	s.Task, s.Script, s.Metadata = "say something", script, nil
	s.Env.Eval = "cat replies.txt"
	s.Limits = schema.Limits{}
	s.Normalize()
	return s
}

// A proxy-flow agent's chat calls are one token stream: each call's
// messages, rendered by the chat template as a whole conversation, are
// the result's tokens up to its reply, the loss mask is 1 on exactly the
// generated tokens, each call is one turn and the time between them one
// command; the agent read every reply, and its exit 0 submitted.
func TestProxyFlowChatCallsAreOneStream(t *testing.T) {
	e, agentCmd := proxyEnv(t)
	replies := []string{"first reply", "second reply", "third reply"}
	s := e.proxySample("px-chat", agentCmd+" chat 3", replies...)
	e.submit(s)
	r := e.results(1)[s.ID]
	if r.Status != schema.StatusSubmitted || r.Reward != 1 {
		t.Fatalf("status %s reward %g: %s", r.Status, r.Reward, r.Reason)
	}
	for _, want := range replies {
		if !strings.Contains(r.Diff, "+"+want) {
			t.Errorf("the agent did not get %q: diff %q", want, r.Diff)
		}
	}
	if r.Turns != 3 || r.Commands != 3 || !slices.Equal(r.Segments, []int{0}) {
		t.Errorf("turns %d commands %d segments %v: want 3, 3 (two between calls, one after the last) and [0]", r.Turns, r.Commands, r.Segments)
	}
	tmpl := testTemplate(t)
	// The conversation as the agent sent it last, rendered whole, then the
	// last reply's ids.
	conv := []schema.PromptMessage{{Role: schema.RoleSystem, Content: "You are a test."}, {Role: schema.RoleUser, Content: "say something"}}
	for i, rep := range replies[:2] {
		conv = append(conv, schema.PromptMessage{Role: schema.RoleAssistant, Content: rep},
			schema.PromptMessage{Role: schema.RoleUser, Content: "go on " + string(rune('0'+i))})
	}
	_, want, err := agent.MessagesOpening(tmpl, conv, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Tokens) <= len(want) || !slices.Equal(r.Tokens[:len(want)], want) {
		t.Fatalf("tokens do not start with the last call's conversation rendered whole (%d tokens, want a prefix of %d)", len(r.Tokens), len(want))
	}
	if got := tmpl.Tokenizer().Decode(r.Tokens[len(want):]); !strings.HasPrefix(got, "third reply") {
		t.Errorf("the stream ends with %q, want the last reply", got)
	}
	generated := 0
	for i, m := range r.LossMask {
		if m == 1 {
			generated++
			if r.Versions[i] < 0 {
				t.Fatalf("token %d trained without a weight version", i)
			}
		}
	}
	if generated != r.GenTokens || generated == 0 {
		t.Errorf("%d tokens under the loss mask, %d generated", generated, r.GenTokens)
	}
	if r.PromptLen == 0 || slices.Contains(r.LossMask[:r.PromptLen], 1) || r.LossMask[r.PromptLen] != 1 {
		t.Errorf("prompt_len %d does not end where the first reply starts", r.PromptLen)
	}
	var roles []string
	for _, m := range r.Messages {
		roles = append(roles, m.Role)
	}
	if want := "system user assistant user assistant user assistant"; strings.Join(roles, " ") != want {
		t.Errorf("messages %v, want %s", roles, want)
	}
}

// An agent that rewrites its history starts a new segment: the result
// says where, each segment's prompt rendered whole, the reply of each
// call trained.
func TestProxyFlowRewrittenHistoryStartsASegment(t *testing.T) {
	e, agentCmd := proxyEnv(t)
	s := e.proxySample("px-rewrite", agentCmd+" rewrite", "one", "two", "three")
	e.submit(s)
	r := e.results(1)[s.ID]
	if r.Status != schema.StatusSubmitted || r.Turns != 3 {
		t.Fatalf("status %s, %d turns: %s", r.Status, r.Turns, r.Reason)
	}
	if len(r.Segments) != 2 || r.Segments[0] != 0 || r.Segments[1] <= r.PromptLen {
		t.Fatalf("segments %v, want [0 n] with n past the first prompt (%d)", r.Segments, r.PromptLen)
	}
	tmpl := testTemplate(t)
	_, want, err := agent.MessagesOpening(tmpl, []schema.PromptMessage{{Role: schema.RoleSystem, Content: "You are a test."},
		{Role: schema.RoleUser, Content: "summary: say something"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	second := r.Tokens[r.Segments[1]:]
	if len(second) <= len(want) || !slices.Equal(second[:len(want)], want) {
		t.Fatalf("the second segment does not start with its call's messages rendered whole")
	}
	if slices.Contains(r.LossMask[r.Segments[1]:r.Segments[1]+len(want)], 1) || r.LossMask[r.Segments[1]+len(want)] != 1 {
		t.Error("the second segment's prompt is not untrained up to its reply")
	}
}

// Streamed chat calls and text completions are served too.
func TestProxyFlowStreamsAndTextCompletions(t *testing.T) {
	e, agentCmd := proxyEnv(t)
	streamed := e.proxySample("px-stream", agentCmd+" stream", "a streamed reply")
	text := e.proxySample("px-text", agentCmd+" text", "forty", "two")
	e.submit(streamed, text)
	got := e.results(2)
	if r := got[streamed.ID]; r.Status != schema.StatusSubmitted || !strings.Contains(r.Diff, "+a streamed reply") {
		t.Errorf("stream: %s %q, diff %q", r.Status, r.Reason, r.Diff)
	}
	r := got[text.ID]
	if r.Status != schema.StatusSubmitted || !strings.Contains(r.Diff, "+forty") || !strings.Contains(r.Diff, "+two") {
		t.Errorf("text: %s %q, diff %q", r.Status, r.Reason, r.Diff)
	}
	// The second prompt holds the first reply's text, not its stop token:
	// its ids do not extend the stream, so it starts a segment.
	if len(r.Segments) != 2 || r.Turns != 2 {
		t.Errorf("text: segments %v turns %d: want two", r.Segments, r.Turns)
	}
}

// The agent's exit ends the trajectory: non-zero fails it with the tail of
// its output, and so does an exit without a call; a limit ends it
// limit_exceeded, whether it calls again or works past its wall clock; an
// agent silent past env.step_timeout_ms fails; a call without the
// trajectory's key is refused.
func TestProxyFlowEnds(t *testing.T) {
	e, agentCmd := proxyEnv(t)
	fail := e.proxySample("px-fail", agentCmd+" fail")
	steps := e.proxySample("px-steps", agentCmd+" chat 5", "a", "b", "c", "d", "e")
	steps.Limits.StepLimit = 2
	sleep := e.proxySample("px-sleep", agentCmd+" sleep", "zzz")
	sleep.Limits.WallClockMS = 3_000
	badkey := e.proxySample("px-badkey", agentCmd+" badkey")
	hang := e.proxySample("px-hang", agentCmd+" sleep", "zzz")
	hang.Env.StepTimeoutMS = 2_000
	e.submit(fail, steps, sleep, badkey, hang)
	got := e.results(5)
	if r := got[fail.ID]; r.Status != schema.StatusFailed || !strings.Contains(r.Reason, "exited with code 3") ||
		!strings.Contains(r.Reason, "the agent gave up") || strings.Contains(r.Reason, "line 10\n") || r.Reward != 0 {
		t.Errorf("failing agent: %s, reason %q", r.Status, r.Reason)
	}
	if r := got[steps.ID]; r.Status != schema.StatusLimitExceeded || r.Limit != schema.LimitStep || r.Turns != 2 {
		t.Errorf("step limit: %s %s after %d turns: %q", r.Status, r.Limit, r.Turns, r.Reason)
	}
	if r := got[sleep.ID]; r.Status != schema.StatusLimitExceeded || r.Limit != schema.LimitWallClock || r.Turns != 1 {
		t.Errorf("wall clock: %s %s after %d turns: %q", r.Status, r.Limit, r.Turns, r.Reason)
	}
	// Refused, the agent exits 0 having made no call: nothing to train on.
	if r := got[badkey.ID]; r.Status != schema.StatusFailed || !strings.Contains(r.Reason, "without calling the model") ||
		!strings.Contains(r.Diff, "+401") || r.Turns != 0 {
		t.Errorf("wrong key: %s %q, %d turns, diff %q", r.Status, r.Reason, r.Turns, r.Diff)
	}
	if r := got[hang.ID]; r.Status != schema.StatusFailed || !strings.Contains(r.Reason, "env.step_timeout_ms") || r.Turns != 1 {
		t.Errorf("hanging agent: %s %q after %d turns", r.Status, r.Reason, r.Turns)
	}
}

// A pause in the middle of a call's generation keeps its partial output
// and the resume continues it under the same request id: the agent gets
// the whole reply, as one answer, and the stream is token for token an
// uninterrupted run's, the weight version switching once.
func TestProxyFlowSurvivesAPause(t *testing.T) {
	e, agentCmd, coord := proxyEnvWith(t, func(o *devstack.Options) {
		o.Sim = sim.Config{TimeScale: 1} // generations long enough in wall time to be caught
	})
	reply := strings.Repeat("a long and winding reply ", 80)
	s := e.proxySample("px-pause", agentCmd+" chat 2 1024", reply, "short")
	s.Sampling.MaxNewTokens = 1024
	e.submit(s)
	testkit.Eventually(t, wait, "the first call's generation to have output", func() bool { return liveRequests(e, 5) >= 1 })
	if _, err := coord.Pause(e.ctx, schema.PauseRequest{Mode: schema.PauseAbort}); err != nil {
		t.Fatal(err)
	}
	v := int64(1)
	if _, err := coord.Resume(e.ctx, schema.ResumeRequest{WeightVersion: &v}); err != nil {
		t.Fatal(err)
	}
	got := e.results(1)[s.ID]
	if got.Status != schema.StatusSubmitted || got.Turns != 2 || !strings.Contains(got.Diff, "+"+strings.TrimSpace(reply)) {
		t.Fatalf("%s %q, %d turns: the agent did not get the whole reply (diff %q)", got.Status, got.Reason, got.Turns, got.Diff)
	}
	versionsSwitchOnce(t, got)
	// The first reply, the first run of trained tokens, holds both
	// versions: the pause caught its generation.
	first := got.PromptLen
	end := first + slices.Index(got.LossMask[first:], 0)
	if v := got.Versions[first:end]; v[0] != 0 || v[len(v)-1] != 1 {
		t.Fatalf("the first reply's versions run %d..%d: the pause did not catch its generation", v[0], v[len(v)-1])
	}
	again := s
	again.ID = "px-pause-again"
	e.submit(again)
	ref := e.results(2)[again.ID]
	if !slices.Equal(got.Tokens, ref.Tokens) || !slices.Equal(got.LossMask, ref.LossMask) || !slices.Equal(got.Segments, ref.Segments) {
		t.Fatal("the paused run's stream differs from an uninterrupted one")
	}
}
