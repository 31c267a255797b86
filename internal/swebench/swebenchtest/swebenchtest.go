// Package swebenchtest makes a tiny SWE-bench-style task for tests: a git
// repository with a bug, a fake test runner that prints pytest -rA summary
// lines, and the dataset row that goes with them.
package swebenchtest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The tests the row lists. TestAdd fails until the bug is fixed; TestSub
// passes throughout; TestNew exists only once the row's test_patch is
// applied.
const (
	TestAdd = "tests/test_calc.py::test_add"
	TestSub = "tests/test_calc.py::test_sub"
	TestNew = "tests/test_new.py::test_new[a b]"
)

// Fix is the command that fixes the bug.
const Fix = "sed -i 's/a - b # add/a + b # add/' calc.sh"

// runner is the fake test runner: it ignores its arguments (the test files)
// and reports each test as pytest -rA does, among other output.
const runner = `#!/bin/bash
echo "============================= test session starts =============================="
echo "collected 3 items"
echo "=========================== short test summary info ============================"
if grep -q 'a + b # add' calc.sh; then echo "PASSED ` + TestAdd + `"; else echo "FAILED ` + TestAdd + ` - assert 1 == 5"; fi
echo "PASSED ` + TestSub + `"
if [ -f tests/test_new.py ]; then echo "PASSED ` + TestNew + `"; fi
echo "============================== 3 passed in 0.01s ==============================="
`

const calc = "return a - b # add\n"

// testPatch adds tests/test_new.py.
const testPatch = `diff --git a/tests/test_new.py b/tests/test_new.py
new file mode 100644
index 0000000..3b18e51
--- /dev/null
+++ b/tests/test_new.py
@@ -0,0 +1 @@
+def test_new(): pass
`

// Repo creates the repository under dir and returns its path and the
// commit of its one commit.
func Repo(t testing.TB, dir string) (repo, commit string) {
	t.Helper()
	repo = filepath.Join(dir, "repo")
	files := map[string]string{"calc.sh": calc, "runtests": runner, "tests/test_calc.py": "def test_add(): pass\ndef test_sub(): pass\n"}
	for name, body := range files {
		p := filepath.Join(repo, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	Git(t, repo, "init", "-q")
	Git(t, repo, "add", "-A")
	Git(t, repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "base")
	return repo, strings.TrimSpace(Git(t, repo, "rev-parse", "HEAD"))
}

// Git runs git in dir and returns its output.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// Row returns the dataset row of the task, FAIL_TO_PASS and PASS_TO_PASS
// as SWE-bench spells them: strings holding JSON lists. The test command is
// the fake runner.
func Row(t testing.TB, id, commit string) []byte {
	t.Helper()
	f2p, _ := json.Marshal([]string{TestAdd, TestNew})
	p2p, _ := json.Marshal([]string{TestSub})
	b, err := json.Marshal(map[string]any{
		"instance_id": id, "repo": "example/calc", "base_commit": commit,
		"problem_statement": "add() subtracts instead of adding.", "FAIL_TO_PASS": string(f2p),
		"PASS_TO_PASS": string(p2p), "version": "1.0", "test_patch": testPatch, "test_cmd": "./runtests",
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}
