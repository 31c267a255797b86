package devstack_test

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/testkit"
)

// chromium runs headless Chromium with args and returns its standard
// output. Without Chromium the test is skipped with the reason.
func chromium(t *testing.T, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (Debian package chromium; CI installs it)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The flags keep Chromium off the network it would reach for itself.
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir()}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, stderr.String())
	}
	return string(out)
}

// The coordinator's status page, rendered by a real browser: the status
// table, the replicas with their busy slots, the queues and the
// utilisation chart. The screenshot is kept as a test artifact.
func TestStatusPageInChromium(t *testing.T) {
	if _, err := exec.LookPath("chromium"); err != nil {
		t.Skip("chromium is not installed (Debian package chromium; CI installs it)")
	}
	e := newEnv(t, 2)
	c, err := e.stack.StartAll(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(srv.Close)
	e.submit(simSample("page-1", "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"))
	e.results(1)
	// The page's chart has a point once the coordinator sampled the slots.
	var dom string
	testkit.Eventually(t, wait, "the page to show both replicas and a chart point", func() bool {
		dom = chromium(t, "--dump-dom", srv.URL+"/")
		return strings.Contains(dom, `data-replica="r0"`) && strings.Contains(dom, `data-replica="r1"`) &&
			!strings.Contains(dom, `points=""`)
	})
	for _, want := range []string{`<title>actloop status</title>`, `id="control">running, weight version 0`,
		"1 submitted", "<td>r0</td><td>yes</td>", " / 2</td>", "actloop.gen.r0.hi", "actloop.env.start", `<svg id="chart"`} {
		if !strings.Contains(dom, want) {
			t.Errorf("the page lacks %q:\n%s", want, dom)
		}
	}
	shot := filepath.Join(t.ArtifactDir(), "status-page.png")
	chromium(t, "--screenshot="+shot, "--window-size=900,1100", "--hide-scrollbars", srv.URL+"/")
	b, err := os.ReadFile(shot)
	if err != nil || len(b) < 1000 || string(b[1:4]) != "PNG" {
		t.Fatalf("screenshot %s: %d bytes, %v", shot, len(b), err)
	}
	t.Logf("screenshot: %s", shot)
}
