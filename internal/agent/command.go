package agent

import (
	"path"
	"strings"

	"github.com/actloop/actloop/pkg/schema"
)

// ClassifyCommand says what a shell command mostly does, for a
// remaining-length predictor: it splits cmd into simple commands (at
// newlines, ;, &&, || and |), names each by its program (past cd, variable
// assignments and wrappers such as timeout, env or sudo) and its flags, and
// returns the first kind present in the order submit, edit, test, run,
// search, vcs, read; other when none is. A heredoc or an output redirect to
// a file counts as an edit. It never fails: text that is not shell is
// other.
func ClassifyCommand(cmd string) schema.CommandKind {
	if strings.Contains(cmd, SubmitMarker) || strings.Contains(cmd, LegacySubmitMarker) {
		return schema.CommandSubmit
	}
	seen := map[schema.CommandKind]bool{}
	if writesFile(cmd) {
		seen[schema.CommandEdit] = true
	}
	for _, simple := range splitSimple(cmd) {
		seen[classifySimple(strings.Fields(simple))] = true
	}
	for _, k := range []schema.CommandKind{schema.CommandEdit, schema.CommandTest, schema.CommandRun,
		schema.CommandSearch, schema.CommandVCS, schema.CommandRead} {
		if seen[k] {
			return k
		}
	}
	return schema.CommandOther
}

// splitSimple cuts cmd at newlines and the shell's list and pipe
// operators. Quotes are not parsed: a quoted operator splits too, which a
// classification can afford.
func splitSimple(cmd string) []string {
	return strings.FieldsFunc(strings.NewReplacer("&&", "\n", "||", "\n").Replace(cmd), func(r rune) bool {
		return r == '\n' || r == ';' || r == '|' || r == '&'
	})
}

// writesFile reports a heredoc or an output redirect to anything but
// /dev/null or a file descriptor.
func writesFile(cmd string) bool {
	if strings.Contains(cmd, "<<") {
		return true
	}
	for i := 0; i < len(cmd); i++ {
		if cmd[i] != '>' {
			continue
		}
		if i > 0 && (cmd[i-1] == '2' || cmd[i-1] == '&') && (i < 2 || cmd[i-2] == ' ') {
			continue // 2>… or &>…: output we are not looking at
		}
		rest := strings.TrimLeft(cmd[i+1:], "> ")
		if strings.HasPrefix(rest, "&") || strings.HasPrefix(rest, "/dev/null") || rest == "" {
			i++
			continue
		}
		return true
	}
	return false
}

// wrappers run the command that follows them.
var wrappers = map[string]bool{"timeout": true, "env": true, "sudo": true, "time": true, "nice": true, "xargs": true,
	"command": true, "exec": true, "nohup": true, "stdbuf": true}

var (
	testPrograms   = map[string]bool{"pytest": true, "py.test": true, "tox": true, "nosetests": true, "nox": true, "runtests.py": true, "unittest": true}
	runPrograms    = map[string]bool{"python": true, "python3": true, "python2": true, "node": true, "ruby": true, "perl": true, "java": true, "bash": true, "sh": true, "make": true, "go": true, "cargo": true, "npm": true, "npx": true, "yarn": true, "pip": true, "pip3": true, "mvn": true, "gradle": true}
	searchPrograms = map[string]bool{"grep": true, "egrep": true, "fgrep": true, "rg": true, "ag": true, "ack": true, "git-grep": true}
	readPrograms   = map[string]bool{"cat": true, "head": true, "tail": true, "less": true, "more": true, "nl": true, "ls": true, "find": true, "tree": true, "wc": true, "file": true, "stat": true, "pwd": true, "echo": true, "diff": true, "awk": true}
	editPrograms   = map[string]bool{"patch": true, "mv": true, "cp": true, "rm": true, "touch": true, "mkdir": true, "tee": true, "truncate": true, "ed": true}
)

// classifySimple names one simple command by its words.
func classifySimple(w []string) schema.CommandKind {
	for len(w) > 0 && (wrappers[w[0]] || strings.Contains(w[0], "=") || w[0] == "cd" ||
		(len(w[0]) > 0 && w[0][0] == '-') || isNumber(w[0])) {
		if w[0] == "cd" && len(w) > 1 {
			w = w[1:] // its directory
		}
		w = w[1:]
	}
	if len(w) == 0 {
		return schema.CommandOther
	}
	prog := path.Base(w[0])
	args := w[1:]
	has := func(s ...string) bool {
		for _, a := range args {
			for _, x := range s {
				if a == x || strings.HasPrefix(a, x) {
					return true
				}
			}
		}
		return false
	}
	switch {
	case testPrograms[prog] || strings.HasPrefix(prog, "test_") || strings.HasSuffix(prog, "_test.py"):
		return schema.CommandTest
	case (prog == "python" || prog == "python3") && has("pytest", "unittest", "tox", "nose"):
		return schema.CommandTest
	case (prog == "go" || prog == "cargo" || prog == "npm" || prog == "yarn" || prog == "make" || prog == "mvn" ||
		prog == "gradle") && has("test", "check"):
		return schema.CommandTest
	case prog == "sed" && has("-i"), prog == "perl" && has("-i", "-pi"), editPrograms[prog]:
		return schema.CommandEdit
	case prog == "git" && has("grep"):
		return schema.CommandSearch
	case prog == "git" && has("apply", "checkout", "restore", "stash", "reset"):
		return schema.CommandEdit
	case prog == "git":
		return schema.CommandVCS
	case searchPrograms[prog]:
		return schema.CommandSearch
	case runPrograms[prog]:
		return schema.CommandRun
	case readPrograms[prog] || prog == "sed":
		return schema.CommandRead
	}
	return schema.CommandOther
}

func isNumber(s string) bool {
	for _, r := range s {
		if (r < '0' || r > '9') && r != '.' && r != 's' && r != 'm' {
			return false
		}
	}
	return s != ""
}
