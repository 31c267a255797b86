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

// Submission reports whether a command's output is a submission, and its
// text: everything after the first line, byte for byte (a patch keeps its
// final newline). As in mini-swe-agent, leading whitespace is dropped first,
// so blank lines before the marker are fine, and the first line is trimmed
// before comparing, so trailing spaces or a \r are too.
func Submission(output string) (submitted bool, text string) {
	output = strings.TrimLeftFunc(output, unicode.IsSpace)
	first, rest := cutLine(output)
	switch strings.TrimSpace(first) {
	case SubmitMarker, LegacySubmitMarker:
		return true, rest
	}
	return false, ""
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
