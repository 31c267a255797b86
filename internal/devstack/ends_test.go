package devstack_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/devstack"
	"github.com/actloop/actloop/internal/envworker"
	"github.com/actloop/actloop/internal/sim"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/schema"
)

// The trainer aborts a group: its waiting member is answered without
// running, its running member ends where it is (its prompt kept under a
// loss mask of 0, the replica it ran on named), each with status aborted;
// the group completes, and an id that is neither waiting nor running is
// reported as not found.
func TestAbortEndsWaitingAndRunningTrajectories(t *testing.T) {
	e := newEnv(t, 1)
	coord := startOneOfEach(t, e, e.stack.CoordinatorConfig(), nil)
	running := groupSample("ab-0", "ab", 0, 2)
	running.Script = []string{"THOUGHT: this takes a while.\n\n```bash\nsleep 600\n```"}
	running.Env.StepTimeoutMS = 3_600_000
	e.submit(running)
	testkit.Eventually(t, wait, "the long command to run", func() bool {
		tr, err := e.st.Load(e.ctx, running.ID, 0)
		return err == nil && tr.Status == traj.StatusNeedsEnvStep
	})
	// While paused nothing is admitted: the second member waits.
	if _, err := coord.Pause(e.ctx, schema.PauseRequest{}); err != nil {
		t.Fatal(err)
	}
	waiting := groupSample("ab-1", "ab", 1, 2)
	e.submit(waiting)
	testkit.Eventually(t, wait, "the second member to wait", func() bool {
		st, err := coord.Status(e.ctx)
		return err == nil && st.Queued == 1
	})
	reply, err := coord.Abort(e.ctx, schema.AbortRequest{GroupIDs: []string{"ab"}, TrajIDs: []string{"nobody"},
		Reason: "enough samples"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(reply.Aborted, []string{"ab-0", "ab-1"}) || !slices.Equal(reply.NotFound, []string{"nobody"}) {
		t.Fatalf("abort reply %+v", reply)
	}
	got := e.results(2)
	for _, id := range []string{"ab-0", "ab-1"} {
		r := got[id]
		if r.Status != schema.StatusAborted || r.Reward != 0 || !strings.Contains(r.Reason, "aborted by the trainer: enough samples") {
			t.Errorf("%s: %s %q reward %g", id, r.Status, r.Reason, r.Reward)
		}
		if slices.Contains(r.LossMask, 1) {
			t.Errorf("%s: an aborted result with trainable tokens", id)
		}
	}
	if r := got["ab-0"]; r.NumTokens == 0 || r.NumTokens != r.PromptLen || r.Replica != "r0" || r.Turns != 1 {
		t.Errorf("running member: %d tokens, prompt_len %d, replica %q, %d turns: want its prompt and its replica",
			r.NumTokens, r.PromptLen, r.Replica, r.Turns)
	}
	if r := got["ab-1"]; r.NumTokens != 0 || r.Replica != "" {
		t.Errorf("waiting member: %d tokens, replica %q", r.NumTokens, r.Replica)
	}
	resultsHandled(e)
	checkGroups(e, map[string][]string{"ab": {"ab-0", "ab-1"}})
	if again, err := coord.Abort(e.ctx, schema.AbortRequest{TrajIDs: []string{"ab-0", "ab-1"}}); err != nil ||
		len(again.Aborted) != 0 || !slices.Equal(again.NotFound, []string{"ab-0", "ab-1"}) {
		t.Fatalf("aborting what has ended: %+v, %v", again, err)
	}
	if _, err := coord.Abort(e.ctx, schema.AbortRequest{}); err == nil {
		t.Fatal("an abort that names nothing was accepted")
	}
}

// A sample whose sandbox cannot be set up ends failed, one that is invalid
// is dead-lettered and answered failed, and their group still completes; a trajectory ended by a limit is limit_exceeded, names the
// limit, and by default is not evaluated (reward 0, its diff kept), while
// under ACTLOOP_REWARD_ON=always it is.
func TestEndStatusesAndRewardPolicy(t *testing.T) {
	for _, rewardOn := range []string{envworker.RewardOnSubmitted, envworker.RewardOnAlways} {
		t.Run(rewardOn, func(t *testing.T) {
			e := newEnv(t, 1)
			startOneOfEach(t, e, e.stack.CoordinatorConfig(), func(c *envworker.Config) { c.RewardOn = rewardOn })
			echo := "THOUGHT: again.\n\n```bash\necho hi\n```"
			steps := groupSample("steps", "g", 0, 4)
			steps.Script = []string{echo, echo, echo}
			steps.Limits.StepLimit = 2
			bad := "THOUGHT: no action here."
			format := groupSample("format", "g", 1, 4)
			format.Script = []string{bad, bad, bad, bad}
			format.Limits.FormatErrorLimit = 2
			setup := groupSample("setup", "g", 2, 4)
			setup.Env.Setup = []string{"exit 3"}
			invalid := groupSample("invalid", "g", 3, 4)
			invalid.Env.Backend = "nowhere"
			e.submit(steps, format, setup, invalid)
			got := e.results(4)

			wantReward := 0.0
			if rewardOn == envworker.RewardOnAlways {
				wantReward = 1
			}
			for _, c := range []struct {
				id, status, limit string
				turns             int
			}{
				{"steps", schema.StatusLimitExceeded, schema.LimitStep, 2},
				{"format", schema.StatusFormatErrorLimit, schema.LimitFormatError, 2},
			} {
				r := got[c.id]
				if r.Status != c.status || r.Limit != c.limit || r.Turns != c.turns || r.Reward != wantReward {
					t.Errorf("%s: %s (limit %q) %q, %d turns, reward %g; want %s (%s), %d turns, reward %g",
						c.id, r.Status, r.Limit, r.Reason, r.Turns, r.Reward, c.status, c.limit, c.turns, wantReward)
				}
				if !slices.Contains(r.LossMask, 1) {
					t.Errorf("%s: no trainable tokens", c.id)
				}
				if evaluated := !strings.Contains(r.Reason, "not evaluated"); evaluated != (rewardOn == envworker.RewardOnAlways) {
					t.Errorf("%s: reason %q under ACTLOOP_REWARD_ON=%s", c.id, r.Reason, rewardOn)
				}
			}
			if r := got["setup"]; r.Status != schema.StatusFailed || !strings.Contains(r.Reason, "setup command 0") ||
				r.Reward != 0 || r.NumTokens != 0 {
				t.Errorf("setup: %s %q reward %g, %d tokens", r.Status, r.Reason, r.Reward, r.NumTokens)
			}
			if r := got["invalid"]; r.Status != schema.StatusFailed || !strings.HasPrefix(r.Reason, "rejected: sample: env.backend") {
				t.Errorf("invalid: %s %q", r.Status, r.Reason)
			}
			resultsHandled(e)
			checkGroups(e, map[string][]string{"g": {"steps", "format", "setup", "invalid"}})
		})
	}
}

// A trajectory aborted while its generation runs has that generation
// aborted on its server too (actloop.cancel): the server's request ends
// aborted long before its turn would have, the gen-worker counts it, drops
// its output, and the result is the abort's.
func TestAbortCancelsTheRunningGeneration(t *testing.T) {
	e := newEnvWith(t, 1, func(o *devstack.Options) { o.Sim = sim.Config{TimeScale: 1} })
	coord := startOneOfEach(t, e, e.stack.CoordinatorConfig(), nil)
	// A turn of 4,096 tokens, in real time on the simulator: minutes.
	long := simSample("cancel-0", strings.Repeat("word ", 5000))
	e.submit(long)
	srv := e.stack.Sims["r0"]
	testkit.Eventually(t, wait, "the long generation to have output", func() bool {
		rs := srv.Requests()
		return len(rs) == 1 && rs[0].Generated >= 3
	})
	if n := srv.Stats().Aborted; n != 0 {
		t.Fatalf("%d requests aborted before the trainer's abort", n)
	}
	reply, err := coord.Abort(e.ctx, schema.AbortRequest{TrajIDs: []string{long.ID}})
	if err != nil || !slices.Equal(reply.Aborted, []string{long.ID}) {
		t.Fatalf("abort: %+v %v", reply, err)
	}
	testkit.Eventually(t, wait, "the server's request to end", func() bool { return len(srv.Requests()) == 0 })
	if n := srv.Stats().Aborted; n != 1 {
		t.Errorf("the server aborted %d requests, want the cancelled one", n)
	}
	r := e.results(1)[long.ID]
	if r.Status != schema.StatusAborted || slices.Contains(r.LossMask, 1) {
		t.Errorf("result %s %q, trainable tokens %v", r.Status, r.Reason, slices.Contains(r.LossMask, 1))
	}
	gw := e.stack.GenWorker("r0")
	testkit.Eventually(t, wait, "the generation's step to be dropped", func() bool { return gw.Stats().Running == 0 })
	if st := gw.Stats(); st.Cancelled != 1 || st.WastedTokens != 0 {
		t.Errorf("gen-worker stats %+v: want one generation cancelled, none wasted", st)
	}

	// A malformed notice is dead-lettered, naming the field.
	if err := e.js.Conn().Publish(bus.SubjectCancel, []byte(`{"v":1,"traj_ids":[".."]}`)); err != nil {
		t.Fatal(err)
	}
	dl := readStream[schema.DLQEntry](e, schema.StreamDLQ, schema.SubjectDLQ, 1, func(d schema.DLQEntry) string { return d.Subject })
	if d := dl[bus.SubjectCancel]; d.Consumer != "gen-worker" || !strings.Contains(d.Reason, "traj_ids") {
		t.Errorf("dead letter of a malformed cancel: %+v", d)
	}
}
