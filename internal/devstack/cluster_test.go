package devstack_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/internal/coordinator"
	"github.com/actloop/actloop/internal/devstack"
	"github.com/actloop/actloop/internal/localnats"
	"github.com/actloop/actloop/internal/sim"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/client"
	"github.com/actloop/actloop/pkg/schema"
)

// clusterScript is the scripted run of cluster sample id: two commands
// whose output names the sample and the step, then the submit.
func clusterScript(id string) []string {
	return []string{
		fmt.Sprintf("THOUGHT: first look at %s.\n\n```bash\necho %s-step-1\n```", id, id),
		fmt.Sprintf("THOUGHT: second look at %s.\n\n```bash\necho %s-step-2\n```", id, id),
		"THOUGHT: done.\n\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```",
	}
}

// newClusterEnv starts a 3-node JetStream cluster and the stack's Redis and
// simulators, with every service (and the test's own client) connecting to
// all three nodes and every stream and bucket replicated three times.
func newClusterEnv(t *testing.T, replicas int, timeScale float64) (*env, *localnats.Cluster) {
	t.Helper()
	cl, err := localnats.StartCluster(filepath.Join(t.TempDir(), "cluster"), 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Shutdown) // after the stack's cleanup: the services drain first
	e := newEnvWith(t, replicas, func(o *devstack.Options) {
		o.NATSURL, o.Common.StreamReplicas, o.Sim = cl.ClientURLs(), 3, sim.Config{TimeScale: timeScale}
	})
	return e, cl
}

// finished is how many results the coordinator has recorded (from Redis,
// which the NATS nodes' fate does not touch).
func finished(e *env) int64 {
	c, err := e.st.Counts(e.ctx)
	if err != nil {
		return -1
	}
	return c[schema.StatusSubmitted] + c[schema.StatusFallback]
}

// logProgress logs how many results the coordinator has recorded whenever
// that changes (so a failure shows where the run stalled) until stopped.
func logProgress(t *testing.T, e *env, start time.Time) (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tk := time.NewTicker(250 * time.Millisecond)
		defer tk.Stop()
		last := int64(-1)
		for {
			select {
			case <-tk.C:
				if n := finished(e); n != last {
					t.Logf("%v: %d results", time.Since(start).Round(time.Millisecond), n)
					last = n
				}
			case <-done:
				return
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); <-stopped }) }
}

// clusterResults reads the whole results stream once it holds at least n
// messages, retrying what fails while the cluster elects leaders. It
// returns every result message in stream order.
func clusterResults(e *env, n int) []schema.Result {
	e.t.Helper()
	var out []schema.Result
	var last error
	testkit.Eventually(e.t, wait, fmt.Sprintf("the results stream to hold %d results and be read", n), func() bool {
		ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
		defer cancel()
		out, last = readResults(ctx, e.js, n)
		if last != nil {
			e.t.Logf("reading results: %v", last)
		}
		return last == nil
	})
	return out
}

func readResults(ctx context.Context, js jetstream.JetStream, n int) ([]schema.Result, error) {
	stream, err := js.Stream(ctx, schema.StreamResults)
	if err != nil {
		return nil, err
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, err
	}
	if info.State.Msgs < uint64(n) {
		return nil, fmt.Errorf("%d messages, want %d", info.State.Msgs, n)
	}
	c, err := js.OrderedConsumer(ctx, schema.StreamResults, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	var out []schema.Result
	for {
		m, err := c.Next(jetstream.FetchMaxWait(2 * time.Second))
		if err != nil {
			return nil, fmt.Errorf("after %d messages: %w", len(out), err)
		}
		md, err := m.Metadata()
		if err != nil {
			return nil, err
		}
		if schema.IsResult(m.Subject()) {
			r, err := client.NewBodies(js).Decode(ctx, m.Data())
			if err != nil {
				return nil, fmt.Errorf("result at %d: %w", md.Sequence.Stream, err)
			}
			out = append(out, r)
		}
		if md.NumPending == 0 {
			return out, nil
		}
	}
}

// clusterResultsHandled waits until the coordinator has acked every result.
func clusterResultsHandled(e *env) {
	e.t.Helper()
	testkit.Eventually(e.t, wait, "the coordinator to handle every result", func() bool {
		ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
		defer cancel()
		cons, err := e.js.Consumer(ctx, schema.StreamResults, "coordinator-results")
		if err != nil {
			return false
		}
		info, err := cons.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
}

// The pipeline runs on a 3-node JetStream cluster with every stream
// replicated three times. Mid-batch one node is killed; later it comes back,
// catches up, and another is killed mid-batch. Every sample still gets exactly one result, real
// or a fallback with its reason; every completed result's tokens are
// consistent with its messages; and no step was applied twice (each
// trajectory ran its script once, turn by turn, and its stored state agrees
// with its result).
func TestPipelineSurvivesNodeLoss(t *testing.T) {
	start := time.Now()
	e, cl := newClusterEnv(t, 2, 0.2)
	coord, err := e.stack.StartCoordinator(e.ctx, e.stack.CoordinatorConfig())
	if err != nil {
		t.Fatal(err)
	}
	// The connections the test can see (the coordinator's is its own).
	conns := map[string]*nats.Conn{"trainer": e.js.Conn()}
	for _, r := range e.stack.Replicas {
		d, err := e.stack.StartGenWorker(e.ctx, r, nil)
		if err != nil {
			t.Fatal(err)
		}
		conns["gen-worker-"+r] = d.NC
	}
	d, err := e.stack.StartEnvWorker(e.ctx, e.stack.EnvWorkerConfig("env-0"))
	if err != nil {
		t.Fatal(err)
	}
	conns["env-worker-env-0"] = d.NC
	connectedTo := func(node string) []string {
		var names []string
		for name, nc := range conns {
			if nc.ConnectedServerName() == node {
				names = append(names, name)
			}
		}
		slices.Sort(names)
		return names
	}
	// Two waves: the second goes in just before n2 is killed, so that kill
	// too finds trajectories in flight however fast the first wave went.
	const n, first = 40, 28
	samples := make([]schema.Sample, n)
	for i := range samples {
		id := fmt.Sprintf("node-loss-%02d", i)
		samples[i] = simSample(id, clusterScript(id)...)
	}
	since := func() time.Duration { return time.Since(start).Round(time.Millisecond) }
	e.submit(samples[:first]...)
	t.Logf("%v: submitted %d samples", since(), first)
	stopProgress := logProgress(t, e, start)
	t.Cleanup(stopProgress)
	testkit.Eventually(t, wait, "a third of the results", func() bool { return finished(e) >= n/3 })
	t.Logf("%v: %d results; killing n1 (connected to it: %q)", since(), finished(e), connectedTo("n1"))
	if err := cl.Kill(1); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, wait, "half the results with n1 down", func() bool { return finished(e) >= n/2 })
	t.Logf("%v: %d results; restarting n1", since(), finished(e))
	if err := cl.Restart(1); err != nil {
		t.Fatal(err)
	}
	// Only once n1 has caught up may n2 go: before, the streams n1 and n2
	// hold replicas of would have no quorum.
	if err := cl.WaitCurrent(1, wait); err != nil {
		t.Fatal(err)
	}
	before := finished(e)
	e.submit(samples[first:]...)
	t.Logf("%v: %d results; n1 current; submitted the other %d samples", since(), before, n-first)
	testkit.Eventually(t, wait, "results after the second wave", func() bool { return finished(e) >= before+2 })
	t.Logf("%v: %d results; killing n2 (connected to it: %q)", since(), finished(e), connectedTo("n2"))
	if err := cl.Kill(2); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, wait, "every result with n2 down", func() bool { return finished(e) >= n })
	t.Logf("%v: %d results", since(), finished(e))

	stopProgress()
	// Whoever was on a killed node moved to a live one.
	testkit.Eventually(t, wait, "every connection on a live node", func() bool {
		for _, nc := range conns {
			if !nc.IsConnected() || nc.ConnectedServerName() == "n2" {
				return false
			}
		}
		return true
	})
	for name, nc := range conns {
		t.Logf("%s: on %s after %d reconnects", name, nc.ConnectedServerName(), nc.Stats().Reconnects)
	}
	all := clusterResults(e, n)
	clusterResultsHandled(e)
	got := map[string]schema.Result{}
	for _, r := range all {
		if _, dup := got[r.TrajID]; dup {
			t.Errorf("%s: more than one result in the stream", r.TrajID)
		}
		got[r.TrajID] = r
	}
	if len(all) != n || len(got) != n {
		t.Errorf("%d results for %d trajectories, want %d", len(all), len(got), n)
	}
	fallbacks := 0
	for _, s := range samples {
		r, ok := got[s.ID]
		if !ok {
			t.Errorf("%s: no result", s.ID)
			continue
		}
		delete(got, s.ID)
		switch r.Status {
		case schema.StatusFallback:
			fallbacks++
			t.Logf("%s: fallback: %s", s.ID, r.Reason)
			if r.Reason == "" || len(r.Tokens) != 0 || r.Reward != 0 {
				t.Errorf("%s: fallback with reason %q, %d tokens, reward %g", s.ID, r.Reason, len(r.Tokens), r.Reward)
			}
			continue
		case schema.StatusSubmitted:
		default:
			t.Errorf("%s: status %q", s.ID, r.Status)
			continue
		}
		if !r.Solved() || r.Reason != "submitted" {
			t.Errorf("%s: %s %q reward %g", s.ID, r.Status, r.Reason, r.Reward)
		}
		checkConsistent(t, r)
		checkRanOnce(t, e, s, r)
	}
	for id := range got {
		t.Errorf("result for %s, which was never submitted", id)
	}
	counts, err := e.st.Counts(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if counts[schema.StatusSubmitted] != int64(n-fallbacks) || counts[schema.StatusFallback] != int64(fallbacks) {
		t.Errorf("coordinator counted %v, want %d completed and %d fallbacks", counts, n-fallbacks, fallbacks)
	}
	var st coordinator.Status
	testkit.Eventually(t, wait, "the coordinator's status", func() bool {
		ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
		defer cancel()
		st, err = coord.Status(ctx)
		return err == nil
	})
	t.Logf("%v: checked; %d fallbacks; moved %d, republished %d, env moved %d", since(), fallbacks, st.Moved,
		st.Republished, st.EnvMoved)
}

// checkRanOnce asserts completed result r ran s's script exactly once: its
// messages are the system prompt, the task, then each of the script's
// replies in order, each command's output after it once; and the
// trajectory's stored state has as many calls, tokens and messages as the
// result.
func checkRanOnce(t *testing.T, e *env, s schema.Sample, r schema.Result) {
	t.Helper()
	want := []string{schema.RoleSystem, schema.RoleUser}
	for i := range s.Script {
		if i > 0 {
			want = append(want, schema.RoleUser)
		}
		want = append(want, schema.RoleAssistant)
	}
	want = append(want, schema.RoleUser) // the terminating message: the submission
	var roles, replies, observations []string
	for _, m := range r.Messages {
		roles = append(roles, m.Role)
	}
	if !slices.Equal(roles, want) || r.Turns != len(s.Script) {
		t.Errorf("%s: %d turns, messages %q; want %q", s.ID, r.Turns, roles, want)
		return
	}
	for _, m := range r.Messages[2 : len(r.Messages)-1] {
		if m.Role == schema.RoleAssistant {
			replies = append(replies, m.Content)
		} else {
			observations = append(observations, m.Content)
		}
	}
	if !slices.Equal(replies, s.Script) {
		t.Errorf("%s: replies %q; want the script once: %q", s.ID, replies, s.Script)
	}
	for i, o := range observations {
		if want := fmt.Sprintf("%s-step-%d", s.ID, i+1); strings.Count(o, want) != 1 {
			t.Errorf("%s: observation %d is %q, want %q once", s.ID, i, o, want)
		}
	}
	tr, err := e.st.Load(e.ctx, s.ID, traj.WithAll)
	if err != nil {
		t.Errorf("%s: %v", s.ID, err)
		return
	}
	if tr.Status != traj.StatusTerminated || tr.Calls != r.Turns || len(tr.Tokens) != len(r.Tokens) ||
		len(tr.Messages) != len(r.Messages) {
		t.Errorf("%s: stored %s with %d calls, %d tokens, %d messages; result %d turns, %d tokens, %d messages",
			s.ID, tr.Status, tr.Calls, len(tr.Tokens), len(tr.Messages), r.Turns, len(r.Tokens), len(r.Messages))
	}
}
