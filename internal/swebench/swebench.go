package swebench

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	"github.com/actloop/actloop/internal/testlog"
	"github.com/actloop/actloop/pkg/schema"
)

// Instance is one row of a SWE-bench-style dataset.
type Instance struct {
	InstanceID       string   `json:"instance_id"`
	Repo             string   `json:"repo"`
	BaseCommit       string   `json:"base_commit"`
	ProblemStatement string   `json:"problem_statement"`
	FailToPass       TestList `json:"FAIL_TO_PASS"`
	PassToPass       TestList `json:"PASS_TO_PASS"`
	Image            string   `json:"image,omitempty"`
	Version          string   `json:"version,omitempty"`
	// EnvironmentSetupCommit is kept in the sample's metadata; the image is
	// expected to be built at it already.
	EnvironmentSetupCommit string `json:"environment_setup_commit,omitempty"`
	TestPatch              string `json:"test_patch,omitempty"`
	// TestCmd (actloop's) overrides Options.TestCommand for this row.
	TestCmd string `json:"test_cmd,omitempty"`
}

// TestList is a list of test ids. It decodes from a JSON list or, as
// SWE-bench's datasets hold FAIL_TO_PASS and PASS_TO_PASS, from a string
// holding a JSON list.
type TestList []string

// UnmarshalJSON implements json.Unmarshaler.
func (l *TestList) UnmarshalJSON(b []byte) error {
	var list []string
	if err := json.Unmarshal(b, &list); err == nil {
		*l = list
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New("want a list of test ids or a string holding a JSON list")
	}
	if err := json.Unmarshal([]byte(s), &list); err != nil {
		return fmt.Errorf("string does not hold a JSON list of strings: %w", err)
	}
	*l = list
	return nil
}

// Options say how rows become samples.
type Options struct {
	// Backend is the samples' env backend; "" means schema.BackendLocal.
	Backend string
	// Workspace is the directory copied into a local sandbox, with {repo}
	// replaced by the row's repo with "/" as "__" (SWE-bench's spelling, e.g.
	// repos/{repo} → repos/astropy__astropy) and {instance_id} by its id.
	// Container backends ignore it: the image holds the repository.
	Workspace string
	// TestCommand runs the tests; the test files of test_patch (or, without
	// one, the test ids) are appended, and its output is read in the repo's
	// test log format (see SpecFor). "" means the repo's SWE-bench command.
	TestCommand string
	// Limits and Sampling are copied into every sample.
	Limits   schema.Limits
	Sampling schema.Sampling
}

// Test commands of SWE-bench's MAP_REPO_VERSION_TO_SPECS
// (swebench/harness/constants/python.py).
const (
	DefaultTestCommand   = "pytest -rA" // TEST_PYTEST, for every repository not listed in specs
	testAstropyPytest    = "pytest -rA -vv -o console_output_style=classic --tb=no"
	testDjango           = "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1"
	testDjangoNoParallel = "./tests/runtests.py --verbosity 2"
	testSeaborn          = "pytest --no-header -rA"
	testSphinx           = "tox --current-env -epy39 -v --"
	testSympy            = "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose"
)

// Spec is how a repository's tests run and report.
type Spec struct {
	TestCmd string
	Format  string // a schema.TestLog* name
}

// specs are the SWE-bench repositories whose test command or log parser
// (MAP_REPO_TO_PARSER_PY in swebench/harness/log_parsers/python.py) is not
// pytest's. The rest run DefaultTestCommand and are read as pytest.
var specs = map[string]Spec{
	"django/django":     {testDjango, schema.TestLogDjango},
	"mwaskom/seaborn":   {testSeaborn, schema.TestLogPytest},
	"sphinx-doc/sphinx": {testSphinx, schema.TestLogPytest},
	"sympy/sympy":       {testSympy, schema.TestLogSympy},
}

// SpecFor returns repo's test command and log format at version, as
// SWE-bench runs them.
func SpecFor(repo, version string) Spec {
	switch {
	case repo == "django/django" && version == "1.9":
		return Spec{testDjangoNoParallel, schema.TestLogDjango}
	case repo == "astropy/astropy" && slices.Contains([]string{"0.1", "0.2", "0.3", "0.4", "1.1", "1.2", "1.3"}, version):
		return Spec{testAstropyPytest, schema.TestLogPytest}
	}
	if s, ok := specs[repo]; ok {
		return s
	}
	return Spec{DefaultTestCommand, schema.TestLogPytest}
}

// RowError reports a malformed row: its line and field.
type RowError struct {
	Line  int
	Field string
	Err   error
}

func (e *RowError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("line %d: %v", e.Line, e.Err)
	}
	return fmt.Sprintf("line %d: %s: %v", e.Line, e.Field, e.Err)
}

func (e *RowError) Unwrap() error { return e.Err }

// MaxLineBytes bounds one row.
const MaxLineBytes = 4 << 20

var (
	commitRe = regexp.MustCompile(`^[0-9a-fA-F]{7,64}$`)
	repoRe   = regexp.MustCompile(`^[A-Za-z0-9._-]+/[A-Za-z0-9._-]+$`)
)

// Read decodes a dataset and returns the samples of its good rows and one
// *RowError per bad row (joined; nil when every row is good). Blank lines
// are skipped. A caller that publishes should refuse the whole file when
// err is not nil, so no row is silently dropped.
func Read(r io.Reader, opts Options) ([]schema.Sample, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxLineBytes)
	var out []schema.Sample
	var errs []error
	seen := map[string]int{}
	n := 0
	for sc.Scan() {
		n++
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		s, err := Row(line, n, opts)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if prev, dup := seen[s.ID]; dup {
			errs = append(errs, &RowError{Line: n, Field: "instance_id", Err: fmt.Errorf("%q repeats line %d", s.ID, prev)})
			continue
		}
		seen[s.ID] = n
		out = append(out, s)
	}
	switch err := sc.Err(); {
	case errors.Is(err, bufio.ErrTooLong):
		errs = append(errs, &RowError{Line: n + 1, Err: fmt.Errorf("longer than the limit of %d bytes for one row (swebench.MaxLineBytes); "+
			"the rows after it were not read", MaxLineBytes)})
	case err != nil:
		errs = append(errs, &RowError{Line: n + 1, Err: err})
	}
	return out, errors.Join(errs...)
}

// Row turns one JSONL row (line n, for errors) into a validated, normalized
// sample. Every problem is a *RowError naming the field.
func Row(line []byte, n int, opts Options) (schema.Sample, error) {
	// The test lists are decoded on their own, so their errors name them.
	var in struct {
		Instance
		FailToPass json.RawMessage `json:"FAIL_TO_PASS"`
		PassToPass json.RawMessage `json:"PASS_TO_PASS"`
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	if err := dec.Decode(&in); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			return schema.Sample{}, &RowError{Line: n, Field: strings.TrimPrefix(ute.Field, "Instance."), Err: fmt.Errorf("want %s, got JSON %s", ute.Type, ute.Value)}
		}
		return schema.Sample{}, &RowError{Line: n, Err: fmt.Errorf("not a JSON object: %w", err)}
	}
	if dec.More() {
		return schema.Sample{}, &RowError{Line: n, Err: errors.New("more than one JSON value on the line")}
	}
	fail := func(field, format string, a ...any) (schema.Sample, error) {
		return schema.Sample{}, &RowError{Line: n, Field: field, Err: fmt.Errorf(format, a...)}
	}
	for _, l := range []struct {
		field string
		raw   json.RawMessage
		dst   *TestList
	}{{"FAIL_TO_PASS", in.FailToPass, &in.Instance.FailToPass}, {"PASS_TO_PASS", in.PassToPass, &in.Instance.PassToPass}} {
		if len(l.raw) > 0 && string(l.raw) != "null" {
			if err := l.dst.UnmarshalJSON(l.raw); err != nil {
				return fail(l.field, "%v", err)
			}
		}
	}
	return sample(in.Instance, n, opts)
}

func sample(in Instance, n int, opts Options) (schema.Sample, error) {
	fail := func(field, format string, a ...any) (schema.Sample, error) {
		return schema.Sample{}, &RowError{Line: n, Field: field, Err: fmt.Errorf(format, a...)}
	}
	switch {
	case !schema.ValidID(in.InstanceID):
		return fail("instance_id", "must match %s, got %q", schema.IDPattern, clip(in.InstanceID))
	case !repoRe.MatchString(in.Repo):
		return fail("repo", "want owner/name, got %q", clip(in.Repo))
	case !commitRe.MatchString(in.BaseCommit):
		return fail("base_commit", "want a hex commit id, got %q", clip(in.BaseCommit))
	case strings.TrimSpace(in.ProblemStatement) == "":
		return fail("problem_statement", "missing")
	case len(in.FailToPass)+len(in.PassToPass) == 0:
		return fail("FAIL_TO_PASS", "no test in FAIL_TO_PASS or PASS_TO_PASS")
	}
	for _, l := range []struct {
		field string
		ids   []string
	}{{"FAIL_TO_PASS", in.FailToPass}, {"PASS_TO_PASS", in.PassToPass}} {
		for i, id := range l.ids {
			if strings.TrimSpace(id) == "" || strings.ContainsAny(id, "\n\r") {
				return fail(l.field, "test %d is empty or spans lines", i)
			}
		}
	}
	files, err := patchFiles(in.TestPatch)
	if err != nil {
		return fail("test_patch", "%v", err)
	}
	backend := opts.Backend
	if backend == "" {
		backend = schema.BackendLocal
	}
	spec := SpecFor(in.Repo, in.Version)
	if opts.TestCommand != "" {
		spec.TestCmd = opts.TestCommand
	}
	if in.TestCmd != "" {
		spec.TestCmd = in.TestCmd
	}
	meta, err := json.Marshal(map[string]string{"instance_id": in.InstanceID, "repo": in.Repo,
		"base_commit": in.BaseCommit, "version": in.Version, "environment_setup_commit": in.EnvironmentSetupCommit})
	if err != nil {
		return fail("", "metadata: %v", err)
	}
	s := schema.Sample{
		V: schema.Version, ID: in.InstanceID, Family: in.Repo, Task: in.ProblemStatement,
		Env: schema.Env{
			Backend:   backend,
			Image:     in.Image,
			Workspace: workspace(opts.Workspace, in),
			Setup:     []string{"git -c advice.detachedHead=false checkout -q " + in.BaseCommit},
			Eval:      evalScript(in, files, spec),
			Tests:     &schema.Tests{FailToPass: in.FailToPass, PassToPass: in.PassToPass, Format: spec.Format},
		},
		Limits: opts.Limits, Sampling: opts.Sampling, Metadata: meta,
	}
	if err := s.Validate(); err != nil {
		return fail("", "%v", err)
	}
	s.Normalize()
	return s, nil
}

func workspace(pattern string, in Instance) string {
	r := strings.NewReplacer("{repo}", strings.ReplaceAll(in.Repo, "/", "__"), "{instance_id}", in.InstanceID)
	return r.Replace(pattern)
}

// patchFiles lists the files a git-format patch touches, from its
// "diff --git a/X b/X" headers, in order, once each.
func patchFiles(patch string) ([]string, error) {
	var files []string
	seen := map[string]bool{}
	for line := range strings.Lines(patch) {
		rest, ok := strings.CutPrefix(line, "diff --git a/")
		if !ok {
			continue
		}
		rest = strings.TrimRight(rest, "\r\n")
		i := strings.Index(rest, " b/")
		if i <= 0 {
			return nil, fmt.Errorf("cannot read the file names of %q", clip(line))
		}
		for _, f := range []string{rest[:i], rest[i+3:]} {
			if f == "" || strings.HasPrefix(f, "/") || strings.Contains(f, "..") {
				return nil, fmt.Errorf("unsafe file name %q", clip(f))
			}
			if !seen[f] {
				seen[f] = true
				files = append(files, f)
			}
		}
	}
	if patch != "" && len(files) == 0 {
		return nil, errors.New("no \"diff --git\" header")
	}
	return files, nil
}

// nonTestExts are the test_patch files not passed to the test command:
// SWE-bench's NON_TEST_EXTS (swebench/harness/test_spec/python.py, get_test_directives).
var nonTestExts = []string{".json", ".png", "csv", ".txt", ".md", ".jpg", ".jpeg", ".pkl", ".yml", ".yaml", ".toml"}

// evalScript restores the test files to base_commit (a file that did not
// exist there is removed), so the agent's edits to them do not count, as
// SWE-bench's harness does; applies test_patch; runs the test command on
// SWE-bench's test directives (see directives); and prints the lines the
// format's parser reads (testlog.Filter).
func evalScript(in Instance, files []string, spec Spec) string {
	var b strings.Builder
	b.WriteString("set -o pipefail\n")
	for _, f := range files {
		q := quote(f)
		fmt.Fprintf(&b, "git checkout -q %s -- %s 2>/dev/null || rm -f -- %s\n", in.BaseCommit, q, q)
	}
	if in.TestPatch != "" {
		fmt.Fprintf(&b, "printf '%%s' %s | base64 -d | git apply --whitespace=nowarn - || { echo 'actloop: test_patch does not apply'; exit 2; }\n",
			quote(base64.StdEncoding.EncodeToString([]byte(in.TestPatch))))
	}
	b.WriteString(spec.TestCmd)
	for _, t := range directives(in, files, spec.Format) {
		b.WriteString(" " + quote(t))
	}
	fmt.Fprintf(&b, " 2>&1 | grep -E %s\nexit 0\n", quote(testlog.Filter(spec.Format)))
	return b.String()
}

// djangoID is a Django test id, "test_x (app.tests.T)"; newer Django
// versions print "test_x (app.tests.T.test_x)".
var djangoID = regexp.MustCompile(`^(\w+) \(([\w.]+)\)$`)

// directives are the test command's arguments: SWE-bench's
// get_test_directives (swebench/harness/test_spec/python.py), the files of
// test_patch that are not data, for Django as test modules
// ("tests/a/test_b.py" → "a.test_b"). Without test_patch: the listed test
// ids, which pytest takes as they are and Django as labels built from its
// ids; sympy's runner takes no id, so it runs everything.
func directives(in Instance, files []string, format string) []string {
	var out []string
	for _, f := range files {
		if slices.ContainsFunc(nonTestExts, func(ext string) bool { return strings.HasSuffix(f, ext) }) {
			continue
		}
		if format == schema.TestLogDjango {
			if !djangoTestFile(f) {
				continue
			}
			f = strings.TrimPrefix(strings.TrimSuffix(f, ".py"), "tests/")
			f = strings.ReplaceAll(f, "/", ".")
		}
		out = append(out, f)
	}
	if len(files) > 0 {
		return out
	}
	ids := append(append([]string{}, in.FailToPass...), in.PassToPass...)
	switch format {
	case schema.TestLogSympy:
		return nil
	case schema.TestLogDjango:
		seen := map[string]bool{}
		for _, id := range ids {
			m := djangoID.FindStringSubmatch(id)
			if m == nil {
				continue
			}
			label := m[2]
			if !strings.HasSuffix(label, "."+m[1]) {
				label += "." + m[1]
			}
			if !seen[label] {
				seen[label] = true
				out = append(out, label)
			}
		}
		return out
	}
	return ids
}

// djangoTestFile is SWE-bench's is_django_test_file.
func djangoTestFile(path string) bool {
	name := path[strings.LastIndex(path, "/")+1:]
	return name == "tests.py" || strings.HasPrefix(name, "test_") || strings.Contains(path, "/tests/") || strings.Contains(path, "/test_")
}

// quote makes s one bash word.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
