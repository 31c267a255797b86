package agent

import (
	"strings"
	"unicode"
)

// Submission markers: the first line of a command's output that ends the
// trajectory. The second is mini-swe-agent's older spelling, still accepted
// because models trained on it print it.
const (
	SubmitMarker       = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
	LegacySubmitMarker = "MINI_SWE_AGENT_FINAL_OUTPUT"
)

// HasFinished is mini-swe-agent's has_finished (v1.17.5, agents/default.py):
// it reports whether a command's output and exit code submit, and the
// submission's text, everything after the first line, byte for byte (a
// patch keeps its final newline). Leading whitespace is dropped first, so
// blank lines before the marker are fine, and the first line is trimmed
// before comparing, so trailing spaces or a \r are too (whitespace as
// Python's str.strip sees it). A command that printed the marker but
// exited non-zero does not submit (since v1.17.4): its output goes back to
// the model as an ordinary observation, so it sees the error and can try
// again, where a failing git diff would otherwise submit git's error text.
func HasFinished(output string, returnCode int) (submitted bool, text string) {
	if returnCode != 0 {
		return false, ""
	}
	output = strings.TrimLeftFunc(output, pyIsSpace)
	first, rest := cutLine(output)
	switch strings.TrimFunc(first, pyIsSpace) {
	case SubmitMarker, LegacySubmitMarker:
		return true, rest
	}
	return false, ""
}

// Submission is HasFinished for a command that exited 0: it ignores the
// exit code, which mini-swe-agent no longer does.
//
// Deprecated: use HasFinished with the command's exit code.
func Submission(output string) (submitted bool, text string) {
	return HasFinished(output, 0)
}

// pyIsSpace is Python's str.isspace for one character, which str.strip and
// str.lstrip use: unicode.IsSpace and the separators \x1c to \x1f.
func pyIsSpace(r rune) bool {
	return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f
}

// cutLine splits s after its first line, at the line boundaries of Python's
// str.splitlines, which mini-swe-agent uses: \n, \r\n, \r, \v, \f, \x1c,
// \x1d, \x1e, \x85, \u2028, \u2029. A lone \r matters: progress bars print it,
// and "MARKER\r" then output is a submission there.
func cutLine(s string) (line, rest string) {
	for i, r := range s {
		switch r {
		case '\r':
			if strings.HasPrefix(s[i:], "\r\n") {
				return s[:i], s[i+2:]
			}
			return s[:i], s[i+1:]
		case '\n', '\v', '\f', '\x1c', '\x1d', '\x1e', '\u0085', '\u2028', '\u2029':
			return s[:i], s[i+len(string(r)):]
		}
	}
	return s, ""
}
