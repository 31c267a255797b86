package sandbox_test

import (
	"archive/tar"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/actloop/actloop/pkg/sandbox"
	"github.com/actloop/actloop/pkg/sandbox/sandboxtest"
)

// hostEngine answers the Engine API calls of the Docker backend by running
// each "container" on this host: its volume mounts are host directories,
// execs run with the host's bash (and git) in them, everything else of the
// container (its /tmp included) is the host's. It keeps the rules of the
// real engine that the backend depends on: an archive is extracted only
// into a volume, since the root filesystem is read-only (and a Tmpfs mount
// is not a volume); an exec in a container that is not running is 409, in
// one that is gone 404; the API versions are Docker 20.10's. Users,
// capabilities and limits are not emulated.
type hostEngine struct {
	t   testing.TB
	dir string

	mu    sync.Mutex
	ctrs  map[string]*hostContainer
	execs map[string]*hostExec
	seq   int
}

type hostContainer struct {
	env     []string
	volumes map[string]string // container path -> host directory
	running bool
	procs   map[*exec.Cmd]bool
}

type hostExec struct {
	ctr      string
	cmd, env []string
	workDir  string
	running  bool
	code     int
}

func newHostEngine(t testing.TB) *httptest.Server {
	e := &hostEngine{t: t, dir: t.TempDir(), ctrs: map[string]*hostContainer{}, execs: map[string]*hostExec{}}
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv
}

func hostError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"message": msg})
}

// hostPath maps a container path under one of c's volumes to the host.
func (c *hostContainer) hostPath(p string) (string, bool) {
	for target, dir := range c.volumes {
		if rel, ok := strings.CutPrefix(p, target); ok && (rel == "" || rel[0] == '/') {
			return filepath.Join(dir, filepath.FromSlash(rel)), true
		}
	}
	return "", false
}

func (e *hostEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p, ok := docker2010.route(w, r)
	if !ok {
		return
	}
	parts := strings.Split(strings.Trim(p, "/"), "/")
	switch {
	case r.Method == "GET" && p == "/_ping":
		_, _ = io.WriteString(w, "OK")
	case r.Method == "POST" && p == "/containers/create":
		e.create(w, r)
	case len(parts) >= 2 && parts[0] == "containers":
		e.container(w, r, parts[1], parts[2:])
	case len(parts) == 3 && parts[0] == "exec" && parts[2] == "start":
		e.execStart(w, r, parts[1])
	case r.Method == "GET" && len(parts) == 3 && parts[0] == "exec" && parts[2] == "json":
		e.mu.Lock()
		x, ok := e.execs[parts[1]]
		e.mu.Unlock()
		if !ok {
			hostError(w, http.StatusNotFound, "No such exec instance")
			return
		}
		e.mu.Lock()
		fmt.Fprintf(w, `{"Running":%v,"ExitCode":%d}`, x.running, x.code)
		e.mu.Unlock()
	default:
		hostError(w, http.StatusBadRequest, "unexpected "+r.Method+" "+p)
	}
}

func (e *hostEngine) create(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Env        []string
		HostConfig struct {
			ReadonlyRootfs bool
			Mounts         []struct{ Type, Target string }
		}
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		hostError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !body.HostConfig.ReadonlyRootfs {
		hostError(w, http.StatusBadRequest, "this fake engine only runs containers with a read-only root")
		return
	}
	name := r.URL.Query().Get("name")
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.ctrs[name]; ok {
		hostError(w, http.StatusConflict, "container name "+name+" is already in use")
		return
	}
	c := &hostContainer{env: body.Env, volumes: map[string]string{}, procs: map[*exec.Cmd]bool{}}
	for _, m := range body.HostConfig.Mounts {
		if m.Type != "volume" {
			continue
		}
		e.seq++
		dir := filepath.Join(e.dir, fmt.Sprintf("vol%d", e.seq))
		if err := os.Mkdir(dir, 0o755); err != nil {
			hostError(w, http.StatusInternalServerError, err.Error())
			return
		}
		c.volumes[path.Clean(m.Target)] = dir
	}
	e.ctrs[name] = c
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, `{"Id":"c0ffee","Warnings":[]}`)
}

func (e *hostEngine) container(w http.ResponseWriter, r *http.Request, name string, rest []string) {
	e.mu.Lock()
	c, ok := e.ctrs[name]
	e.mu.Unlock()
	if !ok {
		hostError(w, http.StatusNotFound, "No such container: "+name)
		return
	}
	op := ""
	if len(rest) > 0 {
		op = rest[0]
	}
	switch {
	case r.Method == "DELETE" && op == "":
		e.mu.Lock()
		delete(e.ctrs, name)
		for cmd := range c.procs {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		e.mu.Unlock()
		for _, dir := range c.volumes {
			_ = os.RemoveAll(dir)
		}
		w.WriteHeader(http.StatusNoContent)
	case r.Method == "POST" && op == "start":
		e.mu.Lock()
		c.running = true
		e.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	case r.Method == "GET" && op == "json":
		e.mu.Lock()
		fmt.Fprintf(w, `{"State":{"Running":%v}}`, c.running)
		e.mu.Unlock()
	case r.Method == "PUT" && op == "archive":
		dir, ok := c.hostPath(r.URL.Query().Get("path"))
		if !ok {
			hostError(w, http.StatusBadRequest, "container rootfs is marked read-only")
			return
		}
		if err := untar(r.Body, dir); err != nil {
			hostError(w, http.StatusInternalServerError, err.Error())
			return
		}
		w.WriteHeader(http.StatusOK)
	case r.Method == "POST" && op == "exec":
		var body struct {
			Cmd, Env   []string
			WorkingDir string
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			hostError(w, http.StatusBadRequest, err.Error())
			return
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		if !c.running {
			hostError(w, http.StatusConflict, "container "+name+" is not running")
			return
		}
		e.seq++
		id := fmt.Sprintf("exec%d", e.seq)
		e.execs[id] = &hostExec{ctr: name, cmd: body.Cmd, env: body.Env, workDir: body.WorkingDir}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"Id":%q}`, id)
	default:
		hostError(w, http.StatusBadRequest, "unexpected "+r.Method+" "+op)
	}
}

// muxWriter writes one frame of the multiplexed stream per Write.
type muxWriter struct {
	mu     *sync.Mutex
	w      http.ResponseWriter
	stream byte
}

func (m *muxWriter) Write(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	hdr := []byte{m.stream, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(hdr[4:], uint32(len(p)))
	if _, err := m.w.Write(append(hdr, p...)); err != nil {
		return 0, err
	}
	m.w.(http.Flusher).Flush()
	return len(p), nil
}

func (e *hostEngine) execStart(w http.ResponseWriter, r *http.Request, id string) {
	e.mu.Lock()
	x, ok := e.execs[id]
	var c *hostContainer
	if ok {
		c, ok = e.ctrs[x.ctr]
	}
	if !ok || !c.running {
		e.mu.Unlock()
		hostError(w, http.StatusNotFound, "No such exec instance")
		return
	}
	// Arguments and the working dir that name a volume's path are mapped
	// to the host (the apply's patch file, say).
	argv := make([]string, len(x.cmd))
	for i, a := range x.cmd {
		argv[i] = a
		if hp, ok := c.hostPath(a); ok {
			argv[i] = hp
		}
	}
	dir, ok := c.hostPath(x.workDir)
	if !ok {
		dir = os.TempDir()
	}
	cmd := exec.CommandContext(r.Context(), argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(append([]string{"PATH=" + os.Getenv("PATH")}, c.env...), x.env...)
	var mu sync.Mutex
	cmd.Stdout = &muxWriter{mu: &mu, w: w, stream: 1}
	cmd.Stderr = &muxWriter{mu: &mu, w: w, stream: 2}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	w.Header().Set("Content-Type", "application/vnd.docker.multiplexed-stream")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	err := cmd.Start()
	if err == nil {
		x.running = true
		c.procs[cmd] = true
	}
	e.mu.Unlock()
	if err == nil {
		err = cmd.Wait()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(c.procs, cmd)
	x.running = false
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee) && ee.Exited():
		x.code = ee.ExitCode()
	case errors.As(err, &ee):
		x.code = 128 + int(ee.Sys().(syscall.WaitStatus).Signal())
	case err != nil:
		x.code = 126
	}
}

// untar extracts a tar stream of directories, regular files and symlinks
// into dir.
func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		name := filepath.Join(dir, filepath.FromSlash(path.Clean("/"+h.Name)))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(name, h.FileInfo().Mode().Perm())
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, name)
		case tar.TypeReg:
			var f *os.File
			if f, err = os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, h.FileInfo().Mode().Perm()); err == nil {
				_, err = io.Copy(f, tr)
				err = errors.Join(err, f.Close())
			}
		default:
			err = fmt.Errorf("tar entry %s: type %c", h.Name, h.Typeflag)
		}
		if err != nil {
			return err
		}
	}
}

// TestDockerHostConformance runs the conformance suite through the Docker
// backend against hostEngine, where no real engine is needed: every
// request the backend makes, with the container settings it makes them
// with, has to work for the suite to pass.
func TestDockerHostConformance(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	sandboxtest.Run(t, func(t *testing.T) sandbox.Backend {
		srv := newHostEngine(t)
		return newDocker(t, srv.URL, sandbox.DockerConfig{Image: "host", OutputLimit: conformanceLimit, Limits: sandbox.DefaultLimits()})
	}, sandboxtest.Options{OutputLimit: conformanceLimit, Shell: true})
}
