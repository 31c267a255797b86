package devstack_test

import (
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"github.com/actloop/actloop/internal/swebench"
	"github.com/actloop/actloop/internal/swebench/swebenchtest"
	"github.com/actloop/actloop/internal/testlog"
	"github.com/actloop/actloop/pkg/schema"
)

// A SWE-bench-style row runs end to end on the local backend under
// mini-swe-agent's own swebench.yaml: the reward comes from the eval's test
// lines, and the result keeps each test's outcome.
func TestSWEBenchTaskUnderMiniSWEAgentConfig(t *testing.T) {
	e := newEnv(t, 1)
	agentConfig, err := filepath.Abs(filepath.Join("..", "..", "examples", "mini-swe-agent", "swebench.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.stack.StartCoordinator(e.ctx, e.stack.CoordinatorConfig()); err != nil {
		t.Fatal(err)
	}
	gcfg := e.stack.GenWorkerConfig(e.stack.Replicas[0])
	gcfg.AgentConfig = agentConfig
	if _, err := e.stack.StartGenWorkerWith(e.ctx, gcfg, nil); err != nil {
		t.Fatal(err)
	}
	repos := t.TempDir()
	ecfg := e.stack.EnvWorkerConfig("env-0")
	ecfg.AgentConfig = agentConfig
	ecfg.WorkspaceRoots = append(ecfg.WorkspaceRoots, repos) // ACTLOOP_WORKSPACE_ROOTS
	if _, err := e.stack.StartEnvWorker(e.ctx, ecfg); err != nil {
		t.Fatal(err)
	}

	repo, base := swebenchtest.Repo(t, repos)
	submit := "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"
	var samples []schema.Sample
	for _, tc := range []struct {
		id     string
		script []string
	}{
		{"calc-fixed", []string{"THOUGHT: fix it.\n\n```bash\n" + swebenchtest.Fix + "\n```", submit}},
		{"calc-unfixed", []string{submit}},
	} {
		s, err := swebench.Row(swebenchtest.Row(t, tc.id, base), 1, swebench.Options{Workspace: repo})
		if err != nil {
			t.Fatal(err)
		}
		s.Script = tc.script
		samples = append(samples, s)
	}
	e.submit(samples...)
	got := e.results(len(samples))

	fixed, unfixed := got["calc-fixed"], got["calc-unfixed"]
	wantFixed := map[string]string{swebenchtest.TestAdd: testlog.Passed, swebenchtest.TestNew: testlog.Passed,
		swebenchtest.TestSub: testlog.Passed}
	if fixed.Reward != 1 || !maps.Equal(fixed.Tests, wantFixed) {
		t.Errorf("fixed: reward %g, tests %v, reason %q; want 1, %v", fixed.Reward, fixed.Tests, fixed.Reason, wantFixed)
	}
	wantUnfixed := map[string]string{swebenchtest.TestAdd: testlog.Failed, swebenchtest.TestNew: testlog.Passed,
		swebenchtest.TestSub: testlog.Passed}
	if unfixed.Reward != 0 || !maps.Equal(unfixed.Tests, wantUnfixed) {
		t.Errorf("unfixed: reward %g, tests %v, reason %q; want 0, %v", unfixed.Reward, unfixed.Tests, unfixed.Reason, wantUnfixed)
	}
	for _, r := range []schema.Result{fixed, unfixed} {
		checkConsistent(t, r)
		if len(r.Messages) < 2 || !strings.HasPrefix(r.Messages[1].Content, "<pr_description>\nConsider the following PR description:\nadd() subtracts") {
			t.Errorf("%s: the task message is not swebench.yaml's instance template", r.TrajID)
		}
	}
	if fixed.Turns != 2 || len(fixed.Messages) < 4 || !strings.HasPrefix(fixed.Messages[3].Content, "<returncode>0</returncode>\n<output>\n") {
		t.Errorf("fixed: turns %d; the observation is not swebench.yaml's", fixed.Turns)
	}
}
