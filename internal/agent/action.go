package agent

import (
	"fmt"
	"regexp"
	"strings"
)

// actionRe is mini-swe-agent's action pattern (re.findall with re.DOTALL).
// RE2's leftmost-first submatch semantics give the same matches as Python's
// backtracking here. One difference: RE2's \s is ASCII whitespace, Python's is
// Unicode, so a no-break space after ```bash does not open a block here.
var actionRe = regexp.MustCompile("(?s)```bash\\s*\\n(.*?)\\n```")

// FormatError reports a model turn that holds no single runnable action. The
// rollout answers it with Config.FormatErrorFor and goes on; it is not
// terminal.
type FormatError struct {
	// Actions are the contents of every ```bash block found, unstripped.
	Actions []string
	// Reason is set when exactly one block was found but rejected.
	Reason string
}

func (e *FormatError) Error() string {
	if e.Reason != "" {
		return "format error: " + e.Reason
	}
	return fmt.Sprintf("format error: found %d actions, want exactly 1", len(e.Actions))
}

// ParseAction returns the one shell command in a model turn, applying
// mini-swe-agent's rule: exactly one ```bash block, whose content, with
// surrounding whitespace trimmed, is the action. Zero or several blocks give a
// *FormatError.
//
// Two departures from mini-swe-agent, both about commands it would run and
// that cannot do what the model meant:
//   - CRLF line endings are turned into LF before matching. Python's pattern
//     already accepts a CRLF fence, but kept the \r inside multi-line
//     commands, where bash reads it as part of a word ("ls\r: not found").
//   - An empty or whitespace-only block is a *FormatError with a Reason;
//     running nothing would cost a sandbox call to tell the model nothing.
func ParseAction(output string) (string, error) {
	return parseAction(actionRe, output)
}

// ParseAction is the package's ParseAction with c's ActionRegex. An
// ActionRegex that does not compile (which Validate reports) is a
// *FormatError naming it, so the rollout goes on and the cause is visible.
func (c Config) ParseAction(output string) (string, error) {
	re, err := compileActionRegex(c.ActionRegex)
	if err != nil {
		return "", &FormatError{Reason: err.Error()}
	}
	return parseAction(re, output)
}

func parseAction(re *regexp.Regexp, output string) (string, error) {
	output = strings.ReplaceAll(output, "\r\n", "\n")
	matches := re.FindAllStringSubmatch(output, -1)
	actions := make([]string, 0, len(matches))
	for _, m := range matches {
		actions = append(actions, m[len(m)-1]) // the group, or the whole match without one
	}
	if len(actions) != 1 {
		return "", &FormatError{Actions: actions}
	}
	action := strings.TrimSpace(actions[0])
	if action == "" {
		return "", &FormatError{Actions: actions, Reason: "the command is empty"}
	}
	return action, nil
}
