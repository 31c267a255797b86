package agent

import (
	"slices"
	"testing"

	"github.com/actloop/actloop/pkg/schema"
)

func TestClassifyCommand(t *testing.T) {
	tests := []struct {
		cmd  string
		want schema.CommandKind
	}{
		{"cat src/app.py", schema.CommandRead},
		{"cd /repo && sed -n '10,40p' src/app.py", schema.CommandRead},
		{"ls -la /repo 2>/dev/null", schema.CommandRead},
		{"grep -rn 'def parse' src/ | head -20", schema.CommandSearch},
		{"git grep -n parse", schema.CommandSearch},
		{"sed -i 's/a/b/' src/app.py", schema.CommandEdit},
		{"cat <<'EOF' > src/app.py\nprint(1)\nEOF", schema.CommandEdit},
		{"echo 'x = 1' >> src/app.py", schema.CommandEdit},
		{"python reproduce.py 2>&1", schema.CommandRun},
		{"python -m pytest tests/test_app.py -x -q", schema.CommandTest},
		{"cd /repo && timeout 300 pytest -q tests/", schema.CommandTest},
		{"PYTHONPATH=. python3 -m unittest discover", schema.CommandTest},
		{"go test ./...", schema.CommandTest},
		{"make test", schema.CommandTest},
		{"make", schema.CommandRun},
		{"git status && git diff", schema.CommandVCS},
		{"git checkout -- src/app.py", schema.CommandEdit},
		{"echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached", schema.CommandSubmit},
		{"echo MINI_SWE_AGENT_FINAL_OUTPUT", schema.CommandSubmit},
		{"sed -i 's/x/y/' a.py && python -m pytest", schema.CommandEdit},
		{"", schema.CommandOther},
		{"frobnicate --all", schema.CommandOther},
		{"    ", schema.CommandOther},
	}
	for _, tt := range tests {
		if got := ClassifyCommand(tt.cmd); got != tt.want {
			t.Errorf("ClassifyCommand(%q) = %q, want %q", tt.cmd, got, tt.want)
		}
	}
}

func FuzzClassifyCommand(f *testing.F) {
	for _, s := range []string{"cat x", "cd a && pytest", "a > b", "x <<EOF\ny\nEOF", "2>&1 >", ">", "&>", "timeout 5s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, cmd string) {
		if k := ClassifyCommand(cmd); !slices.Contains(schema.CommandKinds, k) {
			t.Fatalf("ClassifyCommand(%q) = %q: not a kind", cmd, k)
		}
	})
}
