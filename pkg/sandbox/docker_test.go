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
	"reflect"
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
	Owners       []string       // tar bodies: the entries' uid:gid
}

// engineVersions is the range of Engine API versions a fake engine
// serves. Like Docker (daemon/server/middleware/version.go in moby/moby)
// it answers GET /version at any version, serves an unversioned path at
// its newest version, sets the Api-Version header on every answer, and
// refuses a version outside the range with 400 "client version ... is
// too new/old".
type engineVersions struct{ min, max string }

// docker2010 is the range of Docker 20.10 (API 1.41, minimum 1.12), and
// docker29 that of Docker 29 (API 1.52, minimum 1.44).
var (
	docker2010 = engineVersions{"1.12", "1.41"}
	docker29   = engineVersions{"1.44", "1.52"}
)

// versionLess compares "major.minor" versions.
func versionLess(a, b string) bool {
	var am, an, bm, bn int
	_, _ = fmt.Sscanf(a, "%d.%d", &am, &an)
	_, _ = fmt.Sscanf(b, "%d.%d", &bm, &bn)
	return am < bm || am == bm && an < bn
}

// splitVersion splits "/v1.41/containers/create" into "/containers/create"
// and "1.41"; an unversioned path has version "".
func splitVersion(p string) (path, version string) {
	if rest, ok := strings.CutPrefix(p, "/v"); ok {
		if i := strings.IndexByte(rest, '/'); i > 0 {
			return rest[i:], rest[:i]
		}
	}
	return p, ""
}

// route answers GET /version and requests at a version outside the range,
// returning false; otherwise it returns the path without its version.
func (ev engineVersions) route(w http.ResponseWriter, r *http.Request) (string, bool) {
	w.Header().Set("Api-Version", ev.max)
	p, v := splitVersion(r.URL.Path)
	v = cmpOr(v, ev.max)
	var refusal string
	switch {
	case versionLess(v, ev.min):
		refusal = fmt.Sprintf("client version %s is too old. Minimum supported API version is %s, please upgrade your client to a newer version", v, ev.min)
	case versionLess(ev.max, v):
		refusal = fmt.Sprintf("client version %s is too new. Maximum supported API version is %s", v, ev.max)
	case r.Method == "GET" && p == "/version":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"Version":"fake","ApiVersion":%q,"MinAPIVersion":%q,"Os":"linux"}`, ev.max, ev.min)
		return "", false
	default:
		return p, true
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	_ = json.NewEncoder(w).Encode(map[string]string{"message": refusal})
	return "", false
}

// fakeEngine answers like the Docker Engine API for the calls the backend
// makes, at the versions in its range (Docker 20.10's unless set), and
// records them. Exec commands are "run" by looking at the user's command:
// echo prints, sleep blocks until killed, anything else exits 0; the diff
// script prints diffOut.
type fakeEngine struct {
	t        testing.TB
	mu       sync.Mutex
	versions engineVersions
	// upgrade, when set, replaces versions as the first request whose
	// method and path (without version) are upgradeOn arrives.
	upgradeOn string
	upgrade   engineVersions
	noVersion bool              // GET /version is 403, as behind a proxy that allows only some endpoints
	pullErrs  map[string]string // image -> the errorDetail of its pull
	reqs      []engineRequest
	running   map[string]bool // container name -> running
	missing   map[string]bool // images to "pull" first
	execs     map[string][]string
	codes     map[string]int
	killed    chan struct{}
	diffOut   string
	diffSent  int // bytes of diffOut written before the client hung up
	applyRC   int
}

func newFakeEngine(t testing.TB) (*fakeEngine, *httptest.Server) {
	e := &fakeEngine{t: t, versions: docker2010, running: map[string]bool{}, missing: map[string]bool{}, execs: map[string][]string{},
		codes: map[string]int{}, killed: make(chan struct{}, 16), pullErrs: map[string]string{}}
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
			rec.Owners = append(rec.Owners, fmt.Sprintf("%d:%d", h.Uid, h.Gid))
		}
	} else if r.Body != nil {
		_ = json.NewDecoder(r.Body).Decode(&rec.Body)
	}
	e.mu.Lock()
	e.reqs = append(e.reqs, rec)
	if e.noVersion && strings.HasSuffix(r.URL.Path, "/version") {
		e.mu.Unlock()
		http.Error(w, `{"message":"forbidden"}`, http.StatusForbidden)
		return
	}
	ev := e.versions
	if e.upgradeOn != "" {
		if p, _ := splitVersion(r.URL.Path); r.Method+" "+p == e.upgradeOn {
			e.versions, e.upgradeOn = e.upgrade, ""
			ev = e.versions
		}
	}
	e.mu.Unlock()
	path, ok := ev.route(w, r)
	if !ok {
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
		image := r.URL.Query().Get("fromImage") + ":" + r.URL.Query().Get("tag")
		_, _ = io.WriteString(w, `{"status":"Pulling"}`+"\n")
		if msg, ok := e.pullErrs[image]; ok {
			fmt.Fprintf(w, `{"errorDetail":{"message":%q}}`+"\n", msg)
			return
		}
		delete(e.missing, image)
		_, _ = io.WriteString(w, `{"status":"Done"}`+"\n")
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
			// In 64 KiB frames, counting what the client took.
			e.diffSent = 0
			for rest := e.diffOut; rest != ""; {
				n := min(len(rest), 64<<10)
				hdr := []byte{1, 0, 0, 0, 0, 0, 0, 0}
				binary.BigEndian.PutUint32(hdr[4:], uint32(n))
				if _, err := w.Write(append(hdr, rest[:n]...)); err != nil {
					break
				}
				e.diffSent += n
				rest = rest[n:]
			}
		}
		e.codes[parts[1]] = code
	case r.Method == "GET" && len(parts) == 3 && parts[0] == "exec" && parts[2] == "json":
		fmt.Fprintf(w, `{"Running":false,"ExitCode":%d}`, e.codes[parts[1]])
	default:
		http.Error(w, `{"message":"unexpected"}`, http.StatusBadRequest)
	}
}

// newDocker returns a Docker backend for host, closed when the test ends.
func newDocker(t testing.TB, host string, cfg sandbox.DockerConfig) *sandbox.Docker {
	t.Helper()
	cfg.Host = host
	d, err := sandbox.NewDocker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func TestDockerRequests(t *testing.T) {
	e, srv := newFakeEngine(t)
	e.diffOut = "diff --git a/a.txt b/a.txt\n"
	d := newDocker(t, srv.URL, sandbox.DockerConfig{Image: "default:1", Images: []string{"img:*"}, CPUs: 1.5,
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
	body := creates[0].Body
	if body["Image"] != "img:2" || body["User"] != "65534:65534" || body["WorkingDir"] != "/workspace" ||
		!jsonEqual(body["Cmd"], `["sleep","infinity"]`) || !jsonEqual(body["Entrypoint"], `[]`) ||
		!jsonEqual(body["Env"], `["FOO=bar","HOME=/tmp"]`) || !jsonEqual(body["Labels"], `{"io.actloop.sandbox":"traj-1"}`) ||
		body["NetworkDisabled"] != true {
		t.Errorf("create body = %v", body)
	}
	wantHost := `{"NetworkMode":"none","Memory":268435456,"MemorySwap":268435456,"PidsLimit":64,"NanoCpus":1500000000,
		"Ulimits":[{"Name":"cpu","Soft":90,"Hard":90}],"Init":true,"CgroupnsMode":"private",
		"CapDrop":["ALL"],"SecurityOpt":["no-new-privileges:true"],"ReadonlyRootfs":true,
		"Tmpfs":{"/tmp":"rw,exec,nosuid,nodev,size=1024m,mode=1777"},
		"Mounts":[{"Type":"volume","Target":"/workspace","VolumeOptions":{"NoCopy":true,"Labels":{"io.actloop.sandbox":"traj-1"},
			"DriverConfig":{"Name":"local","Options":{"type":"tmpfs","device":"tmpfs",
				"o":"rw,exec,nosuid,nodev,size=4096m,uid=65534,gid=65534,mode=0755"}}}}]}`
	if !jsonEqual(body["HostConfig"], wantHost) {
		t.Errorf("create HostConfig = %s\nwant exactly %s", mustJSON(t, body["HostConfig"]), wantHost)
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
	for i, o := range archives[0].Owners {
		if o != "65534:65534" {
			t.Errorf("archive entry %s belongs to %s, want the container's user 65534:65534", archives[0].Files[i], o)
		}
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

// TestDockerDiffCapped checks that a capped diff is cut at the cap and
// that the backend stops reading the exec's output there.
func TestDockerDiffCapped(t *testing.T) {
	e, srv := newFakeEngine(t)
	e.diffOut = strings.Repeat("+0123456789abcdef\n", 2<<20) // 36 MiB
	d := newDocker(t, srv.URL, sandbox.DockerConfig{Image: "img"})
	sb := sandboxtest.Start(t, d, "big-diff", sandbox.Spec{})
	ctx := context.Background()
	got, over, err := sandbox.DiffCapped(ctx, sb, 1000)
	if err != nil || !over || got != e.diffOut[:1000] {
		t.Fatalf("DiffCapped(1000) = %d bytes, over %v, %v; want the first 1000 bytes, over", len(got), over, err)
	}
	// The engine's writes fail once the client closed the stream; kernel
	// buffers take a few MiB at most.
	e.mu.Lock()
	sent := e.diffSent
	e.mu.Unlock()
	if sent > 16<<20 {
		t.Errorf("the engine sent %d bytes of a %d-byte diff capped at 1000", sent, len(e.diffOut))
	}
	if _, err := sb.Exec(ctx, "echo still here", time.Minute); err != nil {
		t.Fatalf("Exec after a capped diff: %v", err)
	}
	e.mu.Lock()
	e.diffOut = "diff --git a/x b/x\n"
	e.mu.Unlock()
	for _, max := range []int{len("diff --git a/x b/x\n"), 1 << 30} {
		if got, over, err := sandbox.DiffCapped(ctx, sb, max); err != nil || over || got != "diff --git a/x b/x\n" {
			t.Fatalf("DiffCapped(%d) of a short diff = %q, %v, %v; want all of it", max, got, over, err)
		}
	}
	if _, _, err := sandbox.DiffCapped(ctx, sb, 0); err == nil {
		t.Fatal("DiffCapped(0): no error")
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
	d := newDocker(t, srv.URL, sandbox.DockerConfig{Image: "repo/img:7", Network: true, WorkDir: "/work", User: "1000:1000"})
	sandboxtest.Start(t, d, "pulled", sandbox.Spec{Patch: "diff --git a/x b/x\n"})
	pulls := e.requests("POST", "/images/create")
	if len(pulls) != 1 || pulls[0].Query["fromImage"][0] != "repo/img" || pulls[0].Query["tag"][0] != "7" {
		t.Fatalf("pull requests: %+v", pulls)
	}
	creates := e.requests("POST", "/containers/create")
	if hc := creates[len(creates)-1].Body["HostConfig"].(map[string]any); hc["NetworkMode"] != nil {
		t.Errorf("network allowed, yet HostConfig = %v", hc)
	}
	// The patch goes into the workspace volume (the root filesystem is
	// read-only, and a Tmpfs /tmp is not where the engine extracts), as
	// the container's user, and the apply removes it.
	archives := e.requests("PUT", "/archive")
	if len(archives) != 1 || archives[0].Query["path"][0] != "/work" || len(archives[0].Files) != 1 ||
		!strings.HasPrefix(archives[0].Files[0], ".actloop-") || !strings.HasSuffix(archives[0].Files[0], ".patch") ||
		archives[0].Owners[0] != "1000:1000" {
		t.Fatalf("patch upload: %+v", archives)
	}
	var apply []any
	for _, r := range e.requests("POST", "/exec") {
		if c := r.Body["Cmd"].([]any); c[3] == "actloop-apply" {
			apply = c
		}
	}
	if apply == nil || apply[4] != "/work/"+archives[0].Files[0] || !strings.Contains(apply[2].(string), `rm -f "$1"`) {
		t.Fatalf("apply exec %v", apply)
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
	tests := []struct {
		cfg  sandbox.DockerConfig
		want string // the field the error names
	}{
		{sandbox.DockerConfig{Host: "ftp://x"}, "docker host"},
		{sandbox.DockerConfig{WorkDir: "relative"}, "WorkDir"},
		{sandbox.DockerConfig{WorkDir: "/tmp"}, "WorkDir"},
		{sandbox.DockerConfig{WorkDirSizeMB: -1}, "WorkDirSizeMB"},
		{sandbox.DockerConfig{TmpSizeMB: -1}, "TmpSizeMB"},
		{sandbox.DockerConfig{CPUs: -1}, "CPUs"},
		{sandbox.DockerConfig{Limits: sandbox.Limits{MemoryMB: -1}}, "Limits"},
		{sandbox.DockerConfig{NamePrefix: "a/b"}, "NamePrefix"},
		{sandbox.DockerConfig{OutputLimit: -1}, "OutputLimit"},
		{sandbox.DockerConfig{Image: "a b"}, "Image"},
		{sandbox.DockerConfig{Images: []string{"ok:1", ""}}, "Images[1]"},
		{sandbox.DockerConfig{Images: []string{"repo/*:1"}}, "Images[0]"},
		{sandbox.DockerConfig{Images: []string{"repo:1 "}}, "Images[0]"},
		{sandbox.DockerConfig{User: "0:0"}, "User"},
		{sandbox.DockerConfig{User: "nobody"}, "User"},
		{sandbox.DockerConfig{User: "1000"}, "User"},
		{sandbox.DockerConfig{User: "1000:"}, "User"},
		{sandbox.DockerConfig{User: "-1:5"}, "User"},
		{sandbox.DockerConfig{User: "01000:1000"}, "User"},
	}
	for _, tt := range tests {
		_, err := sandbox.NewDocker(tt.cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewDocker(%+v) = %v, want an error naming %s", tt.cfg, err, tt.want)
		}
	}
	// Every problem is reported at once.
	err := sandbox.DockerConfig{User: "root", TmpSizeMB: -1, Images: []string{"*x"}}.Validate()
	for _, field := range []string{"User", "TmpSizeMB", "Images[0]"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("Validate() = %v, want it to name %s", err, field)
		}
	}
	if err := (sandbox.DockerConfig{User: "1000:1000", Images: []string{"*", "python:*", "x"}, WorkDir: "/w"}).Validate(); err != nil {
		t.Errorf("Validate of a good config: %v", err)
	}
}

// TestDockerImageAllowList checks that a Spec's image must be the default
// one or match DockerConfig.Images, and that any other is refused with
// ErrImageNotAllowed, naming the setting, before any request to the engine.
func TestDockerImageAllowList(t *testing.T) {
	images := []string{"python:3.12", "python:3.11-*", "ghcr.io/org/*", "repo@sha256:abc"}
	tests := []struct {
		image string
		ok    bool
	}{
		{"", true},            // the default image
		{"default:1", true},   // named explicitly
		{"python:3.12", true}, // exact
		{"python:3.11-slim", true},
		{"ghcr.io/org/env:7", true},
		{"ghcr.io/org/team/env", true},
		{"repo@sha256:abc", true},
		{"python:3.13", false},
		{"python", false}, // compared as written: not python:3.12
		{"docker.io/library/python:3.12", false},
		{"python:3.11", false},
		{"ghcr.io/org", false},
		{"ghcr.io/orgx/env", false},
		{"ghcr.io/other/env", false},
		{"repo@sha256:abcd", false},
		{"default:2", false},
		{"evil.example/python:3.12", false},
	}
	for _, tt := range tests {
		t.Run(tt.image, func(t *testing.T) {
			e, srv := newFakeEngine(t)
			d := newDocker(t, srv.URL, sandbox.DockerConfig{Image: "default:1", Images: images})
			sb, err := d.Start(context.Background(), "img", sandbox.Spec{Image: tt.image})
			if tt.ok {
				if err != nil {
					t.Fatalf("Start with image %q: %v", tt.image, err)
				}
				if err := sb.Close(context.Background()); err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, sandbox.ErrImageNotAllowed) || !strings.Contains(err.Error(), "ACTLOOP_SANDBOX_IMAGES") ||
				!strings.Contains(err.Error(), tt.image) {
				t.Fatalf("Start with image %q: %v, want ErrImageNotAllowed naming the image and ACTLOOP_SANDBOX_IMAGES", tt.image, err)
			}
			e.mu.Lock()
			defer e.mu.Unlock()
			if len(e.reqs) != 0 {
				t.Fatalf("refused image, yet the engine got %d requests: %+v", len(e.reqs), e.reqs)
			}
		})
	}

	// Without an allow-list only the default image runs; "*" allows any.
	e, srv := newFakeEngine(t)
	d := newDocker(t, srv.URL, sandbox.DockerConfig{Image: "default:1"})
	if _, err := d.Start(context.Background(), "x", sandbox.Spec{Image: "python:3.12"}); !errors.Is(err, sandbox.ErrImageNotAllowed) {
		t.Fatalf("Start with no allow-list: %v, want ErrImageNotAllowed", err)
	}
	d = newDocker(t, srv.URL, sandbox.DockerConfig{Images: []string{"*"}})
	sandboxtest.Start(t, d, "any", sandbox.Spec{Image: "anything/at:all"})
	if creates := e.requests("POST", "/containers/create"); len(creates) != 1 || creates[0].Body["Image"] != "anything/at:all" {
		t.Fatalf("create requests: %+v", creates)
	}
}

// TestDockerCreateSettings checks that the configured user, sizes and
// work dir reach the create request, and that a Spec's HOME wins.
func TestDockerCreateSettings(t *testing.T) {
	e, srv := newFakeEngine(t)
	d := newDocker(t, srv.URL, sandbox.DockerConfig{Image: "img", User: "1000:1001", WorkDir: "/src", WorkDirSizeMB: 512, TmpSizeMB: 64})
	sandboxtest.Start(t, d, "settings", sandbox.Spec{Env: map[string]string{"HOME": "/src/home"}})
	body := e.requests("POST", "/containers/create")[0].Body
	wantHost := `{"NetworkMode":"none","Init":true,"CgroupnsMode":"private","CapDrop":["ALL"],"SecurityOpt":["no-new-privileges:true"],"ReadonlyRootfs":true,
		"Tmpfs":{"/tmp":"rw,exec,nosuid,nodev,size=64m,mode=1777"},
		"Mounts":[{"Type":"volume","Target":"/src","VolumeOptions":{"NoCopy":true,"Labels":{"io.actloop.sandbox":"settings"},
			"DriverConfig":{"Name":"local","Options":{"type":"tmpfs","device":"tmpfs",
				"o":"rw,exec,nosuid,nodev,size=512m,uid=1000,gid=1001,mode=0755"}}}}]}`
	if body["User"] != "1000:1001" || body["WorkingDir"] != "/src" || !jsonEqual(body["Env"], `["HOME=/src/home"]`) ||
		!jsonEqual(body["HostConfig"], wantHost) {
		t.Errorf("create body = %s\nwant User 1000:1001, WorkingDir /src, HOME=/src/home and HostConfig exactly %s", mustJSON(t, body), wantHost)
	}
}

// jsonEqual reports whether v, decoded from JSON, equals the JSON text want.
func jsonEqual(v any, want string) bool {
	var w any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		panic(err)
	}
	return reflect.DeepEqual(v, w)
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// realEngine returns the address of a real engine that answers (DOCKER_HOST
// or the default socket) and speaks an API version the backend does, and
// the image to test with: ACTLOOP_TEST_DOCKER_IMAGE; unset,
// buildpack-deps:bookworm-scm (bash and git) where the engine has it,
// else one made of this host's bash, git and coreutils (hostImage), since
// the engine may have no registry to pull from. It skips the test where
// there is no such engine.
func realEngine(t *testing.T) (host, image string) {
	t.Helper()
	host = os.Getenv("DOCKER_HOST")
	probe := newDocker(t, host, sandbox.DockerConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := probe.Ping(ctx); err != nil {
		t.Skipf("no Docker engine to test with: %v", err)
	}
	version, _ := probe.APIVersion(ctx)
	image = os.Getenv("ACTLOOP_TEST_DOCKER_IMAGE")
	if image == "" {
		image = "buildpack-deps:bookworm-scm"
		if ok, err := probe.ImageExists(ctx, image); err != nil {
			t.Fatal(err)
		} else if !ok {
			image = hostImage(t, probe)
		}
	}
	t.Logf("Engine API %s, image %s", version, image)
	return host, image
}

// TestDockerConformance runs the suite against a real engine (realEngine).
func TestDockerConformance(t *testing.T) {
	host, image := realEngine(t)
	const limit = 2000
	sandboxtest.Run(t, func(t *testing.T) sandbox.Backend {
		return newDocker(t, host, sandbox.DockerConfig{Image: image, OutputLimit: limit, Limits: sandbox.DefaultLimits(),
			NamePrefix: fmt.Sprintf("actloop-test-%d-", os.Getpid())})
	}, sandboxtest.Options{OutputLimit: limit, Shell: true})
}

// TestDockerContainment checks, in a real engine's container, what the
// fake engines cannot: the user, no capabilities, no-new-privileges, the
// read-only root, a cgroup namespace of its own, no network but loopback,
// and the process and memory limits. It reads /proc and /sys with bash
// alone, which every test image has.
func TestDockerContainment(t *testing.T) {
	host, image := realEngine(t)
	d := newDocker(t, host, sandbox.DockerConfig{Image: image, User: "1000:1001", Limits: sandbox.Limits{MaxProcs: 77, MemoryMB: 300},
		NamePrefix: fmt.Sprintf("actloop-test-%d-", os.Getpid())})
	sb := sandboxtest.Start(t, d, "containment", sandbox.Spec{})
	// lines prints the lines of a file that start with a prefix.
	const lines = `lines() { while IFS= read -r l; do if [[ $l == "$2"* ]]; then echo "$l"; fi; done < "$1"; }; `
	tests := []struct{ cmd, want string }{
		{`echo $UID $EUID ${GROUPS[*]}`, "1000 1000 1001\n"},
		{lines + `lines /proc/self/status CapEff; lines /proc/self/status CapBnd; lines /proc/self/status NoNewPrivs`,
			"CapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nNoNewPrivs:\t1\n"},
		{`{ : > /etc/x; } 2>/dev/null && echo writable || echo read-only; : > /tmp/x && : > /workspace/x && echo scratch ok`, "read-only\nscratch ok\n"},
		// A cgroup namespace of its own: every hierarchy's path is "/".
		{`while IFS=: read -r _ _ p; do [[ $p == / ]] || echo "$p"; done < /proc/self/cgroup; echo done`, "done\n"},
		{lines + `lines /proc/net/dev "  " | while read -r ifc _; do echo "$ifc"; done`, "lo:\n"},
		{`cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max`, "77\n"},
		{`cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes`, fmt.Sprintf("%d\n", 300<<20)},
	}
	for _, tt := range tests {
		sandboxtest.WantOutput(t, sb, tt.cmd, tt.want)
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
