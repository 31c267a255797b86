package gateway

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/testkit"
)

// The Python client's tests (clients/python, standard library only) pass
// against `actloop dev --serve`, as a user runs it: submit with per-line
// errors, a results stream read across a reconnect with nothing lost or
// duplicated, groups, the GRPO example's training records, control calls.
func TestPythonClient(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not on PATH: the Python client's tests need it")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "actloop")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/actloop").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	state := filepath.Join(dir, "state")
	dev := exec.CommandContext(ctx, bin, "dev", "--serve", "--dir", state, "--addr", "127.0.0.1:0",
		"--gateway-addr", "127.0.0.1:0", "--time-scale", "0.01")
	var devOut strings.Builder
	dev.Stdout, dev.Stderr = &devOut, &devOut
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = dev.Process.Signal(syscall.SIGINT)
		_ = dev.Wait()
		t.Logf("actloop dev --serve:\n%s", devOut.String())
	}()
	env := map[string]string{}
	testkit.Eventually(t, 3*time.Minute, "actloop dev --serve to write the gateway's address", func() bool {
		f, err := os.Open(filepath.Join(state, "actloop.env"))
		if err != nil {
			return false
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if kv, ok := strings.CutPrefix(sc.Text(), "export "); ok {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = strings.Trim(v, "'")
			}
		}
		return env["ACTLOOP_GATEWAY_URL"] != ""
	})
	cmd := exec.CommandContext(ctx, py, "-m", "unittest", "discover", "-v", "-s", "../../clients/python/tests")
	cmd.Env = append(os.Environ(), "ACTLOOP_GATEWAY_URL="+env["ACTLOOP_GATEWAY_URL"],
		"ACTLOOP_API_TOKEN="+env["ACTLOOP_API_TOKEN"], "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	t.Logf("python3 -m unittest:\n%s", out)
	if err != nil {
		t.Fatalf("the Python client's tests failed: %v", err)
	}
	if strings.Contains(string(out), "skipped") {
		t.Fatal("Python tests were skipped with a gateway to test against")
	}
}
