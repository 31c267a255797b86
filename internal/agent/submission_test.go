package agent

import (
	"strings"
	"testing"
)

func TestHasFinished(t *testing.T) {
	tests := []struct {
		name       string
		in         string
		returnCode int
		submitted  bool
		text       string
	}{
		{"marker and diff", "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\ndiff --git a/x b/x\n+y\n", 0, true, "diff --git a/x b/x\n+y\n"},
		{"legacy marker", "MINI_SWE_AGENT_FINAL_OUTPUT\nanswer", 0, true, "answer"},
		{"marker only", "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", 0, true, ""},
		{"marker and newline", "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n", 0, true, ""},
		{"leading blank lines and spaces", "\n\n  \t COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\nok\n", 0, true, "ok\n"},
		{"marker with trailing spaces", "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT   \t\nok", 0, true, "ok"},
		{"legacy marker with trailing spaces", "MINI_SWE_AGENT_FINAL_OUTPUT  \nok", 0, true, "ok"},
		{"CRLF after marker", "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\r\nok\r\n", 0, true, "ok\r\n"},
		{"lone CR ends the first line, as in Python splitlines", "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\rok", 0, true, "ok"},
		{"remaining lines are kept verbatim", "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n\n  a\n\nb  \n", 0, true, "\n  a\n\nb  \n"},
		// Python's str.strip also strips \x1c-\x1f; \x1f is no line boundary.
		{"unit separator before the marker is whitespace", "\x1fCOMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\nok", 0, true, "ok"},
		{"unit separator after the marker is whitespace", "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\x1f\nok", 0, true, "ok"},
		{"file separator before the marker is stripped, not a line", "\x1c\x1dCOMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\x1eok", 0, true, "ok"},
		{"marker not on first line", "warning: x\nCOMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\ndiff", 0, false, ""},
		{"marker inside first line", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n", 0, false, ""},
		{"marker with suffix", "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUTS\n", 0, false, ""},
		{"lower case", "complete_task_and_submit_final_output\n", 0, false, ""},
		{"empty", "", 0, false, ""},
		{"ordinary output", "total 0\n", 0, false, ""},
		// mini-swe-agent v1.17.4+: a failed command does not submit; its
		// output goes back as an observation.
		{"failed git diff after the marker", "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\nfatal: not a git repository\n", 128, false, ""},
		{"failed command, legacy marker", "MINI_SWE_AGENT_FINAL_OUTPUT\ndiff\n", 1, false, ""},
		{"negative exit code (killed)", "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n", -9, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			submitted, text := HasFinished(tt.in, tt.returnCode)
			if submitted != tt.submitted || text != tt.text {
				t.Fatalf("HasFinished(%q, %d) = %v, %q; want %v, %q", tt.in, tt.returnCode, submitted, text, tt.submitted, tt.text)
			}
			if tt.returnCode == 0 {
				if s, txt := Submission(tt.in); s != submitted || txt != text {
					t.Fatalf("Submission(%q) = %v, %q; want HasFinished's %v, %q", tt.in, s, txt, submitted, text)
				}
			}
		})
	}
}

func FuzzHasFinished(f *testing.F) {
	for _, s := range []string{
		"",
		"COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\ndiff\n",
		"  \nMINI_SWE_AGENT_FINAL_OUTPUT  \r\nx",
		"x\nCOMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT",
		"COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\u2028x",
		"\x1cCOMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\x1f\x1ex",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		submitted, text := HasFinished(in, 0)
		if !submitted && text != "" {
			t.Fatalf("not submitted but text %q", text)
		}
		if submitted {
			// The text is what follows the first line, untouched.
			if !strings.HasSuffix(in, text) {
				t.Fatalf("text %q is not a suffix of %q", text, in)
			}
			if !strings.Contains(in, SubmitMarker) && !strings.Contains(in, LegacySubmitMarker) {
				t.Fatalf("submitted without a marker: %q", in)
			}
		}
		if s, txt := HasFinished(in, 1); s || txt != "" {
			t.Fatalf("HasFinished(%q, 1) = %v, %q; a failed command never submits", in, s, txt)
		}
		// Whatever follows a marker line comes back byte for byte.
		for _, marker := range []string{SubmitMarker, LegacySubmitMarker} {
			ok, got := HasFinished(marker+"\n"+in, 0)
			if !ok || got != in {
				t.Fatalf("HasFinished(%s + newline + %q) = %v, %q; want true and the input", marker, in, ok, got)
			}
		}
	})
}
