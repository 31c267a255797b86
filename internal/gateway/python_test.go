package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/swebench"
	"github.com/actloop/actloop/internal/testkit"
)

// The Python client's tests (clients/python, standard library only) pass
// against `actloop dev --serve`, as a user runs it: submit with per-line
// errors, a results stream read across a reconnect with nothing lost or
// duplicated, groups, the GRPO example's training records, control calls,
// runs that read only their own results, a submit whose answer was lost,
// the async client and a reward endpoint served from a Python function
// (actloop.serve_reward) scoring a trajectory end to end; and its tests that need no gateway
// (tests/test_offline.py: retries, serve_reward, the dataset helpers, the
// package's build).
func TestPythonClient(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not on PATH: the Python client's tests need it")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "actloop")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/actloop").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	state := filepath.Join(dir, "state")
	// A port for the Python test's reward endpoint (actloop.serve_reward),
	// which the stack allows samples to name, as a deployment names its
	// reward service.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rewardPort := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	_ = ln.Close()
	dev := exec.CommandContext(ctx, bin, "dev", "--serve", "--dir", state, "--addr", "127.0.0.1:0",
		"--gateway-addr", "127.0.0.1:0", "--time-scale", "0.01")
	dev.Env = append(os.Environ(), "ACTLOOP_REWARD_URLS=http://127.0.0.1:"+rewardPort+"/")
	var devOut strings.Builder
	dev.Stdout, dev.Stderr = &devOut, &devOut
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = dev.Process.Signal(syscall.SIGINT)
		_ = dev.Wait()
		t.Logf("actloop dev --serve:\n%s", devOut.String())
	}()
	env := map[string]string{}
	testkit.Eventually(t, 3*time.Minute, "actloop dev --serve to write the gateway's address", func() bool {
		f, err := os.Open(filepath.Join(state, "actloop.env"))
		if err != nil {
			return false
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if kv, ok := strings.CutPrefix(sc.Text(), "export "); ok {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = strings.Trim(v, "'")
			}
		}
		return env["ACTLOOP_GATEWAY_URL"] != ""
	})
	fixture := swebenchFixture(t, dir)
	cmd := exec.CommandContext(ctx, py, "-m", "unittest", "discover", "-v", "-s", "../../clients/python/tests")
	cmd.Env = append(os.Environ(), "ACTLOOP_GATEWAY_URL="+env["ACTLOOP_GATEWAY_URL"],
		"ACTLOOP_API_TOKEN="+env["ACTLOOP_API_TOKEN"], "PYTHONDONTWRITEBYTECODE=1", "ACTLOOP_SWEBENCH_FIXTURE="+fixture,
		"ACTLOOP_TEST_REWARD_PORT="+rewardPort)
	out, err := cmd.CombinedOutput()
	t.Logf("python3 -m unittest:\n%s", out)
	if err != nil {
		t.Fatalf("the Python client's tests failed: %v", err)
	}
	if strings.Contains(string(out), "skipped") {
		t.Fatal("Python tests were skipped with a gateway to test against")
	}
}

// swebenchFixture writes SWE-bench rows and the samples internal/swebench
// makes of them (the rows, options and samples as JSON) for the Python
// helper's test (actloop.swebench_sample makes the same), and returns its
// path.
func swebenchFixture(t *testing.T, dir string) string {
	t.Helper()
	const commit = "d16bfe05a744909de4b27f5875fe0d4ed41ce607"
	patch := "diff --git a/tests/migrations/test_x.py b/tests/migrations/test_x.py\n--- a/tests/migrations/test_x.py\n" +
		"+++ b/tests/migrations/test_x.py\n@@ -1 +1 @@\n-a\n+b\n" +
		"diff --git a/tests/data/it's.json b/tests/data/it's.json\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"
	rows := []map[string]any{
		{"instance_id": "astropy__astropy-1", "repo": "astropy/astropy", "base_commit": commit, "version": "1.3",
			"problem_statement": "It breaks.", "FAIL_TO_PASS": `["astropy/t/test_a.py::test_x[1-2]"]`,
			"PASS_TO_PASS": []string{"astropy/t/test_a.py::test_y"}, "image": "img:1", "environment_setup_commit": "abc1234",
			"test_patch": "diff --git a/astropy/t/test_a.py b/astropy/t/test_a.py\n--- a/astropy/t/test_a.py\n+++ b/astropy/t/test_a.py\n@@ -1 +1 @@\n-a\n+b\n"},
		{"instance_id": "django__django-2", "repo": "django/django", "base_commit": commit, "version": "3.0",
			"problem_statement": "Django breaks.", "FAIL_TO_PASS": []string{"test_a (migrations.test_x.T)", "test_b (m.T.test_b)"},
			"PASS_TO_PASS": []string{}},
		{"instance_id": "django__django-3", "repo": "django/django", "base_commit": commit, "version": "1.9",
			"problem_statement": "Again.", "FAIL_TO_PASS": []string{"test_a (migrations.test_x.T)"}, "test_patch": patch},
		{"instance_id": "sympy__sympy-4", "repo": "sympy/sympy", "base_commit": commit, "problem_statement": "Sympy.",
			"PASS_TO_PASS": []string{"test_z"}, "test_cmd": "bin/test --mine"},
	}
	opts := swebench.Options{Backend: "sim", Workspace: "repos/{repo}/{instance_id}"}
	type pair struct {
		Row    map[string]any `json:"row"`
		Sample any            `json:"sample"`
	}
	var out struct {
		Options map[string]string `json:"options"`
		Pairs   []pair            `json:"pairs"`
	}
	out.Options = map[string]string{"backend": opts.Backend, "workspace": opts.Workspace}
	for i, r := range rows {
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		s, err := swebench.Row(line, i+1, opts)
		if err != nil {
			t.Fatalf("row %d: %v", i+1, err)
		}
		out.Pairs = append(out.Pairs, pair{Row: r, Sample: s})
	}
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "swebench.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
