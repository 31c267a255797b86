// Package testlog reads per-test outcomes out of an eval's output and scores
// them against the tests a sample lists, as SWE-bench's harness does:
// parse_log_pytest in swebench/harness/log_parsers/python.py for the lines,
// and swebench/harness/grading.py for the verdict.
package testlog

import (
	"strings"

	"github.com/actloop/actloop/pkg/schema"
)

// Outcomes of a listed test in a result. Missing: the eval's output does
// not mention the test (it did not run, or the output was cut).
const (
	Passed  = "PASSED"
	Failed  = "FAILED"
	Error   = "ERROR"
	Skipped = "SKIPPED"
	Missing = "MISSING"
)

// pytestStatus maps the status words of pytest -rA summary lines to
// outcomes. XFAIL counts as passed (SWE-bench's test_passed); XPASS, a test
// expected to fail that passed, is reported by pytest's strict mode as a
// failure and counts as one here.
var pytestStatus = map[string]string{
	"PASSED": Passed, "XFAIL": Passed, "FAILED": Failed, "XPASS": Failed, "ERROR": Error, "SKIPPED": Skipped,
}

// Line is one summary line: a status word and the rest of the line.
type Line struct {
	Status string // an outcome: Passed, Failed, Error or Skipped
	Rest   string // the test id, possibly followed by " - " and a message
}

// ParsePytest returns the pytest -rA summary lines of log in order: lines
// that start with a status word and a space. Unlike SWE-bench's
// parse_log_pytest, which takes the second whitespace-separated word as the
// test id, it keeps the rest of the line, so a test id with a space in its
// parameters ("test_x[a b]") is matched whole by Outcomes.
func ParsePytest(log string) []Line {
	var out []Line
	for line := range strings.Lines(log) {
		line = strings.TrimRight(line, "\r\n")
		word, rest, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if st, known := pytestStatus[word]; known && strings.TrimSpace(rest) != "" {
			out = append(out, Line{Status: st, Rest: strings.TrimSpace(rest)})
		}
	}
	return out
}

// Outcomes gives each of ids its outcome in lines: the status of the last
// line about it (a line is about id when its rest is id, or id followed by
// " - " and pytest's message), or Missing.
func Outcomes(lines []Line, ids []string) map[string]string {
	out := make(map[string]string, len(ids))
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		out[id] = Missing
		want[id] = true
	}
	for _, l := range lines {
		if want[l.Rest] {
			out[l.Rest] = l.Status
			continue
		}
		// A message follows the id: try each " - " from the left, so an id
		// that itself holds " - " still matches.
		for i := 0; ; {
			j := strings.Index(l.Rest[i:], " - ")
			if j < 0 {
				break
			}
			if id := l.Rest[:i+j]; want[id] {
				out[id] = l.Status
				break
			}
			i += j + 3
		}
	}
	return out
}

// Score reads the eval's output in tests' format and returns the reward and
// every listed test's outcome. The reward is 1 when no listed test failed,
// errored or is missing; skipped tests do not count either way, as in
// SWE-bench's grading (a test neither passed nor failed is left out).
func Score(tests schema.Tests, output string) (reward float64, outcomes map[string]string) {
	ids := append(append([]string{}, tests.FailToPass...), tests.PassToPass...)
	outcomes = Outcomes(ParsePytest(output), ids) // TestLogPytest is the only format
	for _, o := range outcomes {
		if o == Failed || o == Error || o == Missing {
			return 0, outcomes
		}
	}
	return 1, outcomes
}
