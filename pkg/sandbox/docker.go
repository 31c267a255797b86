package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Docker is a Backend that runs each sandbox as a container over the
// Docker Engine HTTP API: a container per sandbox from the sample's image
// (Spec.Image if DockerConfig allows it, else DockerConfig.Image) kept
// alive by `sleep infinity`, commands run with bash through exec, the
// workspace copied in as a tar archive, and the diff taken with git in the
// container, as Local does. Containers run as an unprivileged user with
// no capabilities, no-new-privileges, a read-only root filesystem and a
// cgroup namespace of their own; the workspace and /tmp are size-limited
// in-memory filesystems. They get memory, process and CPU limits and no
// network unless DockerConfig.Network is set. Handles are
// "docker:<container name>". The backend speaks Engine API versions 1.41
// to 1.55 (Docker 20.10 and later), the newest the engine also speaks,
// asked of it on first use; an engine with none of them in common fails
// every call with ErrDockerAPIVersion.
type Docker struct {
	cfg      DockerConfig
	uid, gid int // of cfg.User
	client   *http.Client
	base     string // scheme://host, without the API version

	negotiating chan struct{}          // held by the one negotiating
	version     atomic.Pointer[string] // negotiated API version; nil until then

	mu   sync.Mutex
	live map[string]bool
}

var _ Backend = (*Docker)(nil)

const (
	dockerHandlePrefix = "docker:"
	dockerLabel        = "io.actloop.sandbox"
	// dockerKillTimeout bounds the exec that kills a timed-out command.
	dockerKillTimeout = 30 * time.Second
	// dockerMaxDiff bounds a diff read from a container.
	dockerMaxDiff = 256 << 20
)

// NewDocker returns a Docker backend; it does not contact the engine (see
// Ping). Close releases its idle connections.
func NewDocker(cfg DockerConfig) (*Docker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("docker sandbox config: %w", err)
	}
	if cfg.Host == "" {
		cfg.Host = DefaultDockerHost
	}
	if cfg.WorkDir == "" {
		cfg.WorkDir = DefaultDockerWorkDir
	}
	if cfg.OutputLimit == 0 {
		cfg.OutputLimit = DefaultOutputLimit
	}
	if cfg.NamePrefix == "" {
		cfg.NamePrefix = "actloop-"
	}
	if cfg.User == "" {
		cfg.User = DefaultDockerUser
	}
	if cfg.WorkDirSizeMB == 0 {
		cfg.WorkDirSizeMB = DefaultDockerWorkDirSizeMB
	}
	if cfg.TmpSizeMB == 0 {
		cfg.TmpSizeMB = DefaultDockerTmpSizeMB
	}
	uid, gid, err := parseDockerUser(cfg.User)
	if err != nil {
		return nil, fmt.Errorf("docker sandbox config: User: %w", err)
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("docker host %q: %w", cfg.Host, err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	d := &Docker{cfg: cfg, uid: uid, gid: gid, client: &http.Client{Transport: tr}, live: make(map[string]bool),
		negotiating: make(chan struct{}, 1)}
	switch u.Scheme {
	case "unix":
		sock := u.Path
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var dialer net.Dialer
			return dialer.DialContext(ctx, "unix", sock)
		}
		d.base = "http://docker"
	case "tcp", "http":
		d.base = "http://" + u.Host
	default:
		return nil, fmt.Errorf("docker host %q: scheme must be unix, tcp or http", cfg.Host)
	}
	return d, nil
}

// Wire types of the Engine API (only the fields used).
type (
	dockerCreate struct {
		Image           string            `json:"Image"`
		User            string            `json:"User"`
		Cmd             []string          `json:"Cmd"`
		Entrypoint      []string          `json:"Entrypoint"`
		WorkingDir      string            `json:"WorkingDir"`
		Env             []string          `json:"Env,omitempty"`
		Labels          map[string]string `json:"Labels"`
		NetworkDisabled bool              `json:"NetworkDisabled,omitempty"`
		HostConfig      dockerHostConfig  `json:"HostConfig"`
	}
	dockerHostConfig struct {
		NetworkMode    string            `json:"NetworkMode,omitempty"`
		Memory         int64             `json:"Memory,omitempty"`
		MemorySwap     int64             `json:"MemorySwap,omitempty"`
		PidsLimit      *int64            `json:"PidsLimit,omitempty"`
		NanoCpus       int64             `json:"NanoCpus,omitempty"`
		Ulimits        []dockerUlimit    `json:"Ulimits,omitempty"`
		Init           bool              `json:"Init"`
		CgroupnsMode   string            `json:"CgroupnsMode"`
		CapDrop        []string          `json:"CapDrop"`
		SecurityOpt    []string          `json:"SecurityOpt"`
		ReadonlyRootfs bool              `json:"ReadonlyRootfs"`
		Tmpfs          map[string]string `json:"Tmpfs"`
		Mounts         []dockerMount     `json:"Mounts"`
	}
	// dockerMount is an entry of HostConfig.Mounts (definition Mount).
	dockerMount struct {
		Type          string              `json:"Type"`
		Target        string              `json:"Target"`
		VolumeOptions dockerVolumeOptions `json:"VolumeOptions"`
	}
	dockerVolumeOptions struct {
		NoCopy       bool              `json:"NoCopy"`
		Labels       map[string]string `json:"Labels"`
		DriverConfig struct {
			Name    string            `json:"Name"`
			Options map[string]string `json:"Options"`
		} `json:"DriverConfig"`
	}
	dockerUlimit struct {
		Name string `json:"Name"`
		Soft int64  `json:"Soft"`
		Hard int64  `json:"Hard"`
	}
	dockerExecCreate struct {
		AttachStdin  bool     `json:"AttachStdin,omitempty"`
		AttachStdout bool     `json:"AttachStdout"`
		AttachStderr bool     `json:"AttachStderr"`
		Tty          bool     `json:"Tty"`
		Cmd          []string `json:"Cmd"`
		Env          []string `json:"Env,omitempty"`
		WorkingDir   string   `json:"WorkingDir"`
	}
	dockerID struct {
		ID string `json:"Id"`
	}
	dockerExecInspect struct {
		Running  bool `json:"Running"`
		ExitCode int  `json:"ExitCode"`
	}
	dockerContainerInspect struct {
		State struct {
			Running bool `json:"Running"`
		} `json:"State"`
	}
)

func (d *Docker) name(id string) string { return d.cfg.NamePrefix + id }

// Start creates and starts the container, copies the workspace in,
// applies the patch and runs the setup commands. A container left under
// the same name is replaced; on failure the container is removed. An
// image that DockerConfig does not allow fails with ErrImageNotAllowed
// before the engine is contacted.
func (d *Docker) Start(ctx context.Context, id string, spec Spec) (Sandbox, error) {
	if err := ValidateID(id); err != nil {
		return nil, err
	}
	if err := validateEnv(spec.Env); err != nil {
		return nil, fmt.Errorf("start sandbox %s: %w", id, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("start sandbox %s: %w", id, err)
	}
	image, err := d.image(spec.Image)
	if err != nil {
		return nil, fmt.Errorf("start sandbox %s: %w", id, err)
	}
	d.mu.Lock()
	if d.live[id] {
		d.mu.Unlock()
		return nil, fmt.Errorf("start sandbox %s: %w", id, ErrExists)
	}
	d.live[id] = true
	d.mu.Unlock()
	sb, err := d.start(ctx, id, image, spec)
	if err != nil {
		if rerr := d.remove(context.WithoutCancel(ctx), d.name(id)); rerr != nil {
			err = errors.Join(err, rerr)
		}
		d.release(id)
		return nil, err
	}
	return sb, nil
}

func (d *Docker) release(id string) {
	d.mu.Lock()
	delete(d.live, id)
	d.mu.Unlock()
}

func (d *Docker) start(ctx context.Context, id, image string, spec Spec) (*dockerSandbox, error) {
	name := d.name(id)
	if err := d.remove(ctx, name); err != nil {
		return nil, fmt.Errorf("start sandbox %s: remove leftover: %w", id, err)
	}
	env := envList(spec.Env)
	create := d.createBody(id, image, spec.Env, spec.Serve)
	// POST /containers/create?name=...; 404 when the image is missing.
	q := url.Values{"name": {name}}
	err := d.call(ctx, http.MethodPost, "/containers/create", q, create, nil)
	if isStatus(err, http.StatusNotFound) {
		if err = d.pull(ctx, image); err == nil {
			err = d.call(ctx, http.MethodPost, "/containers/create", q, create, nil)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("start sandbox %s: %w", id, err)
	}
	// POST /containers/{id}/start
	if err := d.call(ctx, http.MethodPost, "/containers/"+name+"/start", nil, nil, nil); err != nil {
		return nil, fmt.Errorf("start sandbox %s: %w", id, err)
	}
	sb := d.newSandbox(id, env)
	if spec.Workspace != "" {
		if err := sb.upload(ctx, spec.Workspace); err != nil {
			return nil, fmt.Errorf("start sandbox %s: copy workspace: %w", id, err)
		}
	}
	if strings.TrimSpace(spec.Patch) != "" {
		if err := sb.apply(ctx, spec.Patch); err != nil {
			return nil, fmt.Errorf("start sandbox %s: %w", id, err)
		}
	}
	if err := runSetup(ctx, sb, spec); err != nil {
		return nil, fmt.Errorf("start sandbox %s: %w", id, err)
	}
	return sb, nil
}

// pull fetches an image: POST /images/create?fromImage=...&tag=...;
// the answer is a JSON progress stream whose last message may be an error.
func (d *Docker) pull(ctx context.Context, image string) error {
	ref, tag := image, ""
	if i := strings.LastIndexByte(image, ':'); i > strings.LastIndexByte(image, '/') && !strings.Contains(image, "@") {
		ref, tag = image[:i], image[i+1:]
	}
	q := url.Values{"fromImage": {ref}}
	if tag != "" {
		q.Set("tag", tag)
	}
	resp, err := d.do(ctx, http.MethodPost, "/images/create", q, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := readProgress(resp.Body); err != nil {
		return fmt.Errorf("pull %s: %w", image, err)
	}
	return nil
}

// remove deletes a container and its anonymous volumes, running or not:
// DELETE /containers/{id}?force=true&v=true. A missing one is fine.
func (d *Docker) remove(ctx context.Context, name string) error {
	err := d.call(ctx, http.MethodDelete, "/containers/"+name, url.Values{"force": {"true"}, "v": {"true"}}, nil, nil)
	if err != nil && !isStatus(err, http.StatusNotFound) {
		return err
	}
	return nil
}

// Attach returns the sandbox of a handle: GET /containers/{id}/json;
// ErrNotFound when the container is gone or no longer runs.
func (d *Docker) Attach(ctx context.Context, handle string) (Sandbox, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("attach sandbox: %w", err)
	}
	name, ok := strings.CutPrefix(handle, dockerHandlePrefix)
	id, idOK := strings.CutPrefix(name, d.cfg.NamePrefix)
	if !ok || !idOK || ValidateID(id) != nil {
		return nil, fmt.Errorf("attach %q: %w (want %s%s<id>)", handle, ErrInvalidHandle, dockerHandlePrefix, d.cfg.NamePrefix)
	}
	var info dockerContainerInspect
	err := d.call(ctx, http.MethodGet, "/containers/"+name+"/json", nil, nil, &info)
	switch {
	case isStatus(err, http.StatusNotFound):
		return nil, fmt.Errorf("attach sandbox %s: %w", id, ErrNotFound)
	case err != nil:
		return nil, fmt.Errorf("attach sandbox %s: %w", id, err)
	case !info.State.Running:
		return nil, fmt.Errorf("attach sandbox %s: container is not running: %w", id, ErrNotFound)
	}
	return d.newSandbox(id, nil), nil
}

// dockerSandbox is one container.
type dockerSandbox struct {
	d    *Docker
	id   string
	name string
	env  []string

	mu      sync.Mutex
	closed  bool
	done    chan struct{}  // closed by Close: interrupts running execs
	serving *dockerServing // the handler it serves, if any (Serve)
}

var (
	_ Sandbox      = (*dockerSandbox)(nil)
	_ CappedDiffer = (*dockerSandbox)(nil)
)

func (d *Docker) newSandbox(id string, env []string) *dockerSandbox {
	return &dockerSandbox{d: d, id: id, name: d.name(id), env: env, done: make(chan struct{})}
}

func (s *dockerSandbox) Handle() string { return dockerHandlePrefix + s.name }

// begin returns ctx, also cancelled by Close, or ErrNotFound after Close.
func (s *dockerSandbox) begin(ctx context.Context) (context.Context, context.CancelFunc, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, nil, fmt.Errorf("sandbox %s: %w", s.id, ErrNotFound)
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("sandbox %s: %w", s.id, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-s.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel, nil
}

// lost maps the engine's answers for a container that is gone or stopped
// (404, 409 "is not running") to ErrNotFound.
func (s *dockerSandbox) lost(ctx context.Context, err error) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	switch {
	case closed:
		return fmt.Errorf("sandbox %s closed: %w", s.id, ErrNotFound)
	case isStatus(err, http.StatusNotFound), isStatus(err, http.StatusConflict):
		return fmt.Errorf("sandbox %s: %w: %w", s.id, ErrNotFound, err)
	case ctx.Err() != nil:
		return fmt.Errorf("sandbox %s: %w", s.id, ctx.Err())
	}
	return fmt.Errorf("sandbox %s: %w", s.id, err)
}

// execRaw runs argv in the container and demultiplexes its output:
// POST /containers/{id}/exec, POST /exec/{id}/start (the
// multiplexed stream as the response body), GET /exec/{id}/json for
// the exit code.
func (s *dockerSandbox) execRaw(ctx context.Context, argv []string, stdout, stderr io.Writer) (int, error) {
	var ex dockerID
	if err := s.d.call(ctx, http.MethodPost, "/containers/"+s.name+"/exec", nil, dockerExecCreate{
		AttachStdout: true, AttachStderr: true, Cmd: argv, Env: s.env, WorkingDir: s.d.cfg.WorkDir,
	}, &ex); err != nil {
		return 0, err
	}
	resp, err := s.d.do(ctx, http.MethodPost, "/exec/"+ex.ID+"/start", nil, map[string]bool{"Detach": false, "Tty": false})
	if err != nil {
		return 0, err
	}
	err = demux(resp.Body, stdout, stderr)
	resp.Body.Close()
	if err != nil {
		return 0, fmt.Errorf("docker exec output: %w", err)
	}
	var info dockerExecInspect
	if err := s.d.call(ctx, http.MethodGet, "/exec/"+ex.ID+"/json", nil, nil, &info); err != nil {
		return 0, err
	}
	if info.Running {
		return 0, errors.New("docker exec: output ended while the process still runs")
	}
	return info.ExitCode, nil
}

// Exec runs cmd with bash. Its process group is recorded in the
// container, so a timeout kills the command and everything it started
// (`set -m` gives the background job a group of its own).
func (s *dockerSandbox) Exec(ctx context.Context, cmd string, timeout time.Duration) (ExecResult, error) {
	ctx, end, err := s.begin(ctx)
	if err != nil {
		return ExecResult{}, err
	}
	defer end()
	token := make([]byte, 8)
	_, _ = rand.Read(token)
	pgidFile := "/tmp/.actloop-exec-" + hex.EncodeToString(token)
	// Job control is on only while the command starts (its own process
	// group); left on, bash 5 reports the job's end ("[1]+ Done ...")
	// into the output, and wait reports a killed one.
	wrapper := `set -m; bash -c "$1" & set +m; echo $! > "$2"; wait $! 2>/dev/null; rc=$?; rm -f "$2"; exit $rc`
	argv := []string{"bash", "-c", wrapper, "actloop-exec", cmd, pgidFile}

	runCtx, cancel := ctx, context.CancelFunc(func() {})
	if timeout > 0 {
		runCtx, cancel = context.WithTimeoutCause(ctx, timeout, errTimeout)
	}
	defer cancel()
	// The exec's requests run on execCtx, not runCtx: after a timeout its
	// output is still read to the end, which the kill brings; a process
	// that left the group and holds the output open is cut off after
	// pipeGrace.
	execCtx, cancelExec := context.WithCancel(ctx)
	defer cancelExec()
	timedOut := make(chan struct{})
	stopKill := context.AfterFunc(runCtx, func() {
		if !errors.Is(context.Cause(runCtx), errTimeout) {
			return
		}
		close(timedOut)
		kctx, kcancel := context.WithTimeout(context.WithoutCancel(ctx), dockerKillTimeout)
		defer kcancel()
		_, _ = s.execRaw(kctx, []string{"bash", "-c", `kill -KILL -- "-$(cat "$1")" 2>/dev/null; true`, "actloop-kill", pgidFile}, io.Discard, io.Discard)
		time.AfterFunc(pipeGrace, cancelExec)
	})
	defer stopKill()

	out := newHeadTail(s.d.cfg.OutputLimit)
	start := time.Now()
	code, err := s.execRaw(execCtx, argv, out, out)
	res := ExecResult{ReturnCode: code, Duration: time.Since(start)}
	res.Output, res.Truncated, res.Replaced = out.output()
	select {
	case <-timedOut:
		res.TimedOut, res.ReturnCode = true, -1
		if err != nil && ctx.Err() == nil && execCtx.Err() != nil {
			err = nil // cut off after the kill
		}
	default:
	}
	if err != nil {
		return res, s.lost(ctx, err)
	}
	return res, nil
}

// dockerDiffScript stages everything into a temporary copy of the index
// and diffs it against HEAD (the empty tree for an unborn HEAD), as
// localSandbox.Diff does.
const dockerDiffScript = `[ -d .git ] || exit 0
idx=$(mktemp) || exit 1
cp .git/index "$idx" 2>/dev/null || rm -f "$idx"
export GIT_INDEX_FILE="$idx" GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_TERMINAL_PROMPT=0
g() { git -c safe.directory='*' -c core.fsmonitor=false -c core.pager=cat "$@"; }
g add --all >&2 || { rc=$?; rm -f "$idx"; exit $rc; }
set -- diff --cached --binary --no-color --no-ext-diff --no-textconv --src-prefix=a/ --dst-prefix=b/
g rev-parse --verify --quiet 'HEAD^{commit}' >/dev/null && set -- "$@" HEAD
g "$@"; rc=$?; rm -f "$idx"; exit $rc`

func (s *dockerSandbox) Diff(ctx context.Context) (string, error) {
	d, _, err := s.diff(ctx, -1)
	return d, err
}

// DiffCapped is Diff read up to max+1 bytes: the exec's output stream is
// closed as soon as the diff passes max (git then dies of a broken pipe),
// so a huge file in the sandbox costs the worker no more than max bytes.
func (s *dockerSandbox) DiffCapped(ctx context.Context, max int) (string, bool, error) {
	if max <= 0 {
		return "", false, fmt.Errorf("diff sandbox %s: cap %d is not positive", s.id, max)
	}
	return s.diff(ctx, max)
}

// diff takes the diff, capped at max bytes unless max < 0 (then at
// dockerMaxDiff, past which it is an error).
func (s *dockerSandbox) diff(ctx context.Context, max int) (string, bool, error) {
	ctx, end, err := s.begin(ctx)
	if err != nil {
		return "", false, err
	}
	defer end()
	var stdout bytes.Buffer
	var w io.Writer = &limitedWriter{w: &stdout, n: dockerMaxDiff}
	var capped *capWriter
	if max >= 0 {
		// Its failed write ends the demux and so closes the stream.
		capped = &capWriter{max: max, full: func() {}}
		w = capped
	}
	stderr := newHeadTail(4000)
	code, err := s.execRaw(ctx, []string{"bash", "-c", dockerDiffScript}, w, stderr)
	switch {
	case capped != nil && capped.over:
		if err := ctx.Err(); err != nil {
			return "", false, s.lost(ctx, err)
		}
		return string(capped.buf), true, nil
	case err != nil:
		return "", false, s.lost(ctx, err)
	case code != 0:
		return "", false, fmt.Errorf("diff sandbox %s: git exited with code %d: %s", s.id, code, strings.TrimSpace(stderr.String()))
	case capped != nil:
		return string(capped.buf), false, nil
	}
	return stdout.String(), false, nil
}

// limitedWriter fails once more than n bytes were written.
type limitedWriter struct {
	w io.Writer
	n int64
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.n {
		return 0, fmt.Errorf("more than %d bytes", dockerMaxDiff)
	}
	l.n -= int64(len(p))
	return l.w.Write(p)
}

// apply uploads the patch into WorkDir and runs git apply on it. The
// patch goes to WorkDir, not /tmp: the engine extracts archives only into
// volumes when the root filesystem is read-only, and a tmpfs is not one.
// The script removes it whatever git says.
func (s *dockerSandbox) apply(ctx context.Context, patch string) error {
	token := make([]byte, 8)
	_, _ = rand.Read(token)
	name := ".actloop-" + hex.EncodeToString(token) + ".patch"
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(patch)), Typeflag: tar.TypeReg,
		Uid: s.d.uid, Gid: s.d.gid}); err != nil {
		return err
	}
	if _, err := io.WriteString(tw, patch); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := s.putArchive(ctx, s.d.cfg.WorkDir, bytes.NewReader(buf.Bytes())); err != nil {
		return s.lost(ctx, err)
	}
	stderr := newHeadTail(4000)
	code, err := s.execRaw(ctx, []string{"bash", "-c", `git -c safe.directory='*' apply --whitespace=nowarn "$1"; rc=$?; rm -f "$1"; exit $rc`,
		"actloop-apply", path.Join(s.d.cfg.WorkDir, name)}, io.Discard, stderr)
	if err != nil {
		return s.lost(ctx, err)
	}
	if code != 0 {
		return fmt.Errorf("%w: git apply exited with code %d: %s", ErrPatch, code, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// putArchive extracts a tar archive into dir in the container:
// PUT /containers/{id}/archive?path=dir.
func (s *dockerSandbox) putArchive(ctx context.Context, dir string, archive io.Reader) error {
	return s.d.call(ctx, http.MethodPut, "/containers/"+s.name+"/archive", url.Values{"path": {dir}}, archive, nil)
}

// upload copies the workspace directory into WorkDir as a tar stream:
// regular files, directories and symlinks with their modes and times,
// owned by the container's user.
func (s *dockerSandbox) upload(ctx context.Context, workspace string) error {
	src, err := filepath.EvalSymlinks(workspace)
	if err != nil {
		return err
	}
	err = s.uploadTree(ctx, src)
	if versionRefused(err) {
		// The version is negotiated anew; the stream was spent.
		err = s.uploadTree(ctx, src)
	}
	return err
}

func (s *dockerSandbox) uploadTree(ctx context.Context, src string) error {
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(writeTar(ctx, pw, src, s.d.uid, s.d.gid))
	}()
	err := s.putArchive(ctx, s.d.cfg.WorkDir, pr)
	pr.CloseWithError(errors.New("upload ended"))
	return err
}

// writeTar writes the tree under src as a tar stream whose entries belong
// to uid:gid: the engine gives extracted files the ids of their headers.
func writeTar(ctx context.Context, w io.Writer, src string, uid, gid int) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(src, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil || rel == "." {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(path); err != nil {
				return err
			}
		} else if !info.Mode().IsRegular() && !info.IsDir() {
			return nil // sockets, pipes, devices
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		hdr.Uname, hdr.Gname, hdr.Uid, hdr.Gid = "", "", uid, gid
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// Close removes the container; it is idempotent and also succeeds when
// the container already died or was removed.
func (s *dockerSandbox) Close(ctx context.Context) error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.done)
	}
	v := s.serving
	s.serving = nil
	s.mu.Unlock()
	if v != nil {
		v.stop()
	}
	if err := s.d.remove(context.WithoutCancel(ctx), s.name); err != nil {
		return fmt.Errorf("close sandbox %s: %w", s.id, err)
	}
	s.d.release(s.id)
	return nil
}
