package genworker

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/actloop/actloop/pkg/schema"
)

// A worker takes work only once it has read the control state and while
// the coordinator's mode there is its own (or none is named); a mismatch
// is logged at error level naming both values, once, and each change of
// agreement wakes the heartbeat.
func TestSchedulingCheck(t *testing.T) {
	var logs bytes.Buffer
	woken := 0
	s := &schedulingCheck{own: "trajectory", log: slog.New(slog.NewTextHandler(&logs, nil)), wake: func() { woken++ }}
	if s.agrees() || s.err() != nil {
		t.Fatalf("before the control state is read: agrees %v, err %v; want no work and no mismatch", s.agrees(), s.err())
	}
	steps := []struct {
		coordinator string
		agrees      bool
		woken       int
	}{
		{"", true, 1},           // first read: no mode named
		{"trajectory", true, 1}, // the same
		{"action", false, 2},    // apart
		{"action", false, 2},    // still apart: no new log, no wake
		{"trajectory", true, 3}, // together again
	}
	for i, st := range steps {
		s.observe(schema.Control{Scheduling: st.coordinator})
		if s.agrees() != st.agrees || woken != st.woken {
			t.Fatalf("step %d (coordinator %q): agrees %v, woken %d; want %v, %d", i, st.coordinator, s.agrees(), woken,
				st.agrees, st.woken)
		}
		if err := s.err(); (err == nil) != st.agrees || (err != nil && !errors.Is(err, ErrSchedulingMismatch)) {
			t.Fatalf("step %d: err %v", i, err)
		}
	}
	var errorLines []string
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if strings.Contains(l, "level=ERROR") {
			errorLines = append(errorLines, l)
		}
	}
	if len(errorLines) != 1 || !strings.Contains(errorLines[0], "this gen-worker has trajectory, the coordinator action") {
		t.Fatalf("error lines %q: want one naming both modes", errorLines)
	}
}
