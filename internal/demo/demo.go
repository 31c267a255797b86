// Package demo is the built-in demo batch of `actloop dev`: small real
// coding tasks in a git workspace, each with a failing check, and a scripted
// model that inspects the code, fixes it, runs the check and submits. The
// eval runs the same check in a fresh sandbox with the submitted diff.
package demo

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/actloop/actloop/pkg/schema"
)

type task struct {
	name, file, broken, task string
	script                   []string
}

const submit = "THOUGHT: The check passes; submitting the change.\n\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached\n```"

var tasks = []task{
	{
		name: "add", file: "add.sh",
		broken: "#!/usr/bin/env bash\n# add A B prints A+B\necho $(( $1 - $2 ))\n",
		task:   "`bash check.sh add` fails: `bash add.sh 2 3` should print 5. Fix add.sh.",
		script: []string{
			"THOUGHT: Let me read the script first.\n\n```bash\ncat add.sh\n```",
			"THOUGHT: It subtracts instead of adding. Fix the operator and run the check.\n\n```bash\nsed -i 's/\\$1 - \\$2/$1 + $2/' add.sh && bash check.sh add\n```",
			submit,
		},
	},
	{
		name: "greet", file: "greet.sh",
		broken: "#!/usr/bin/env bash\n# greet NAME prints a greeting\necho \"Helo, $1!\"\n",
		task:   "`bash check.sh greet` fails: `bash greet.sh Ada` should print `Hello, Ada!`. Fix greet.sh.",
		script: []string{
			// No bash block: a format error goes back to the model.
			"THOUGHT: The greeting is probably misspelt; I will look at it.",
			"THOUGHT: I forgot the command block. Reading the script.\n\n```bash\ncat greet.sh\n```",
			"THOUGHT: 'Helo' is misspelt.\n\n```bash\nsed -i 's/Helo/Hello/' greet.sh && bash check.sh greet\n```",
			submit,
		},
	},
	{
		name: "max", file: "max.sh",
		broken: "#!/usr/bin/env bash\n# max A B prints the larger of A and B\nif [ \"$1\" -lt \"$2\" ]; then echo \"$1\"; else echo \"$2\"; fi\n",
		task:   "`bash check.sh max` fails: `bash max.sh 3 7` should print 7. Fix max.sh.",
		script: []string{
			"THOUGHT: Run the check to see the failure.\n\n```bash\nbash check.sh max; bash max.sh 3 7\n```",
			"THOUGHT: The comparison picks the smaller number. Swap the branches.\n\n```bash\nsed -i 's/echo \"$1\"; else echo \"$2\"/echo \"$2\"; else echo \"$1\"/' max.sh && bash check.sh max\n```",
			submit,
		},
	},
}

const check = `#!/usr/bin/env bash
# check.sh NAME: exits 0 when NAME.sh behaves.
set -u
case "$1" in
  add)   got=$(bash add.sh 2 3);   want=5 ;;
  greet) got=$(bash greet.sh Ada); want='Hello, Ada!' ;;
  max)   got=$(bash max.sh 3 7);   want=7 ;;
  *) echo "unknown check $1"; exit 2 ;;
esac
if [ "$got" = "$want" ]; then echo "PASS $1"; else echo "FAIL $1: got '$got', want '$want'"; exit 1; fi
`

// Workspace writes the demo repository (a git repo with one commit) under
// dir and returns its path. It needs git on PATH.
func Workspace(dir string) (string, error) {
	if _, err := exec.LookPath("git"); err != nil {
		return "", fmt.Errorf("the demo workspace needs git on PATH: %w", err)
	}
	ws := filepath.Join(dir, "demo-workspace")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		return "", err
	}
	files := map[string]string{"check.sh": check, "README.md": "Small scripts with bugs; `bash check.sh NAME` tests one.\n"}
	for _, t := range tasks {
		files[t.file] = t.broken
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(ws, name), []byte(body), 0o755); err != nil {
			return "", err
		}
	}
	git := func(args ...string) error {
		cmd := exec.Command("git", append([]string{"-c", "user.name=actloop", "-c", "user.email=demo@actloop.invalid",
			"-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false"}, args...)...)
		cmd.Dir = ws
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %v: %w: %s", args, err, out)
		}
		return nil
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"commit", "-q", "-m", "demo tasks"}} {
		if err := git(args...); err != nil {
			return "", err
		}
	}
	return ws, nil
}

// Samples returns n demo samples (the tasks in turn, two rollouts each per
// group) on the local backend in workspace.
func Samples(n int, workspace, prefix string) []schema.Sample {
	out := make([]schema.Sample, n)
	for i := range n {
		t := tasks[(i/2)%len(tasks)]
		s := schema.Sample{
			V: schema.Version, ID: fmt.Sprintf("%s-%03d", prefix, i), GroupID: fmt.Sprintf("%s-g%03d", prefix, i/2),
			GroupIndex: i % 2, GroupSize: 2, Task: t.task,
			Env: schema.Env{Backend: schema.BackendLocal, Workspace: workspace, Eval: "bash check.sh " + t.name,
				StepTimeoutMS: 30_000},
			Limits:   schema.Limits{StepLimit: 10, TokenBudget: 8192},
			Sampling: schema.Sampling{Temperature: 1, MaxNewTokens: 512},
			Script:   t.script,
			Metadata: []byte(fmt.Sprintf(`{"task":%q}`, t.name)),
		}
		s.Normalize()
		out[i] = s
	}
	return out
}
