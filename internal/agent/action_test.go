package agent

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestParseAction(t *testing.T) {
	tests := []struct {
		name       string
		in         string
		want       string
		wantErr    bool
		wantCount  int  // len(FormatError.Actions) when wantErr
		wantReason bool // FormatError.Reason set when wantErr
	}{
		{
			name: "one block",
			in:   "THOUGHT: list files.\n\n```bash\nls -la\n```\n",
			want: "ls -la",
		},
		{
			name: "one block at end of text without newline",
			in:   "```bash\nls\n```",
			want: "ls",
		},
		{
			name: "multi-line command is kept whole",
			in:   "```bash\ncd /repo && \\\n  make test\n```",
			want: "cd /repo && \\\n  make test",
		},
		{
			name: "surrounding whitespace inside the block is trimmed",
			in:   "```bash\n\n   ls   \n\n```",
			want: "ls",
		},
		{
			name:      "no block",
			in:        "I think we are done.",
			wantErr:   true,
			wantCount: 0,
		},
		{
			name:      "two blocks",
			in:        "```bash\nls\n```\nthen\n```bash\npwd\n```\n",
			wantErr:   true,
			wantCount: 2,
		},
		{
			name:      "sh fence is not an action",
			in:        "```sh\nls\n```",
			wantErr:   true,
			wantCount: 0,
		},
		{
			name:      "python fence is not an action",
			in:        "```python\nprint(1)\n```",
			wantErr:   true,
			wantCount: 0,
		},
		{
			name:      "plain fence is not an action",
			in:        "```\nls\n```",
			wantErr:   true,
			wantCount: 0,
		},
		{
			name:      "bashx is not bash",
			in:        "```bashx\nls\n```",
			wantErr:   true,
			wantCount: 0,
		},
		{
			name: "other fences beside one bash block do not count",
			in:   "```python\nprint(1)\n```\n```bash\npython x.py\n```\n",
			want: "python x.py",
		},
		{
			name: "trailing spaces after bash before the newline",
			in:   "```bash   \t\nls\n```",
			want: "ls",
		},
		{
			name:       "empty command",
			in:         "```bash\n\n```",
			wantErr:    true,
			wantCount:  1,
			wantReason: true,
		},
		{
			name:       "whitespace-only command",
			in:         "```bash\n  \t \n```",
			wantErr:    true,
			wantCount:  1,
			wantReason: true,
		},
		{
			// The closing fence needs a newline before it, so an empty block
			// written on two lines is no block at all (as in mini-swe-agent).
			name:      "fence right after the opening line",
			in:        "```bash\n```",
			wantErr:   true,
			wantCount: 0,
		},
		{
			name:      "fence closed on the command line",
			in:        "```bash\nls```",
			wantErr:   true,
			wantCount: 0,
		},
		{
			name:      "block without closing fence",
			in:        "```bash\nls -la\n",
			wantErr:   true,
			wantCount: 0,
		},
		{
			// CRLF is turned into LF before matching (documented on ParseAction).
			name: "CRLF line endings",
			in:   "THOUGHT: x\r\n\r\n```bash\r\nls -la\r\n```\r\n",
			want: "ls -la",
		},
		{
			name: "CRLF inside a multi-line command becomes LF",
			in:   "```bash\r\ncd /repo &&\r\nmake\r\n```\r\n",
			want: "cd /repo &&\nmake",
		},
		{
			name: "lone CR is kept",
			in:   "```bash\nprintf 'a\rb'\n```",
			want: "printf 'a\rb'",
		},
		{
			name: "nested backticks inside the command",
			in:   "```bash\necho `date` && x=$(echo ``) && echo 'a```b'\n```",
			want: "echo `date` && x=$(echo ``) && echo 'a```b'",
		},
		{
			// A fence at a line start inside the command ends the block early;
			// the rest is text. mini-swe-agent behaves the same, which is why
			// its format-error message suggests TRIPLEBACKTICKSBASH.
			name: "fence at line start inside a heredoc closes the block",
			in:   "```bash\ncat <<EOF\n```\nEOF\n```",
			want: "cat <<EOF",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseAction(tt.in)
			if !tt.wantErr {
				if err != nil {
					t.Fatalf("ParseAction() error = %v, want nil", err)
				}
				if got != tt.want {
					t.Fatalf("ParseAction() = %q, want %q", got, tt.want)
				}
				return
			}
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("ParseAction() error = %v (%T), want *FormatError", err, err)
			}
			if got != "" {
				t.Errorf("ParseAction() = %q with an error, want empty", got)
			}
			if len(fe.Actions) != tt.wantCount {
				t.Errorf("FormatError.Actions = %q, want %d of them", fe.Actions, tt.wantCount)
			}
			if (fe.Reason != "") != tt.wantReason {
				t.Errorf("FormatError.Reason = %q, want set: %v", fe.Reason, tt.wantReason)
			}
		})
	}
}

func TestParseActionReportsMatchesUnstripped(t *testing.T) {
	_, err := ParseAction("```bash\nls\n```\n```bash\n pwd \n```")
	var fe *FormatError
	if !errors.As(err, &fe) {
		t.Fatalf("error = %v, want *FormatError", err)
	}
	if want := []string{"ls", " pwd "}; !slices.Equal(fe.Actions, want) {
		t.Fatalf("Actions = %q, want %q", fe.Actions, want)
	}
}

func TestFormatErrorError(t *testing.T) {
	tests := []struct {
		name string
		err  *FormatError
		want string
	}{
		{"count", &FormatError{Actions: []string{"a", "b"}}, "format error: found 2 actions, want exactly 1"},
		{"none", &FormatError{}, "format error: found 0 actions, want exactly 1"},
		{"reason", &FormatError{Actions: []string{""}, Reason: "the command is empty"}, "format error: the command is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Fatalf("Error() = %q, want %q", got, tt.want)
			}
		})
	}
}

func FuzzParseAction(f *testing.F) {
	for _, s := range []string{
		"",
		"```bash\nls\n```",
		"```bash\n\n```",
		"```bash \r\nls\r\n```\r\n",
		"```bash\nls\n```\n```bash\npwd\n```",
		"```bash\necho `date`\n```",
		"```bash\n\u00a0x\u00a0\n```",
		"```sh\nls\n```",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		action, err := ParseAction(in)
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v (%T) is not a *FormatError", err, err)
			}
			if action != "" {
				t.Fatalf("action %q returned with an error", action)
			}
			return
		}
		if action == "" {
			t.Fatal("empty action without an error")
		}
		if action != strings.TrimSpace(action) {
			t.Fatalf("action %q has surrounding whitespace", action)
		}
		// ParseAction reads the input with CRLF turned into LF: the action is
		// part of that, and of the raw input when it holds no CRLF.
		if !strings.Contains(strings.ReplaceAll(in, "\r\n", "\n"), action) {
			t.Fatalf("action %q not in input %q", action, in)
		}
		if !strings.Contains(in, "\r\n") && !strings.Contains(in, action) {
			t.Fatalf("action %q not in input %q", action, in)
		}
	})
}

func TestConfigParseAction(t *testing.T) {
	c := DefaultConfig()
	if got, err := c.ParseAction("x\n```bash\nls\n```"); err != nil || got != "ls" {
		t.Errorf("default pattern: ParseAction() = %q, %v", got, err)
	}
	c.ActionRegex = "<cmd>.*?</cmd>" // no group: the whole match is the action
	if got, err := c.ParseAction("<cmd>ls</cmd>"); err != nil || got != "<cmd>ls</cmd>" {
		t.Errorf("no group: ParseAction() = %q, %v", got, err)
	}
	var fe *FormatError
	if _, err := c.ParseAction("<cmd>a</cmd><cmd>b</cmd>"); !errors.As(err, &fe) || len(fe.Actions) != 2 {
		t.Errorf("two matches: error = %v, want a FormatError with 2 actions", err)
	}
	c.ActionRegex = "("
	if _, err := c.ParseAction("x"); !errors.As(err, &fe) || !strings.Contains(fe.Reason, "action_regex") {
		t.Errorf("bad pattern: error = %v, want a FormatError naming action_regex", err)
	}
}
