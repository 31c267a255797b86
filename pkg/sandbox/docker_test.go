package sandbox_test

import (
	"archive/tar"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/actloop/actloop/pkg/sandbox"
	"github.com/actloop/actloop/pkg/sandbox/sandboxtest"
)

// engineRequest is one request the fake engine received.
type engineRequest struct {
	Method, Path string
	Query        map[string][]string
	Body         map[string]any // JSON bodies
	Files        []string       // tar bodies: the entries' names
}

// fakeEngine answers like the Docker Engine API (v1.43) for the calls the
// backend makes, and records them. Exec commands are "run" by looking at
// the user's command: echo prints, sleep blocks until killed, anything
// else exits 0; the diff script prints diffOut.
type fakeEngine struct {
	t       testing.TB
	mu      sync.Mutex
	reqs    []engineRequest
	running map[string]bool // container name -> running
	missing map[string]bool // images to "pull" first
	execs   map[string][]string
	codes   map[string]int
	killed  chan struct{}
	diffOut string
	applyRC int
}

func newFakeEngine(t testing.TB) (*fakeEngine, *httptest.Server) {
	e := &fakeEngine{t: t, running: map[string]bool{}, missing: map[string]bool{}, execs: map[string][]string{},
		codes: map[string]int{}, killed: make(chan struct{}, 16)}
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return e, srv
}

func (e *fakeEngine) requests(method, pathSuffix string) []engineRequest {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []engineRequest
	for _, r := range e.reqs {
		if r.Method == method && strings.HasSuffix(r.Path, pathSuffix) {
			out = append(out, r)
		}
	}
	return out
}

func frame(w io.Writer, stream byte, s string) {
	hdr := []byte{stream, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(hdr[4:], uint32(len(s)))
	_, _ = w.Write(append(hdr, s...))
}

func (e *fakeEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := engineRequest{Method: r.Method, Path: r.URL.Path, Query: r.URL.Query()}
	if r.Header.Get("Content-Type") == "application/x-tar" {
		tr := tar.NewReader(r.Body)
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			rec.Files = append(rec.Files, h.Name)
		}
	} else if r.Body != nil {
		_ = json.NewDecoder(r.Body).Decode(&rec.Body)
	}
	e.mu.Lock()
	e.reqs = append(e.reqs, rec)
	e.mu.Unlock()
	path, ok := strings.CutPrefix(r.URL.Path, "/v1.43")
	if !ok {
		http.Error(w, `{"message":"no API version"}`, http.StatusBadRequest)
		return
	}
	parts := strings.Split(strings.Trim(path, "/"), "/")
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case r.Method == "GET" && path == "/_ping":
		_, _ = io.WriteString(w, "OK")
	case r.Method == "POST" && path == "/containers/create":
		image, _ := rec.Body["Image"].(string)
		if e.missing[image] {
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"message":"No such image: `+image+`"}`)
			return
		}
		e.running[r.URL.Query().Get("name")] = true
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"Id":"c0ffee","Warnings":[]}`)
	case r.Method == "POST" && path == "/images/create":
		delete(e.missing, r.URL.Query().Get("fromImage")+":"+r.URL.Query().Get("tag"))
		_, _ = io.WriteString(w, `{"status":"Pulling"}`+"\n"+`{"status":"Done"}`+"\n")
	case len(parts) >= 2 && parts[0] == "containers":
		name := parts[1]
		running, exists := e.running[name]
		switch {
		case r.Method == "DELETE" && len(parts) == 2:
			if !exists {
				http.Error(w, `{"message":"No such container"}`, http.StatusNotFound)
				return
			}
			delete(e.running, name)
			w.WriteHeader(http.StatusNoContent)
		case !exists:
			http.Error(w, `{"message":"No such container"}`, http.StatusNotFound)
		case r.Method == "GET" && parts[2] == "json":
			fmt.Fprintf(w, `{"State":{"Running":%v}}`, running)
		case r.Method == "POST" && parts[2] == "start":
			w.WriteHeader(http.StatusNoContent)
		case r.Method == "PUT" && parts[2] == "archive":
			w.WriteHeader(http.StatusOK)
		case r.Method == "POST" && parts[2] == "exec":
			if !running {
				http.Error(w, `{"message":"container `+name+` is not running"}`, http.StatusConflict)
				return
			}
			id := fmt.Sprintf("exec%d", len(e.execs))
			var cmd []string
			for _, a := range rec.Body["Cmd"].([]any) {
				cmd = append(cmd, a.(string))
			}
			e.execs[id] = cmd
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"Id":%q}`, id)
		default:
			http.Error(w, `{"message":"unexpected"}`, http.StatusBadRequest)
		}
	case len(parts) == 3 && parts[0] == "exec" && parts[2] == "start":
		cmd := e.execs[parts[1]]
		w.Header().Set("Content-Type", "application/vnd.docker.multiplexed-stream")
		w.WriteHeader(http.StatusOK)
		code := 0
		switch {
		case len(cmd) == 6 && cmd[3] == "actloop-exec":
			user := cmd[4]
			switch {
			case strings.HasPrefix(user, "echo "):
				frame(w, 1, strings.TrimPrefix(user, "echo ")+"\n")
				frame(w, 2, "warn\n")
			case strings.HasPrefix(user, "sleep "):
				frame(w, 1, "started\n")
				w.(http.Flusher).Flush()
				e.mu.Unlock()
				select {
				case <-e.killed:
				case <-r.Context().Done():
				}
				e.mu.Lock()
				code = 137
			case strings.HasPrefix(user, "exit "):
				_, _ = fmt.Sscan(strings.TrimPrefix(user, "exit "), &code)
			}
		case len(cmd) == 5 && cmd[3] == "actloop-kill":
			e.killed <- struct{}{}
		case len(cmd) == 5 && cmd[3] == "actloop-apply":
			code = e.applyRC
			frame(w, 2, "apply says\n")
		case len(cmd) == 3 && strings.HasPrefix(cmd[2], "[ -d .git ]"):
			frame(w, 1, e.diffOut)
		}
		e.codes[parts[1]] = code
	case r.Method == "GET" && len(parts) == 3 && parts[0] == "exec" && parts[2] == "json":
		fmt.Fprintf(w, `{"Running":false,"ExitCode":%d}`, e.codes[parts[1]])
	default:
		http.Error(w, `{"message":"unexpected"}`, http.StatusBadRequest)
	}
}

func newDocker(t testing.TB, host string, cfg sandbox.DockerConfig) *sandbox.Docker {
	t.Helper()
	cfg.Host = host
	d, err := sandbox.NewDocker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestDockerRequests(t *testing.T) {
	e, srv := newFakeEngine(t)
	e.diffOut = "diff --git a/a.txt b/a.txt\n"
	d := newDocker(t, srv.URL, sandbox.DockerConfig{Image: "default:1", CPUs: 1.5,
		Limits: sandbox.Limits{MaxProcs: 64, MemoryMB: 256, CPUTime: 90 * time.Second}})
	ws := t.TempDir()
	writeFile(t, filepath.Join(ws, "a.txt"), "a\n", 0o644)
	writeFile(t, filepath.Join(ws, "sub", "b.txt"), "b\n", 0o755)
	if err := os.Symlink("a.txt", filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sb, err := d.Start(ctx, "traj-1", sandbox.Spec{Image: "img:2", Workspace: ws, Env: map[string]string{"FOO": "bar"},
		Setup: []string{"echo setup"}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Handle() != "docker:actloop-traj-1" {
		t.Errorf("Handle() = %q", sb.Handle())
	}

	creates := e.requests("POST", "/containers/create")
	if len(creates) != 1 || creates[0].Query["name"][0] != "actloop-traj-1" {
		t.Fatalf("create requests: %+v", creates)
	}
	body, _ := json.Marshal(creates[0].Body)
	var got struct {
		Image           string
		Cmd             []string
		WorkingDir      string
		Env             []string
		Labels          map[string]string
		NetworkDisabled bool
		HostConfig      struct {
			NetworkMode                             string
			Memory, MemorySwap, PidsLimit, NanoCpus int64
			Ulimits                                 []struct {
				Name       string
				Soft, Hard int64
			}
			Init bool
		}
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	hc := got.HostConfig
	if got.Image != "img:2" || !slices.Equal(got.Cmd, []string{"sleep", "infinity"}) || got.WorkingDir != "/workspace" ||
		!slices.Equal(got.Env, []string{"FOO=bar"}) || got.Labels["io.actloop.sandbox"] != "traj-1" || !got.NetworkDisabled ||
		hc.NetworkMode != "none" || hc.Memory != 256<<20 || hc.MemorySwap != 256<<20 || hc.PidsLimit != 64 ||
		hc.NanoCpus != 1_500_000_000 || len(hc.Ulimits) != 1 || hc.Ulimits[0].Name != "cpu" || hc.Ulimits[0].Hard != 90 || !hc.Init {
		t.Errorf("create body = %s", body)
	}
	if n := len(e.requests("POST", "/containers/actloop-traj-1/start")); n != 1 {
		t.Errorf("%d start requests, want 1", n)
	}
	archives := e.requests("PUT", "/containers/actloop-traj-1/archive")
	if len(archives) != 1 || archives[0].Query["path"][0] != "/workspace" {
		t.Fatalf("archive requests: %+v", archives)
	}
	slices.Sort(archives[0].Files)
	if want := []string{"a.txt", "link", "sub", "sub/b.txt"}; !slices.Equal(archives[0].Files, want) {
		t.Errorf("archive holds %v, want %v", archives[0].Files, want)
	}

	res, err := sb.Exec(ctx, "echo hello", time.Minute)
	if err != nil || res.Output != "hello\nwarn\n" || res.ReturnCode != 0 || res.TimedOut {
		t.Fatalf("Exec(echo hello) = %+v, %v", res, err)
	}
	if res, err := sb.Exec(ctx, "exit 3", time.Minute); err != nil || res.ReturnCode != 3 {
		t.Fatalf("Exec(exit 3) = %+v, %v", res, err)
	}
	execs := e.requests("POST", "/containers/actloop-traj-1/exec")
	last := execs[len(execs)-1].Body
	if last["WorkingDir"] != "/workspace" || last["AttachStdout"] != true || last["AttachStderr"] != true || last["Tty"] != false {
		t.Errorf("exec create body = %v", last)
	}
	if cmd := last["Cmd"].([]any); len(cmd) != 6 || cmd[0] != "bash" || cmd[4] != "exit 3" {
		t.Errorf("exec Cmd = %v", cmd)
	}
	if starts := e.requests("POST", "/start"); starts[len(starts)-1].Body["Detach"] != false {
		t.Errorf("exec start body = %v", starts[len(starts)-1].Body)
	}
	if diff, err := sb.Diff(ctx); err != nil || diff != e.diffOut {
		t.Fatalf("Diff = %q, %v", diff, err)
	}

	for i := range 2 {
		if err := sb.Close(ctx); err != nil {
			t.Fatalf("Close #%d: %v", i+1, err)
		}
	}
	dels := e.requests("DELETE", "/containers/actloop-traj-1")
	if len(dels) < 2 || dels[len(dels)-1].Query["force"][0] != "true" || dels[len(dels)-1].Query["v"][0] != "true" {
		t.Errorf("delete requests: %+v", dels)
	}
	if _, err := sb.Exec(ctx, "echo hi", time.Minute); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("Exec after Close: %v, want ErrNotFound", err)
	}
	if _, err := d.Attach(ctx, sb.Handle()); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("Attach after Close: %v, want ErrNotFound", err)
	}
}

func TestDockerTimeoutKillsGroup(t *testing.T) {
	e, srv := newFakeEngine(t)
	d := newDocker(t, srv.URL, sandbox.DockerConfig{Image: "img"})
	sb := sandboxtest.Start(t, d, "slow", sandbox.Spec{})
	res, err := sb.Exec(context.Background(), "sleep 100", 100*time.Millisecond)
	if err != nil || !res.TimedOut || res.ReturnCode != -1 || res.Output != "started\n" {
		t.Fatalf("Exec(sleep 100) = %+v, %v; want TimedOut with the output so far", res, err)
	}
	var cmd, kill []any
	for _, r := range e.requests("POST", "/exec") {
		c := r.Body["Cmd"].([]any)
		switch c[3] {
		case "actloop-exec":
			cmd = c
		case "actloop-kill":
			kill = c
		}
	}
	// The kill names the same process-group file as the command.
	if kill == nil || kill[4] != cmd[5] || !strings.Contains(kill[2].(string), "kill -KILL --") {
		t.Fatalf("kill exec %v for command %v", kill, cmd)
	}
}

func TestDockerPullAndPatch(t *testing.T) {
	e, srv := newFakeEngine(t)
	e.missing["repo/img:7"] = true
	d := newDocker(t, srv.URL, sandbox.DockerConfig{Image: "repo/img:7", Network: true})
	sandboxtest.Start(t, d, "pulled", sandbox.Spec{Patch: "diff --git a/x b/x\n"})
	pulls := e.requests("POST", "/images/create")
	if len(pulls) != 1 || pulls[0].Query["fromImage"][0] != "repo/img" || pulls[0].Query["tag"][0] != "7" {
		t.Fatalf("pull requests: %+v", pulls)
	}
	creates := e.requests("POST", "/containers/create")
	if hc := creates[len(creates)-1].Body["HostConfig"].(map[string]any); hc["NetworkMode"] != nil {
		t.Errorf("network allowed, yet HostConfig = %v", hc)
	}
	archives := e.requests("PUT", "/archive")
	if len(archives) != 1 || archives[0].Query["path"][0] != "/tmp" || !slices.Equal(archives[0].Files, []string{".actloop.patch"}) {
		t.Fatalf("patch upload: %+v", archives)
	}

	e.mu.Lock()
	e.applyRC = 1
	e.mu.Unlock()
	if _, err := d.Start(context.Background(), "bad-patch", sandbox.Spec{Patch: "garbage\n"}); !errors.Is(err, sandbox.ErrPatch) ||
		!strings.Contains(err.Error(), "apply says") {
		t.Fatalf("Start with a patch that fails: %v, want ErrPatch with git's words", err)
	}
	if _, err := d.Attach(context.Background(), "docker:actloop-bad-patch"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("container of a failed Start: %v, want it removed", err)
	}
}

func TestDockerLostContainer(t *testing.T) {
	e, srv := newFakeEngine(t)
	d := newDocker(t, srv.URL, sandbox.DockerConfig{Image: "img"})
	sb := sandboxtest.Start(t, d, "dies", sandbox.Spec{})
	e.mu.Lock()
	e.running["actloop-dies"] = false // its main process died
	e.mu.Unlock()
	if _, err := sb.Exec(context.Background(), "echo hi", time.Minute); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("Exec in a stopped container: %v, want ErrNotFound", err)
	}
	if _, err := d.Attach(context.Background(), sb.Handle()); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("Attach to a stopped container: %v, want ErrNotFound", err)
	}
	for _, h := range []string{"", "docker:", "docker:other-x", "local:/x", "docker:actloop-a/b"} {
		if _, err := d.Attach(context.Background(), h); !errors.Is(err, sandbox.ErrInvalidHandle) {
			t.Errorf("Attach(%q): %v, want ErrInvalidHandle", h, err)
		}
	}
}

func TestNewDockerErrors(t *testing.T) {
	for _, cfg := range []sandbox.DockerConfig{
		{Host: "ftp://x"},
		{WorkDir: "relative"},
		{CPUs: -1},
		{Limits: sandbox.Limits{MemoryMB: -1}},
		{NamePrefix: "a/b"},
	} {
		if _, err := sandbox.NewDocker(cfg); err == nil {
			t.Errorf("NewDocker(%+v): no error", cfg)
		}
	}
}

// TestDockerConformance runs the suite against a real engine, where one
// answers (DOCKER_HOST or the default socket), with the image
// ACTLOOP_TEST_DOCKER_IMAGE (default buildpack-deps:bookworm-scm: bash
// and git).
func TestDockerConformance(t *testing.T) {
	host := os.Getenv("DOCKER_HOST")
	image := cmpOr(os.Getenv("ACTLOOP_TEST_DOCKER_IMAGE"), "buildpack-deps:bookworm-scm")
	probe := newDocker(t, host, sandbox.DockerConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := probe.Ping(ctx); err != nil {
		t.Skipf("no Docker engine reachable: %v", err)
	}
	const limit = 2000
	sandboxtest.Run(t, func(t *testing.T) sandbox.Backend {
		return newDocker(t, host, sandbox.DockerConfig{Image: image, OutputLimit: limit, Limits: sandbox.DefaultLimits(),
			NamePrefix: fmt.Sprintf("actloop-test-%d-", os.Getpid())})
	}, sandboxtest.Options{OutputLimit: limit, Shell: true})
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
