package sandbox

import (
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
