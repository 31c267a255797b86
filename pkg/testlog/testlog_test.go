package testlog

import (
	"maps"
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
	got := Outcomes(ParsePytest(sampleLog), ids)
	want := map[string]string{"tests/test_a.py::test_one": Passed, "tests/test_a.py::test_two": Failed,
		"tests/test_a.py::test_p[a b]": Passed, "tests/test_b.py::test_setup": Error, "tests/test_a.py::test_known": Passed,
		"tests/test_a.py::test_dash - x": Passed, "tests/test_a.py::indented": Missing, "tests/test_a.py::absent": Missing}
	if !maps.Equal(got, want) {
		t.Errorf("Outcomes() = %v\nwant %v", got, want)
	}
}

func TestLastLineWins(t *testing.T) {
	got := Outcomes(ParsePytest("FAILED t::a - x\nPASSED t::a\r\n"), []string{"t::a"})
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
		got := Outcomes(lines, []string{id})
		if len(got) != 1 {
			t.Fatalf("Outcomes() = %v, want one entry", got)
		}
		switch got[id] {
		case Passed, Failed, Error, Skipped, Missing:
		default:
			t.Fatalf("outcome %q", got[id])
		}
		if got[id] != Missing && !strings.Contains(log, id) {
			t.Fatalf("%q found in a log that does not hold it", id)
		}
	})
}
