package swebench

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/actloop/actloop/internal/swebench/swebenchtest"
	"github.com/actloop/actloop/internal/testlog"
	"github.com/actloop/actloop/pkg/schema"
)

const commit = "0123456789abcdef0123456789abcdef01234567"

func row(edit string) string {
	base := `{"instance_id":"a__b-1","repo":"a/b","base_commit":"` + commit + `","problem_statement":"It breaks.",` +
		`"FAIL_TO_PASS":"[\"t.py::test_a\"]","PASS_TO_PASS":["t.py::test_b"]`
	return base + edit + "}"
}

func TestTestListForms(t *testing.T) {
	for _, in := range []string{row(""), strings.Replace(row(""), `"[\"t.py::test_a\"]"`, `["t.py::test_a"]`, 1)} {
		s, err := Row([]byte(in), 1, Options{})
		if err != nil {
			t.Fatalf("Row(%s) = %v", in, err)
		}
		if !slices.Equal(s.Env.Tests.FailToPass, []string{"t.py::test_a"}) || !slices.Equal(s.Env.Tests.PassToPass, []string{"t.py::test_b"}) {
			t.Errorf("tests = %+v", s.Env.Tests)
		}
	}
}

func TestRowSample(t *testing.T) {
	s, err := Row([]byte(row(`,"image":"swebench/sweb.eval.x86_64.a_1776_b-1:latest"`)), 3,
		Options{Workspace: "/data/repos/{repo}/{instance_id}", Limits: schema.Limits{StepLimit: 50}})
	if err != nil {
		t.Fatal(err)
	}
	if s.ID != "a__b-1" || s.Task != "It breaks." || s.Family != "a/b" || s.Env.Backend != schema.BackendLocal ||
		s.Env.Image != "swebench/sweb.eval.x86_64.a_1776_b-1:latest" || s.Env.Workspace != "/data/repos/a__b/a__b-1" ||
		s.Limits.StepLimit != 50 || s.Env.EvalTimeoutMS == 0 {
		t.Errorf("sample = %+v", s)
	}
	if !slices.Equal(s.Env.Setup, []string{"git -c advice.detachedHead=false checkout -q " + commit}) {
		t.Errorf("setup = %q", s.Env.Setup)
	}
	if !strings.Contains(s.Env.Eval, "pytest -rA 't.py::test_a' 't.py::test_b'") {
		t.Errorf("eval = %q, want pytest on the test ids (no test_patch)", s.Env.Eval)
	}
	if _, err := schema.DecodeSample(mustJSON(t, s)); err != nil {
		t.Errorf("the sample does not decode: %v", err)
	}
}

func TestRowErrors(t *testing.T) {
	tests := []struct {
		name, line, field string
	}{
		{"not JSON", "{", ""},
		{"two values", row("") + "{}", ""},
		{"bad id", strings.Replace(row(""), "a__b-1", "a b", 1), "instance_id"},
		{"bad repo", strings.Replace(row(""), `"a/b"`, `"ab"`, 1), "repo"},
		{"bad commit", strings.Replace(row(""), commit, "main; rm -rf /", 1), "base_commit"},
		{"no problem", strings.Replace(row(""), "It breaks.", " ", 1), "problem_statement"},
		{"tests not a list", strings.Replace(row(""), `"[\"t.py::test_a\"]"`, `"t.py::test_a"`, 1), "FAIL_TO_PASS"},
		{"tests a number", strings.Replace(row(""), `["t.py::test_b"]`, `7`, 1), "PASS_TO_PASS"},
		{"empty test id", strings.Replace(row(""), `["t.py::test_b"]`, `[""]`, 1), "PASS_TO_PASS"},
		{"no tests", strings.NewReplacer(`"[\"t.py::test_a\"]"`, `[]`, `["t.py::test_b"]`, `"[]"`).Replace(row("")), "FAIL_TO_PASS"},
		{"patch without header", row(`,"test_patch":"--- a/x\n+++ b/x\n"`), "test_patch"},
		{"patch escapes", row(`,"test_patch":"diff --git a/../x b/../x\n"`), "test_patch"},
		{"field of wrong type", row(`,"image":5`), "image"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Row([]byte(tt.line), 7, Options{})
			var re *RowError
			if !errors.As(err, &re) {
				t.Fatalf("Row() error = %v, want a *RowError", err)
			}
			if re.Line != 7 || re.Field != tt.field {
				t.Errorf("error = %q: line %d field %q, want line 7 field %q", err, re.Line, re.Field, tt.field)
			}
			if !strings.HasPrefix(err.Error(), "line 7: ") {
				t.Errorf("error = %q, want it to start with the line", err)
			}
		})
	}
}

func TestReadReportsEveryBadRow(t *testing.T) {
	second := strings.Replace(row(""), "a__b-1", "a__b-2", 1)
	in := row("") + "\n\n{bad\n" + second + "\n" + row("") + "\n"
	samples, err := Read(strings.NewReader(in), Options{})
	if len(samples) != 2 || samples[0].ID != "a__b-1" || samples[1].ID != "a__b-2" {
		t.Errorf("samples = %d, want the 2 good rows", len(samples))
	}
	if err == nil || !strings.Contains(err.Error(), "line 3: ") || !strings.Contains(err.Error(), "line 5: instance_id: \"a__b-1\" repeats line 1") {
		t.Errorf("Read() error = %v, want lines 3 and 5 reported", err)
	}
}

// A row over MaxLineBytes is reported with its line and the limit.
func TestReadNamesAnOverlongRow(t *testing.T) {
	in := row("") + "\n" + strings.Repeat("x", MaxLineBytes+1) + "\n"
	samples, err := Read(strings.NewReader(in), Options{})
	if len(samples) != 1 || err == nil || !strings.Contains(err.Error(), "line 2: ") ||
		!strings.Contains(err.Error(), "limit of 4194304 bytes") {
		t.Fatalf("Read: %d samples, error %v; want the first row and line 2 named with the limit", len(samples), err)
	}
}

// The eval, run by bash in a checkout, restores the test files, applies
// test_patch and prints the runner's summary lines only.
func TestEvalScript(t *testing.T) {
	repo, base := swebenchtest.Repo(t, t.TempDir())
	s, err := Row(swebenchtest.Row(t, "calc-1", base), 1, Options{})
	if err != nil {
		t.Fatal(err)
	}
	run := func(script string) string {
		cmd := exec.Command("bash", "-c", script)
		cmd.Dir = repo
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
		return string(out)
	}
	for _, c := range s.Env.Setup {
		run(c)
	}
	// The agent edits a test file the patch brings: the eval must drop that.
	if err := os.WriteFile(filepath.Join(repo, "tests", "test_new.py"), []byte("cheat\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := run(s.Env.Eval)
	const header = "=========================== short test summary info ============================\n"
	want := header + "FAILED " + swebenchtest.TestAdd + " - assert 1 == 5\nPASSED " + swebenchtest.TestSub + "\nPASSED " + swebenchtest.TestNew + "\n"
	if before != want {
		t.Errorf("eval before the fix = %q, want %q", before, want)
	}
	run("git checkout -q -- . && git clean -fdq && " + swebenchtest.Fix)
	after := run(s.Env.Eval)
	want = header + "PASSED " + swebenchtest.TestAdd + "\nPASSED " + swebenchtest.TestSub + "\nPASSED " + swebenchtest.TestNew + "\n"
	if after != want {
		t.Errorf("eval after the fix = %q, want %q", after, want)
	}
	if !strings.Contains(s.Env.Eval, "./runtests 'tests/test_new.py'") {
		t.Errorf("eval does not run the test_patch's files: %q", s.Env.Eval)
	}
}

func FuzzRow(f *testing.F) {
	f.Add([]byte(row("")))
	f.Add([]byte(row(`,"test_patch":"diff --git a/t.py b/t.py\n--- a/t.py\n+++ b/t.py\n"`)))
	f.Add([]byte(`{"FAIL_TO_PASS":"[1]"}`))
	f.Add([]byte(`{"FAIL_TO_PASS":"\"x\""}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		s, err := Row(line, 1, Options{})
		if err != nil {
			var re *RowError
			if !errors.As(err, &re) || re.Line != 1 {
				t.Fatalf("error %v is not a *RowError for line 1", err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("Row returned an invalid sample: %v", err)
		}
	})
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSpecFor(t *testing.T) {
	tests := []struct {
		repo, version, cmd, format string
	}{
		{"django/django", "4.2", testDjango, schema.TestLogDjango},
		{"django/django", "1.9", testDjangoNoParallel, schema.TestLogDjango},
		{"sympy/sympy", "1.12", testSympy, schema.TestLogSympy},
		{"astropy/astropy", "1.3", testAstropyPytest, schema.TestLogPytest},
		{"astropy/astropy", "5.1", DefaultTestCommand, schema.TestLogPytest},
		{"sphinx-doc/sphinx", "7.2", testSphinx, schema.TestLogPytest},
		{"someone/else", "", DefaultTestCommand, schema.TestLogPytest},
	}
	for _, tt := range tests {
		if got := SpecFor(tt.repo, tt.version); got.TestCmd != tt.cmd || got.Format != tt.format {
			t.Errorf("SpecFor(%s, %s) = %+v, want %q in %s", tt.repo, tt.version, got, tt.cmd, tt.format)
		}
	}
}

func TestDirectives(t *testing.T) {
	patch := "diff --git a/tests/migrations/test_commands.py b/tests/migrations/test_commands.py\n" +
		"diff --git a/tests/migrations/fixtures/data.json b/tests/migrations/fixtures/data.json\n" +
		"diff --git a/django/conf/helpers.py b/django/conf/helpers.py\n" +
		"diff --git a/tests/admin_views/tests.py b/tests/admin_views/tests.py\n"
	tests := []struct {
		name, repo, patch string
		f2p               []string
		want              []string
	}{
		{"django modules", "django/django", patch, []string{"test_x (migrations.test_commands.T)"},
			[]string{"migrations.test_commands", "admin_views.tests"}},
		{"django labels from ids", "django/django", "", []string{"test_x (migrations.test_commands.T)",
			"test_y (migrations.test_commands.T.test_y)", "A docstring (x.T)"}, []string{"migrations.test_commands.T.test_x", "migrations.test_commands.T.test_y"}},
		{"pytest files", "pallets/flask", "diff --git a/tests/test_a.py b/tests/test_a.py\ndiff --git a/README.md b/README.md\n", []string{"tests/test_a.py::t"},
			[]string{"tests/test_a.py"}},
		{"pytest ids", "pallets/flask", "", []string{"tests/test_a.py::t"}, []string{"tests/test_a.py::t"}},
		{"sympy files", "sympy/sympy", "diff --git a/sympy/core/tests/test_basic.py b/sympy/core/tests/test_basic.py\n", []string{"test_x"},
			[]string{"sympy/core/tests/test_basic.py"}},
		{"sympy without a patch runs everything", "sympy/sympy", "", []string{"test_x"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files, err := patchFiles(tt.patch)
			if err != nil {
				t.Fatal(err)
			}
			in := Instance{Repo: tt.repo, FailToPass: tt.f2p}
			if got := directives(in, files, SpecFor(tt.repo, "").Format); !slices.Equal(got, tt.want) {
				t.Errorf("directives = %q, want %q", got, tt.want)
			}
		})
	}
}

// A Django task end to end: the eval script runs the runner on the test
// module, keeps its "... ok" lines (written to stderr, as Django does) and
// the score reads them.
func TestDjangoEval(t *testing.T) {
	repo, base := swebenchtest.Repo(t, t.TempDir())
	runner := "#!/bin/bash\n[ \"$1\" = calc.test_ops ] || { echo \"runner got $*\" >&2; exit 1; }\n" +
		"echo 'Testing against Django installed in /x' >&2\n" +
		"echo 'test_add (calc.test_ops.T) ... ok' >&2\necho 'test_sub (calc.test_ops.T) ... FAIL' >&2\n" +
		"echo '======' >&2\necho 'FAIL: test_sub (calc.test_ops.T)' >&2\necho 'Traceback' >&2\n"
	if err := os.WriteFile(filepath.Join(repo, "runtests.py"), []byte(runner), 0o755); err != nil {
		t.Fatal(err)
	}
	line, err := json.Marshal(map[string]any{"instance_id": "django__django-1", "repo": "django/django", "base_commit": base,
		"problem_statement": "p", "version": "4.2", "FAIL_TO_PASS": []string{"test_add (calc.test_ops.T)"},
		"PASS_TO_PASS": []string{"test_sub (calc.test_ops.T)"}, "test_cmd": "./runtests.py",
		"test_patch": "diff --git a/tests/calc/test_ops.py b/tests/calc/test_ops.py\nnew file mode 100644\n--- /dev/null\n+++ b/tests/calc/test_ops.py\n@@ -0,0 +1 @@\n+x = 1\n"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Row(line, 1, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Env.Tests.Format != schema.TestLogDjango {
		t.Fatalf("format = %q", s.Env.Tests.Format)
	}
	cmd := exec.Command("bash", "-c", s.Env.Eval)
	cmd.Dir = repo
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("eval: %v\n%s", err, out)
	}
	want := "test_add (calc.test_ops.T) ... ok\ntest_sub (calc.test_ops.T) ... FAIL\nFAIL: test_sub (calc.test_ops.T)\n"
	if string(out) != want {
		t.Errorf("eval output = %q, want %q", out, want)
	}
	reward, outcomes := testlog.Score(*s.Env.Tests, string(out))
	if reward != 0 || outcomes["test_add (calc.test_ops.T)"] != testlog.Passed || outcomes["test_sub (calc.test_ops.T)"] != testlog.Failed {
		t.Errorf("Score = %g %v", reward, outcomes)
	}
}
