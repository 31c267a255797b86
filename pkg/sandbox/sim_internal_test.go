package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func FuzzSimulate(f *testing.F) {
	for _, s := range []string{"echo hi", "echo 'a'", `echo "`, "sleep 1e300", "sleep -1", "sleep NaN", "exit 999", "exit -1", "ls", "", " \t"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, cmd string) {
		res, busy := simulate(cmd)
		if busy < 0 {
			t.Fatalf("simulate(%q): negative duration %s", cmd, busy)
		}
		if res.ReturnCode < 0 || res.ReturnCode > 255 || res.TimedOut {
			t.Fatalf("simulate(%q) = %+v", cmd, res)
		}
		if res.Output != "" && !strings.HasSuffix(res.Output, "\n") {
			t.Fatalf("simulate(%q): output %q lacks a newline", cmd, res.Output)
		}
	})
}

// Start failures are independent draws per attempt: with a share of 0.5,
// about a quarter of ids fail twice in a row, not half.
func TestSimStartFailuresAreIndependent(t *testing.T) {
	m := NewSim(SimConfig{StartFailures: 0.5})
	ctx := context.Background()
	const n = 2000
	twice := 0
	for i := range n {
		id := fmt.Sprintf("t-%d", i)
		failed := 0
		for range 2 {
			sb, err := m.Start(ctx, id, Spec{})
			switch {
			case err == nil:
				_ = sb.Close(ctx)
			case errors.Is(err, ErrStartFailed):
				failed++
			default:
				t.Fatalf("start: %v", err)
			}
		}
		if failed == 2 {
			twice++
		}
	}
	if twice < n/4-150 || twice > n/4+150 {
		t.Errorf("%d of %d ids failed twice in a row, want about %d", twice, n, n/4)
	}
}
