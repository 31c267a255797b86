package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/actloop/actloop/pkg/sandbox"
	"github.com/actloop/actloop/pkg/sandbox/sandboxtest"
)

// versionsUsed returns the API versions of the engine's requests other
// than GET /version, and how many GET /version it answered.
func (e *fakeEngine) versionsUsed() (used []string, negotiations int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range e.reqs {
		p, v := splitVersion(r.Path)
		if p == "/version" {
			negotiations++
			continue
		}
		if !slices.Contains(used, v) {
			used = append(used, v)
		}
	}
	return used, negotiations
}

// TestDockerAPIVersionNegotiation checks that the backend speaks the
// newest version both it and the engine know, asks the engine once however
// many sandboxes start at the same time, and fails with both ranges named
// where there is none.
func TestDockerAPIVersionNegotiation(t *testing.T) {
	tests := []struct {
		name    string
		engine  engineVersions
		want    string
		wantErr bool
	}{
		{"docker 20.10", docker2010, "1.41", false},
		{"docker 29", docker29, "1.52", false},
		{"newer than the backend", engineVersions{"1.44", "1.60"}, "1.55", false},
		{"exactly the backend's range", engineVersions{"1.41", "1.55"}, "1.55", false},
		{"too old", engineVersions{"1.12", "1.40"}, "", true},
		{"too new", engineVersions{"1.56", "1.60"}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, srv := newFakeEngine(t)
			e.versions = tt.engine
			d := newDocker(t, srv.URL, sandbox.DockerConfig{Image: "img"})
			ctx := context.Background()
			errs := make(chan error, 4)
			for i := range cap(errs) {
				go func() {
					sb, err := d.Start(ctx, fmt.Sprintf("v%d", i), sandbox.Spec{})
					if err == nil {
						_, err = sb.Exec(ctx, "echo hi", time.Minute)
						err = errors.Join(err, sb.Close(ctx))
					}
					errs <- err
				}()
			}
			for range cap(errs) {
				err := <-errs
				if tt.wantErr {
					if !errors.Is(err, sandbox.ErrDockerAPIVersion) || !strings.Contains(err.Error(), tt.engine.min+" to "+tt.engine.max) ||
						!strings.Contains(err.Error(), "1.41 to 1.55") {
						t.Fatalf("Start: %v, want ErrDockerAPIVersion naming the engine's range %s to %s and the backend's 1.41 to 1.55",
							err, tt.engine.min, tt.engine.max)
					}
				} else if err != nil {
					t.Fatalf("sandbox: %v", err)
				}
			}
			used, negotiations := e.versionsUsed()
			if tt.wantErr {
				if len(used) != 0 {
					t.Fatalf("no version in common, yet requests at %v", used)
				}
				return
			}
			if !slices.Equal(used, []string{tt.want}) || negotiations != 1 {
				t.Fatalf("requests at versions %v after %d GET /version; want all at %s after one", used, negotiations, tt.want)
			}
			if v, err := d.APIVersion(ctx); v != tt.want || err != nil {
				t.Fatalf("APIVersion() = %q, %v; want %s", v, err, tt.want)
			}
		})
	}
}

// TestDockerAPIVersionRenegotiation checks that a backend whose engine is
// upgraded under it (Docker 20.10 to 29, whose minimum is above the old
// maximum) negotiates again once refused and repeats the refused request,
// a JSON body, a tar archive from memory (the patch) and one streamed
// from the workspace alike.
func TestDockerAPIVersionRenegotiation(t *testing.T) {
	ws := t.TempDir()
	writeFile(t, filepath.Join(ws, "a.txt"), "a\n", 0o644)
	for _, on := range []string{"POST /containers/create", "PUT /containers/actloop-up/archive", "POST /containers/actloop-up/exec"} {
		t.Run(on, func(t *testing.T) {
			e, srv := newFakeEngine(t)
			d := newDocker(t, srv.URL, sandbox.DockerConfig{Image: "img"})
			ctx := context.Background()
			if err := d.Ping(ctx); err != nil {
				t.Fatal(err)
			}
			e.mu.Lock()
			e.upgradeOn, e.upgrade = on, docker29
			e.mu.Unlock()
			sb := sandboxtest.Start(t, d, "up", sandbox.Spec{Workspace: ws})
			if res, err := sb.Exec(ctx, "echo hi", time.Minute); err != nil || res.Output != "hi\nwarn\n" {
				t.Fatalf("Exec after the upgrade = %+v, %v", res, err)
			}
			used, negotiations := e.versionsUsed()
			if !slices.Equal(used, []string{"1.41", "1.52"}) || negotiations != 2 {
				t.Fatalf("requests at versions %v after %d GET /version; want 1.41, then 1.52 after a second", used, negotiations)
			}
			method, path, _ := strings.Cut(on, " ")
			if n := len(e.requests(method, path)); n != 2 {
				t.Fatalf("%d requests %s, want the refused one and its repetition", n, on)
			}
			archives := e.requests("PUT", "/archive")
			if got := archives[len(archives)-1].Files; !slices.Equal(got, []string{"a.txt"}) {
				t.Fatalf("workspace archive holds %v after the upgrade", got)
			}
		})
	}

	// Refused again after negotiating anew: the refusal is the error.
	e, srv := newFakeEngine(t)
	d := newDocker(t, srv.URL, sandbox.DockerConfig{Image: "img"})
	if err := d.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	e.versions = engineVersions{"1.30", "1.40"}
	e.mu.Unlock()
	if _, err := d.Start(context.Background(), "down", sandbox.Spec{}); !errors.Is(err, sandbox.ErrDockerAPIVersion) {
		t.Fatalf("Start after a downgrade below the backend's range: %v, want ErrDockerAPIVersion", err)
	}
}

// TestDockerAPIVersionFromPing checks the fallback for an engine whose GET
// /version is refused (a proxy in front of the socket): the version comes
// from GET /_ping's API-Version header.
func TestDockerAPIVersionFromPing(t *testing.T) {
	e, srv := newFakeEngine(t)
	e.noVersion, e.versions = true, docker29
	d := newDocker(t, srv.URL, sandbox.DockerConfig{Image: "img"})
	sandboxtest.Start(t, d, "ping", sandbox.Spec{})
	if v, err := d.APIVersion(context.Background()); v != "1.52" || err != nil {
		t.Fatalf("APIVersion() = %q, %v; want 1.52 from the Api-Version header", v, err)
	}
	if pings := e.requests("GET", "/_ping"); len(pings) != 1 || pings[0].Path != "/_ping" {
		t.Fatalf("pings: %+v, want one unversioned", pings)
	}
}

// TestDockerPullError checks that a pull that fails is an error naming the
// engine's message, which API 1.48 and later put in errorDetail alone.
func TestDockerPullError(t *testing.T) {
	e, srv := newFakeEngine(t)
	e.missing["repo/private:1"] = true
	e.pullErrs["repo/private:1"] = "pull access denied for repo/private"
	d := newDocker(t, srv.URL, sandbox.DockerConfig{Image: "repo/private:1"})
	_, err := d.Start(context.Background(), "private", sandbox.Spec{})
	if err == nil || !strings.Contains(err.Error(), "pull access denied for repo/private") {
		t.Fatalf("Start with an image that cannot be pulled: %v, want the engine's message", err)
	}
}
