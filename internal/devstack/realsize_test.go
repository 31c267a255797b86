package devstack_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/demo"
	"github.com/actloop/actloop/pkg/client"
	"github.com/actloop/actloop/pkg/schema"
)

// A trajectory of real size — over 100k tokens of context from a dozen
// long command outputs, and a diff of ~800 KB — goes through a stack whose
// NATS server keeps nats-server's default max_payload (1 MiB), and its
// result reaches a trainer whole through pkg/client: every token, the
// diff, the messages, consistent with the chat template.
func TestRealSizeTrajectory(t *testing.T) {
	e := newEnv(t, 1)
	if max := e.js.Conn().MaxPayload(); max != 1<<20 {
		t.Fatalf("max_payload %d: the test wants nats-server's default", max)
	}
	startOneOfEach(t, e, e.stack.CoordinatorConfig(), nil)
	s := demo.Samples(1, e.ws, "long")[0]
	s.Script = nil
	for i := range 12 { // each output is cut to 10,000 characters: ~10k tokens of digits
		s.Script = append(s.Script, fmt.Sprintf("THOUGHT: read the log.\n\n```bash\nseq %d %d\n```", i*100_000, i*100_000+50_000))
	}
	s.Script = append(s.Script, "```bash\nseq 1 120000 > numbers.txt && wc -c numbers.txt\n```",
		"```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached\n```")
	s.Env.Eval = "test -s numbers.txt"
	s.Limits.StepLimit = 20
	e.submit(s)

	c, err := client.New(e.js.Conn())
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Results(e.ctx, "trainer")
	if err != nil {
		t.Fatal(err)
	}
	var r schema.Result
	deadline := time.Now().Add(wait)
	for r.TrajID == "" && time.Now().Before(deadline) {
		for d, err := range res.Fetch(e.ctx, 1, time.Second) {
			if err != nil {
				t.Fatal(err)
			}
			if r, err = d.Result(e.ctx); err != nil {
				t.Fatal(err)
			}
			if err := d.Ack(e.ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !r.Solved() || r.NumTokens < 100_000 || len(r.Tokens) != r.NumTokens || len(r.Diff) < 700_000 ||
		!strings.Contains(r.Diff, "+119999\n") {
		t.Fatalf("%s: %s %q reward %g, %d tokens (head says %d), diff of %d bytes", s.ID, r.Status, r.Reason, r.Reward,
			len(r.Tokens), r.NumTokens, len(r.Diff))
	}
	checkConsistent(t, r)
	t.Logf("%d tokens, body of %d bytes, diff of %d bytes", r.NumTokens, r.Body.Size, len(r.Diff))
}
