// Package testlog reads per-test outcomes out of an eval's output and scores
// them against the tests a sample lists, as SWE-bench's harness does: the
// parsers of swebench/harness/log_parsers/python.py (parse_log_pytest,
// parse_log_pytest_v2, parse_log_django, parse_log_sympy) for the lines, and
// swebench/harness/grading.py for the verdict.
package testlog

import (
	"regexp"
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

// Score reads the eval's output in tests' format and returns the reward and
// every listed test's outcome. The reward is 1 when no listed test failed,
// errored or is missing; skipped tests do not count either way, as in
// SWE-bench's grading (a test neither passed nor failed is left out).
func Score(tests schema.Tests, output string) (reward float64, outcomes map[string]string) {
	ids := append(append([]string{}, tests.FailToPass...), tests.PassToPass...)
	outcomes = Outcomes(tests.Format, output, ids)
	for _, o := range outcomes {
		if o == Failed || o == Error || o == Missing {
			return 0, outcomes
		}
	}
	return 1, outcomes
}

// Outcomes gives each of ids its outcome in log, read in format (a
// schema.TestLog* name; "" is pytest), or Missing.
func Outcomes(format, log string, ids []string) map[string]string {
	switch format {
	case schema.TestLogDjango:
		return lookup(ParseDjango(log), ids)
	case schema.TestLogSympy:
		return lookup(ParseSympy(log), ids)
	default:
		return PytestOutcomes(ParsePytest(log), ids)
	}
}

func lookup(found map[string]string, ids []string) map[string]string {
	out := make(map[string]string, len(ids))
	for _, id := range ids {
		if o, ok := found[id]; ok {
			out[id] = o
		} else {
			out[id] = Missing
		}
	}
	return out
}

// Filter returns an extended regular expression (grep -E) that keeps every
// line of an eval's output that format's parser reads, so a long test run
// fits in the sandbox's output cap.
func Filter(format string) string {
	switch format {
	case schema.TestLogDjango:
		return ` \.\.\. |^(FAIL|ERROR):|^[[:space:]]*ok|--version is equivalent to version`
	case schema.TestLogSympy:
		return `^[[:space:]]*test_|_* .*\.py:.* _*`
	default:
		return `(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)|short test summary info`
	}
}

// pytestStatus maps the status words of pytest's result lines to outcomes.
// XFAIL counts as passed (SWE-bench's test_passed); XPASS, a test expected
// to fail that passed, is reported by pytest's strict mode as a failure and
// counts as one here.
var pytestStatus = map[string]string{
	"PASSED": Passed, "XFAIL": Passed, "FAILED": Failed, "XPASS": Failed, "ERROR": Error, "SKIPPED": Skipped,
}

// Line is one pytest result line: a status and the test it is about.
type Line struct {
	Status string // an outcome: Passed, Failed, Error or Skipped
	Rest   string // the test id, possibly followed by " - " and a message
}

var (
	// ansi matches terminal colour codes, as parse_log_pytest_v2 strips them.
	ansi = regexp.MustCompile(`\x1b?\[[0-9;]*m`)
	// testFirst is pytest -v's "<id> STATUS [ 42%]" line.
	testFirst = regexp.MustCompile(`^(\S+)\s+(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)(\s|$)`)
	// skipCount starts a SKIPPED summary line about a count, not a test.
	skipCount = regexp.MustCompile(`^\[\d+\]`)
	// summaryHeader starts pytest's short test summary.
	summaryHeader = regexp.MustCompile(`^=+ short test summary info =+$`)
)

// ParsePytest returns the result lines of a pytest log in order: -rA
// summary lines ("STATUS <id>[ - message]") and -v lines ("<id> STATUS"),
// with colour codes and control characters removed. Where the log holds
// pytest's "short test summary info" header, only the lines after the last
// one are read: output the code under test printed earlier cannot pose as a
// result. Unlike SWE-bench's parse_log_pytest, which takes one
// whitespace-separated word as the test id, a summary line keeps the rest of
// the line, so a test id with a space in its parameters ("test_x[a b]") is
// matched whole by PytestOutcomes.
func ParsePytest(log string) []Line {
	lines := strings.Split(log, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if summaryHeader.MatchString(clean(lines[i])) {
			lines = lines[i+1:]
			break
		}
	}
	var out []Line
	for _, line := range lines {
		line = clean(line)
		if word, rest, ok := strings.Cut(line, " "); ok {
			rest = strings.TrimSpace(rest)
			if st, known := pytestStatus[word]; known && rest != "" {
				if !(st == Skipped && skipCount.MatchString(rest)) {
					out = append(out, Line{Status: st, Rest: rest})
				}
				continue
			}
		}
		if m := testFirst.FindStringSubmatch(line); m != nil {
			out = append(out, Line{Status: pytestStatus[m[2]], Rest: m[1]})
		}
	}
	return out
}

// clean drops colour codes and control characters from a line.
func clean(line string) string {
	line = ansi.ReplaceAllString(line, "")
	return strings.Map(func(r rune) rune {
		if r < 32 && r != '\t' {
			return -1
		}
		return r
	}, line)
}

// PytestOutcomes gives each of ids its outcome in lines: the status of the
// last line about it (a line is about id when its rest is id, or id followed
// by " - " and pytest's message), or Missing.
func PytestOutcomes(lines []Line, ids []string) map[string]string {
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

// djangoPass are the endings of a passing test's line in Django's runner
// at --verbosity 2 ("test_x (app.tests.T) ... ok").
var djangoPass = []string{" ... ok", " ... OK", " ...  OK"}

// ParseDjango reads the output of Django's ./tests/runtests.py --verbosity
// 2, as parse_log_django does: "<id> ... ok|skipped|FAIL|ERROR" lines,
// "FAIL: <id>" and "ERROR: <id>" headers, and a lone "ok" after a test whose
// line other output interrupted. Test ids are Django's, e.g.
// "test_add (calc.tests.CalcTests)".
func ParseDjango(log string) map[string]string {
	out := map[string]string{}
	prev := ""
	for line := range strings.Lines(log) {
		line = strings.TrimSpace(line)
		if strings.Contains(line, "--version is equivalent to version") {
			out["--version is equivalent to version"] = Passed
		}
		if before, _, ok := strings.Cut(line, " ... "); ok {
			prev = before
		}
		for _, suffix := range djangoPass {
			if strings.HasSuffix(line, suffix) {
				// django__django-7188: a migration's output precedes the
				// test on its line.
				if strings.HasPrefix(line, "Applying sites.0002_alter_domain_unique...test_no_migrations") {
					_, line, _ = strings.Cut(line, "...")
					line = strings.TrimSpace(line)
				}
				out[strings.TrimSuffix(line, suffix)] = Passed
				break
			}
		}
		if before, _, ok := strings.Cut(line, " ... skipped"); ok {
			out[before] = Skipped
		}
		if test, ok := strings.CutSuffix(line, " ... FAIL"); ok {
			out[firstOf(test, " ... FAIL")] = Failed
		}
		if test, ok := strings.CutSuffix(line, " ... ERROR"); ok {
			out[firstOf(test, " ... ERROR")] = Error
		}
		for _, h := range []struct{ prefix, status string }{{"FAIL:", Failed}, {"ERROR:", Error}} {
			if strings.HasPrefix(line, h.prefix) {
				if f := strings.Fields(line); len(f) > 1 {
					out[f[1]] = h.status
				}
			}
		}
		if strings.HasPrefix(line, "ok") && prev != "" {
			out[prev] = Passed
		}
	}
	for _, in := range djangoInterrupted {
		if !strings.Contains(log, in.literal) { // spares the regexp's scan of the whole log
			continue
		}
		for _, m := range in.re.FindAllStringSubmatch(log, -1) {
			out[m[1]] = Passed
		}
	}
	return out
}

// djangoInterrupted are parse_log_django's passing tests whose "ok" a long
// message pushed to the next line.
var djangoInterrupted = []struct {
	literal string // in every match
	re      *regexp.Regexp
}{
	{"Testing against Django installed in", regexp.MustCompile(`(?m)^(.*?)\s\.\.\.\sTesting\ against\ Django\ installed\ in\ ((?s:.*?))\ silenced\)\.\nok$`)},
	{"Internal Server Error: /", regexp.MustCompile(`(?m)^(.*?)\s\.\.\.\sInternal\ Server\ Error:\ \/(.*)\/\nok$`)},
	{"System check identified no issues (0 silenced)\nok", regexp.MustCompile(`(?m)^(.*?)\s\.\.\.\sSystem check identified no issues \(0 silenced\)\nok$`)},
}

// firstOf returns s up to the first sep, as Python's s.split(sep)[0].
func firstOf(s, sep string) string {
	before, _, _ := strings.Cut(s, sep)
	return before
}

// sympyFailure is the header of a failure in sympy's bin/test report:
// "____ sympy/core/tests/test_x.py:test_y ____".
var sympyFailure = regexp.MustCompile(`(_*) (.*)\.py:(.*) (_*)`)

// ParseSympy reads the output of sympy's bin/test -C --verbose, as
// parse_log_sympy does: "test_x ok", "test_x F", "test_x E" lines, and
// failure headers (which name the test by file, "path.py:test_x").
func ParseSympy(log string) map[string]string {
	out := map[string]string{}
	for line := range strings.Lines(log) {
		for _, m := range sympyFailure.FindAllStringSubmatch(line, -1) {
			out[m[2]+".py:"+m[3]] = Failed
		}
	}
	for line := range strings.Lines(log) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "test_") {
			continue
		}
		test := strings.Fields(line)[0]
		switch {
		case strings.HasSuffix(line, " E"):
			out[test] = Error
		case strings.HasSuffix(line, " F"):
			out[test] = Failed
		case strings.HasSuffix(line, " ok"):
			out[test] = Passed
		}
	}
	return out
}
