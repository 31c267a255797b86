package testlog

import (
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/actloop/actloop/pkg/schema"
)

const sampleLog = `============================= test session starts ==============================
tests/test_a.py .F.                                                      [100%]
=========================== short test summary info ============================
PASSED tests/test_a.py::test_one
FAILED tests/test_a.py::test_two - AssertionError: assert 1 == 2
PASSED tests/test_a.py::test_p[a b]
ERROR tests/test_b.py::test_setup - fixture 'db' not found
SKIPPED [1] tests/test_c.py:3: no network
XFAIL tests/test_a.py::test_known - reason
PASSED tests/test_a.py::test_dash - x
  PASSED tests/test_a.py::indented
PASSED
========================= 1 failed, 3 passed in 0.12s ==========================
`

func TestOutcomes(t *testing.T) {
	ids := []string{"tests/test_a.py::test_one", "tests/test_a.py::test_two", "tests/test_a.py::test_p[a b]",
		"tests/test_b.py::test_setup", "tests/test_a.py::test_known", "tests/test_a.py::test_dash - x",
		"tests/test_a.py::indented", "tests/test_a.py::absent"}
	got := PytestOutcomes(ParsePytest(sampleLog), ids)
	want := map[string]string{"tests/test_a.py::test_one": Passed, "tests/test_a.py::test_two": Failed,
		"tests/test_a.py::test_p[a b]": Passed, "tests/test_b.py::test_setup": Error, "tests/test_a.py::test_known": Passed,
		"tests/test_a.py::test_dash - x": Passed, "tests/test_a.py::indented": Missing, "tests/test_a.py::absent": Missing}
	if !maps.Equal(got, want) {
		t.Errorf("Outcomes() = %v\nwant %v", got, want)
	}
}

func TestLastLineWins(t *testing.T) {
	got := PytestOutcomes(ParsePytest("FAILED t::a - x\nPASSED t::a\r\n"), []string{"t::a"})
	if got["t::a"] != Passed {
		t.Errorf("outcome = %s, want the last line's PASSED", got["t::a"])
	}
}

func TestScore(t *testing.T) {
	tests := []struct {
		name   string
		tests  schema.Tests
		output string
		want   float64
	}{
		{"all pass", schema.Tests{FailToPass: []string{"t::a"}, PassToPass: []string{"t::b"}}, "PASSED t::a\nPASSED t::b\n", 1},
		{"fail to pass still fails", schema.Tests{FailToPass: []string{"t::a"}, PassToPass: []string{"t::b"}}, "FAILED t::a - e\nPASSED t::b\n", 0},
		{"pass to pass broke", schema.Tests{FailToPass: []string{"t::a"}, PassToPass: []string{"t::b"}}, "PASSED t::a\nERROR t::b\n", 0},
		{"missing", schema.Tests{FailToPass: []string{"t::a"}, PassToPass: []string{"t::b"}}, "PASSED t::a\n", 0},
		{"skipped does not count", schema.Tests{FailToPass: []string{"t::a"}, PassToPass: []string{"t::b"}}, "PASSED t::a\nSKIPPED t::b\n", 1},
		{"empty output", schema.Tests{FailToPass: []string{"t::a"}}, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, outcomes := Score(tt.tests, tt.output)
			if got != tt.want {
				t.Errorf("Score() = %g (%v), want %g", got, outcomes, tt.want)
			}
			if len(outcomes) != len(tt.tests.FailToPass)+len(tt.tests.PassToPass) {
				t.Errorf("outcomes = %v, want one per listed test", outcomes)
			}
		})
	}
}

func FuzzParsePytest(f *testing.F) {
	f.Add(sampleLog, "tests/test_a.py::test_two")
	f.Add("PASSED a - b - c\n", "a - b")
	f.Add("FAILED \r\n", "")
	f.Fuzz(func(t *testing.T, log, id string) {
		lines := ParsePytest(log)
		for _, l := range lines {
			if l.Rest == "" || strings.ContainsAny(l.Rest, "\n") {
				t.Fatalf("bad line %+v", l)
			}
		}
		got := PytestOutcomes(lines, []string{id})
		if len(got) != 1 {
			t.Fatalf("Outcomes() = %v, want one entry", got)
		}
		switch got[id] {
		case Passed, Failed, Error, Skipped, Missing:
		default:
			t.Fatalf("outcome %q", got[id])
		}
		if got[id] != Missing && !strings.Contains(log, id) && !strings.Contains(clean(log), id) {
			t.Fatalf("%q found in a log that does not hold it", id)
		}
	})
}

// pytest -v lines, colour codes and the short summary: only the summary is
// read where there is one, so what a test printed cannot pose as a result.
func TestPytestVerboseAndSummary(t *testing.T) {
	verbose := "tests/t.py::test_a \x1b[32mPASSED\x1b[0m [ 50%]\ntests/t.py::test_b FAILED [100%]\n"
	got := Outcomes(schema.TestLogPytest, verbose, []string{"tests/t.py::test_a", "tests/t.py::test_b"})
	if got["tests/t.py::test_a"] != Passed || got["tests/t.py::test_b"] != Failed {
		t.Errorf("-v lines: %v", got)
	}
	forged := "----- Captured stdout call -----\nPASSED tests/t.py::test_b\n" +
		"=========================== short test summary info ============================\n" +
		"PASSED tests/t.py::test_a\nSKIPPED [2] tests/t.py:9: slow\n"
	got = Outcomes("", forged, []string{"tests/t.py::test_a", "tests/t.py::test_b"})
	if got["tests/t.py::test_a"] != Passed || got["tests/t.py::test_b"] != Missing {
		t.Errorf("summary: %v, want test_b missing (its PASSED line was printed before the summary)", got)
	}
	for _, l := range ParsePytest(forged) {
		if strings.HasPrefix(l.Rest, "[2]") {
			t.Errorf("a skip count read as a test: %+v", l)
		}
	}
}

// A Django runner's output at --verbosity 2 (./tests/runtests.py), with a
// test whose "ok" another message pushed to the next line.
const djangoLog = `Testing against Django installed in '/testbed/django' with up to 8 processes
Creating test database for alias 'default'...
test_add (calc.tests.CalcTests) ... ok
test_sub (calc.tests.CalcTests) ... FAIL
test_div (calc.tests.CalcTests) ... ERROR
test_net (calc.tests.CalcTests) ... skipped 'no network'
test_noisy (calc.tests.CalcTests) ... Internal Server Error: /path/
ok
test_mul (calc.tests.CalcTests.test_mul) ... ok

======================================================================
FAIL: test_sub (calc.tests.CalcTests)
----------------------------------------------------------------------
Traceback (most recent call last):
AssertionError: 1 != 2

----------------------------------------------------------------------
Ran 6 tests in 0.010s

FAILED (failures=1, errors=1, skipped=1)
`

func TestParseDjango(t *testing.T) {
	ids := []string{"test_add (calc.tests.CalcTests)", "test_sub (calc.tests.CalcTests)", "test_div (calc.tests.CalcTests)",
		"test_net (calc.tests.CalcTests)", "test_noisy (calc.tests.CalcTests)", "test_mul (calc.tests.CalcTests.test_mul)",
		"test_gone (calc.tests.CalcTests)"}
	got := Outcomes(schema.TestLogDjango, djangoLog, ids)
	want := map[string]string{"test_add (calc.tests.CalcTests)": Passed, "test_sub (calc.tests.CalcTests)": Failed,
		"test_div (calc.tests.CalcTests)": Error, "test_net (calc.tests.CalcTests)": Skipped,
		"test_noisy (calc.tests.CalcTests)": Passed, "test_mul (calc.tests.CalcTests.test_mul)": Passed,
		"test_gone (calc.tests.CalcTests)": Missing}
	if !maps.Equal(got, want) {
		t.Errorf("Outcomes(django) = %v\nwant %v", got, want)
	}
	// The filter keeps every line the parser reads.
	if f := filtered(t, schema.TestLogDjango, djangoLog); !maps.Equal(Outcomes(schema.TestLogDjango, f, ids), want) {
		t.Errorf("after Filter:\n%s", f)
	}
}

// sympy's bin/test -C --verbose output.
const sympyLog = `============================= test process starts ==============================
executable:         /opt/miniconda3/envs/testbed/bin/python  (3.9.19-final-0) [CPython]
sympy/core/tests/test_basic.py[3]
test_add ok
test_sub F
test_div E
test_slow f

________________________________________________________________________________
__________________ sympy/core/tests/test_basic.py:test_sub _____________________
Traceback (most recent call last):
AssertionError

============ tests finished: 1 passed, 1 failed, 1 exceptions, in 0.01 seconds ============
`

func TestParseSympy(t *testing.T) {
	ids := []string{"test_add", "test_sub", "test_div", "test_slow", "sympy/core/tests/test_basic.py:test_sub"}
	got := Outcomes(schema.TestLogSympy, sympyLog, ids)
	want := map[string]string{"test_add": Passed, "test_sub": Failed, "test_div": Error, "test_slow": Missing,
		"sympy/core/tests/test_basic.py:test_sub": Failed}
	if !maps.Equal(got, want) {
		t.Errorf("Outcomes(sympy) = %v\nwant %v", got, want)
	}
	if f := filtered(t, schema.TestLogSympy, sympyLog); !maps.Equal(Outcomes(schema.TestLogSympy, f, ids), want) {
		t.Errorf("after Filter:\n%s", f)
	}
	if f := filtered(t, schema.TestLogPytest, sampleLog); !slices.Equal(ParsePytest(f), ParsePytest(sampleLog)) {
		t.Errorf("pytest after Filter:\n%s", f)
	}
}

// filtered runs log through grep -E Filter(format), as the eval does.
func filtered(t *testing.T, format, log string) string {
	t.Helper()
	cmd := exec.Command("grep", "-E", Filter(format))
	cmd.Stdin = strings.NewReader(log)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("grep -E %q: %v", Filter(format), err)
	}
	return string(out)
}

func FuzzParsers(f *testing.F) {
	f.Add(djangoLog, "test_add (calc.tests.CalcTests)")
	f.Add(sympyLog, "test_sub")
	f.Add("x ... ok\nok\nFAIL:\nERROR: y\n", "x")
	f.Fuzz(func(t *testing.T, log, id string) {
		for _, format := range schema.TestLogs {
			got := Outcomes(format, log, []string{id})
			switch got[id] {
			case Passed, Failed, Error, Skipped, Missing:
			default:
				t.Fatalf("%s: outcome %q", format, got[id])
			}
			// An id found is in the log, up to the colour codes and control
			// characters pytest's reader drops.
			if got[id] != Missing && !strings.Contains(log, id) && !strings.Contains(clean(log), id) {
				t.Fatalf("%s: %q found in a log that does not hold it", format, id)
			}
		}
	})
}
