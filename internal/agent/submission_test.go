package agent

import (
	"strings"
	"testing"
)

func TestSubmission(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		submitted bool
		text      string
	}{
		{"marker and diff", "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\ndiff --git a/x b/x\n+y\n", true, "diff --git a/x b/x\n+y\n"},
		{"legacy marker", "MINI_SWE_AGENT_FINAL_OUTPUT\nanswer", true, "answer"},
		{"marker only", "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", true, ""},
		{"marker and newline", "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n", true, ""},
		{"leading blank lines and spaces", "\n\n  \t COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\nok\n", true, "ok\n"},
		{"marker with trailing spaces", "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT   \t\nok", true, "ok"},
		{"legacy marker with trailing spaces", "MINI_SWE_AGENT_FINAL_OUTPUT  \nok", true, "ok"},
		{"CRLF after marker", "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\r\nok\r\n", true, "ok\r\n"},
		{"lone CR ends the first line, as in Python splitlines", "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\rok", true, "ok"},
		{"remaining lines are kept verbatim", "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n\n  a\n\nb  \n", true, "\n  a\n\nb  \n"},
		{"marker not on first line", "warning: x\nCOMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\ndiff", false, ""},
		{"marker inside first line", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n", false, ""},
		{"marker with suffix", "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUTS\n", false, ""},
		{"lower case", "complete_task_and_submit_final_output\n", false, ""},
		{"empty", "", false, ""},
		{"ordinary output", "total 0\n", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			submitted, text := Submission(tt.in)
			if submitted != tt.submitted || text != tt.text {
				t.Fatalf("Submission(%q) = %v, %q; want %v, %q", tt.in, submitted, text, tt.submitted, tt.text)
			}
		})
	}
}

func FuzzSubmission(f *testing.F) {
	for _, s := range []string{
		"",
		"COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\ndiff\n",
		"  \nMINI_SWE_AGENT_FINAL_OUTPUT  \r\nx",
		"x\nCOMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT",
		"COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\u2028x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		submitted, text := Submission(in)
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
		// Whatever follows a marker line comes back byte for byte.
		for _, marker := range []string{SubmitMarker, LegacySubmitMarker} {
			ok, got := Submission(marker + "\n" + in)
			if !ok || got != in {
				t.Fatalf("Submission(%s + newline + %q) = %v, %q; want true and the input", marker, in, ok, got)
			}
		}
	})
}
