package devstack_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/actloop/actloop/internal/demo"
	"github.com/actloop/actloop/internal/envworker"
	"github.com/actloop/actloop/pkg/schema"
)

// A sample's workspace must lie inside ACTLOOP_WORKSPACE_ROOTS, its real
// path once symlinks are followed: one outside ends the trajectory failed,
// saying so; one inside runs. A command that writes past the file size
// limit gets an observation naming the limit, and the trajectory goes on.
func TestSandboxWorkspaceRootsAndLimits(t *testing.T) {
	e := newEnv(t, 1)
	roots := filepath.Dir(e.ws) // holds the demo workspace
	outside := t.TempDir()
	escape := filepath.Join(roots, "escape")
	if err := os.Symlink(outside, escape); err != nil {
		t.Fatal(err)
	}
	startOneOfEach(t, e, e.stack.CoordinatorConfig(), func(c *envworker.Config) {
		c.WorkspaceRoots, c.FileSizeMB = []string{roots}, 1
	})
	write := "THOUGHT: write a big file.\n\n```bash\nhead -c 2M /dev/zero > big.bin\n```"
	submit := "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"
	samples := demo.Samples(3, e.ws, "caps")
	samples[0].Env.Workspace = outside
	samples[1].Env.Workspace = escape
	samples[2].Script = []string{write, submit}
	e.submit(samples...)
	got := e.results(len(samples))

	for _, s := range samples[:2] {
		r := got[s.ID]
		if r.Status != schema.StatusFailed || !strings.Contains(r.Reason, "ACTLOOP_WORKSPACE_ROOTS") ||
			!strings.Contains(r.Reason, "workspace refused") {
			t.Errorf("%s (workspace %s): %s %q; want failed, naming ACTLOOP_WORKSPACE_ROOTS", s.ID, s.Env.Workspace, r.Status, r.Reason)
		}
	}
	r := got[samples[2].ID]
	if r.Status != schema.StatusSubmitted {
		t.Fatalf("%s: %s %q; want submitted", samples[2].ID, r.Status, r.Reason)
	}
	named := false
	for _, m := range r.Messages {
		if m.Role == schema.RoleUser && strings.Contains(m.Content, "sandbox limit: file size") {
			named = true
		}
	}
	if !named {
		t.Fatalf("no observation names the file size limit: %+v", r.Messages)
	}
}
