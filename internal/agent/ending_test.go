package agent

import (
	"testing"

	"github.com/actloop/actloop/pkg/schema"
)

func TestTerminatingMessage(t *testing.T) {
	diff := "diff --git a/x b/x\n+y\n"
	tests := []struct {
		name       string
		ending     Ending
		submission string
		want       schema.Message
		wantStatus string
	}{
		// Submitted(text): str(e) is the submission.
		{"submitted", EndingSubmitted, diff, schema.Message{Role: schema.RoleUser, Content: diff}, "Submitted"},
		{"submitted nothing", EndingSubmitted, "", schema.Message{Role: schema.RoleUser}, "Submitted"},
		// LimitsExceeded(): str(e) is "".
		{"limits exceeded", EndingLimitsExceeded, "ignored", schema.Message{Role: schema.RoleUser}, "LimitsExceeded"},
		{"unknown ending", Ending(0), "ignored", schema.Message{Role: schema.RoleUser}, "Ending(0)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := TerminatingMessage(tt.ending, tt.submission); got != tt.want {
				t.Errorf("TerminatingMessage() = %+v, want %+v", got, tt.want)
			}
			if got := tt.ending.String(); got != tt.wantStatus {
				t.Errorf("String() = %q, want %q", got, tt.wantStatus)
			}
		})
	}
}
