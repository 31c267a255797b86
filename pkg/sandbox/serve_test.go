package sandbox_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/pkg/sandbox"
	"github.com/actloop/actloop/pkg/sandbox/sandboxtest"
)

// get is a command that sends GET path to baseURL with bash alone (no curl
// or sed in a bare sandbox or a test image) and prints the answer's body,
// or "refused".
func get(baseURL, path string) string {
	hostPort := strings.TrimPrefix(baseURL, "http://")
	host, port, _ := strings.Cut(hostPort, ":")
	return fmt.Sprintf(`{ exec 3<>/dev/tcp/%s/%s; } 2>/dev/null || { echo refused; exit 0; }
printf 'GET %s HTTP/1.0\r\nHost: sandbox\r\n\r\n' >&3
body=0
while IFS= read -r l <&3 || [ -n "$l" ]; do
  if [ $body = 1 ]; then echo "$l"; elif [ "$l" = $'\r' ]; then body=1; fi
done`, host, port, path)
}

// A served handler answers the sandbox's commands at the URL Serve gives,
// sees what they send, and is gone after stop; under bwrap, where the
// sandbox has no network, nothing else of the host's is reachable.
func TestServe(t *testing.T) {
	for _, tc := range []struct {
		name  string
		local func(t *testing.T) *sandbox.Local
	}{
		{"unisolated", func(t *testing.T) *sandbox.Local { return newLocal(t, sandbox.LocalConfig{}) }},
		{"bwrap", func(t *testing.T) *sandbox.Local { return newBwrap(t, sandbox.LocalConfig{}) }},
		// A root deeper than a Unix socket's path may be long (108 bytes).
		{"bwrap-deep-root", func(t *testing.T) *sandbox.Local {
			root := filepath.Join(testkit.SearchableTempDir(t), strings.Repeat("d", 60), strings.Repeat("e", 60))
			if err := os.MkdirAll(root, 0o755); err != nil {
				t.Fatal(err)
			}
			return newBwrap(t, sandbox.LocalConfig{Root: root})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := sandboxtest.Start(t, tc.local(t), "served", sandbox.Spec{})
			srv, ok := sb.(sandbox.Server)
			if !ok {
				t.Fatalf("%T is no sandbox.Server", sb)
			}
			seen := make(chan string, 4)
			url, stop, err := srv.Serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				seen <- r.URL.Path
				_, _ = io.WriteString(w, "served "+r.URL.Path+"\n")
			}))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(url, "http://127.0.0.1:") {
				t.Fatalf("base URL %q", url)
			}
			if _, _, err := srv.Serve(http.NotFoundHandler()); !errors.Is(err, sandbox.ErrServing) {
				t.Fatalf("second Serve: %v, want ErrServing", err)
			}
			sandboxtest.WantOutput(t, sb, get(url, "/v1/models"), "served /v1/models\n")
			if p := <-seen; p != "/v1/models" {
				t.Fatalf("handler saw %q", p)
			}
			// The command's own exit code and output pass through the
			// forwarder.
			res := sandboxtest.Exec(t, sb, "echo out; exit 7")
			if res.ReturnCode != 7 || res.Output != "out\n" {
				t.Fatalf("exit through the forwarder: %+v", res)
			}
			if strings.HasPrefix(tc.name, "bwrap") {
				// A listener of the host's loopback stays out of reach.
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
				sandboxtest.WantOutput(t, sb, get("http://"+ln.Addr().String(), "/"), "refused\n")
			}
			stop()
			stop()
			sandboxtest.WantOutput(t, sb, get(url, "/after"), "refused\n")
			// Served again after stop.
			url, stop, err = srv.Serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, "again\n")
			}))
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			sandboxtest.WantOutput(t, sb, get(url, "/"), "again\n")
		})
	}
}

// A Docker sandbox started to serve (Spec.Serve) serves a handler to its
// commands at ServePort of the container's loopback, through the tunnel,
// while the container has no network; after stop the port is closed, and
// one started without Spec.Serve refuses to serve, saying why.
func TestDockerServe(t *testing.T) {
	host, image := realEngine(t)
	d := newDocker(t, host, sandbox.DockerConfig{Image: image, NamePrefix: fmt.Sprintf("actloop-test-%d-", os.Getpid())})
	sb := sandboxtest.Start(t, d, "served", sandbox.Spec{Serve: true})
	srv, ok := sb.(sandbox.Server)
	if !ok {
		t.Fatalf("%T is no sandbox.Server", sb)
	}
	url, stop, err := srv.Serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "served "+r.URL.Path+"\n")
	}))
	if err != nil {
		t.Fatal(err)
	}
	if url != fmt.Sprintf("http://127.0.0.1:%d", sandbox.ServePort) {
		t.Fatalf("base URL %q", url)
	}
	for _, path := range []string{"/v1/models", "/again"} {
		sandboxtest.WantOutput(t, sb, get(url, path), "served "+path+"\n")
	}
	if _, _, err := srv.Serve(http.NotFoundHandler()); !errors.Is(err, sandbox.ErrServing) {
		t.Fatalf("second Serve: %v, want ErrServing", err)
	}
	stop()
	sandboxtest.WantOutput(t, sb, get(url, "/after"), "refused\n")

	plain := sandboxtest.Start(t, d, "plain", sandbox.Spec{})
	if _, _, err := plain.(sandbox.Server).Serve(http.NotFoundHandler()); err == nil || !strings.Contains(err.Error(), "Spec.Serve") {
		t.Fatalf("Serve without Spec.Serve: %v", err)
	}
}
