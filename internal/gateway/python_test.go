package gateway

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The Python client's tests (clients/python, standard library only) pass
// against a gateway over a dev stack: submit with per-line errors, a
// results stream read across a reconnect with nothing lost or duplicated,
// groups, the GRPO example's training records, control calls.
func TestPythonClient(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not on PATH: the Python client's tests need it")
	}
	a := newAPI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-m", "unittest", "discover", "-v", "-s", "../../clients/python/tests")
	cmd.Env = append(os.Environ(), "ACTLOOP_GATEWAY_URL="+a.url, "ACTLOOP_API_TOKEN="+a.token, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	t.Logf("python3 -m unittest:\n%s", out)
	if err != nil {
		t.Fatalf("the Python client's tests failed: %v", err)
	}
	if strings.Contains(string(out), "skipped") {
		t.Fatal("Python tests were skipped with a gateway to test against")
	}
}
