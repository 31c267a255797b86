package sandbox

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
)

// A Docker sandbox serves a handler through a tunnel: the program's own
// executable, copied into the container's DockerServeDir (a volume it has
// when started with Spec.Serve), runs there
// (a long-lived exec) listening on ServePort of the container's loopback,
// which every command of the container shares and which exists without a
// network; each connection it accepts becomes a stream of one yamux
// session over the exec's stdin and stdout to the worker, which serves
// the handler on them. No path of the worker's host is mounted, so it
// works with an engine on another host; the executable must run in the
// image (actloop's images build it static).

// DockerServeDir is where a container started with Spec.Serve has a
// volume (a tmpfs of dockerServeDirMB) for the forwarder: the root is
// read-only, and the engine cannot copy into a tmpfs mount such as /tmp.
const DockerServeDir = "/.actloop"

// dockerServeDirMB is the size of DockerServeDir's tmpfs: room for the
// executable.
const dockerServeDirMB = 512

// tunnelFlag is the forwarder's first argument as a tunnel.
const tunnelFlag = "--tunnel"

// tunnelReady is what a tunnel writes on its first stream once it listens.
const tunnelReady = "ready\n"

// tunnelStartTimeout bounds a tunnel's start: copying the executable in,
// and its listening.
const tunnelStartTimeout = time.Minute

// tunnel listens on addr and passes each connection it accepts to a new
// stream of a yamux session over in and out, after one stream that says
// it is ready; it returns 0 once the session ends (the worker closed its
// side), or 125 when it cannot listen or the session fails at once.
func tunnel(addr string, in io.Reader, out io.WriteCloser) int {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", ForwarderName, err)
		return 125
	}
	defer ln.Close()
	session, err := yamux.Client(stdio{in, out}, tunnelConfig())
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", ForwarderName, err)
		return 125
	}
	defer session.Close()
	ready, err := session.Open()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", ForwarderName, err)
		return 125
	}
	_, _ = io.WriteString(ready, tunnelReady)
	_ = ready.Close()
	go func() {
		<-session.CloseChan()
		_ = ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			return 0
		}
		go func() {
			defer c.Close()
			st, err := session.Open()
			if err != nil {
				return
			}
			defer st.Close()
			pipe(c, st)
		}()
	}
}

// pipe copies a and b both ways until both directions end, closing the
// writing half of each (the whole of a connection that has none) once its
// reader ends.
func pipe(a, b net.Conn) {
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(b, a)
		closeWrite(b)
		close(done)
	}()
	_, _ = io.Copy(a, b)
	closeWrite(a)
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

// tunnelConfig is both sides' yamux configuration: its defaults, with
// its log kept out of the command's stderr.
func tunnelConfig() *yamux.Config {
	c := yamux.DefaultConfig()
	c.LogOutput = io.Discard
	return c
}

// stdio is a process's stdin and stdout as one connection.
type stdio struct {
	io.Reader
	io.WriteCloser
}

// dockerServing is a handler a Docker sandbox serves.
type dockerServing struct {
	srv     *http.Server
	session *yamux.Session
	conn    io.Closer
	once    sync.Once
	done    chan struct{}
}

func (v *dockerServing) stop() {
	v.once.Do(func() {
		_ = v.srv.Close()
		_ = v.session.Close()
		_ = v.conn.Close()
		<-v.done
	})
}

var _ Server = (*dockerSandbox)(nil)

// Serve implements Server through a tunnel (see tunnel).
func (s *dockerSandbox) Serve(h http.Handler) (string, func(), error) {
	ctx, cancel, err := s.begin(context.Background())
	if err != nil {
		return "", nil, err
	}
	defer cancel()
	ctx, cancelStart := context.WithTimeout(ctx, tunnelStartTimeout)
	defer cancelStart()
	s.mu.Lock()
	busy := s.serving != nil
	s.mu.Unlock()
	if busy {
		return "", nil, fmt.Errorf("sandbox %s: %w", s.id, ErrServing)
	}
	v, err := s.startTunnel(ctx, h)
	if err != nil {
		return "", nil, fmt.Errorf("sandbox %s: serve: %w", s.id, err)
	}
	s.mu.Lock()
	if s.serving != nil || s.closed {
		s.mu.Unlock()
		v.stop()
		return "", nil, fmt.Errorf("sandbox %s: %w", s.id, ErrServing)
	}
	s.serving = v
	s.mu.Unlock()
	stop := func() {
		v.stop()
		s.mu.Lock()
		if s.serving == v {
			s.serving = nil
		}
		s.mu.Unlock()
	}
	return "http://127.0.0.1:" + strconv.Itoa(ServePort), stop, nil
}

// startTunnel copies the forwarder in, starts it as a tunnel and serves h
// on its session once it says it is ready.
func (s *dockerSandbox) startTunnel(ctx context.Context, h http.Handler) (*dockerServing, error) {
	if err := s.copyForwarder(ctx); err != nil {
		return nil, err
	}
	var ex dockerID
	if err := s.d.call(ctx, http.MethodPost, "/containers/"+s.name+"/exec", nil, dockerExecCreate{
		AttachStdin: true, AttachStdout: true, AttachStderr: true,
		Cmd: []string{DockerServeDir + "/" + ForwarderName, tunnelFlag, "127.0.0.1:" + strconv.Itoa(ServePort)}, Env: s.env,
	}, &ex); err != nil {
		return nil, s.lost(ctx, err)
	}
	conn, err := s.d.upgrade(context.WithoutCancel(ctx), "/exec/"+ex.ID+"/start", map[string]bool{"Detach": false, "Tty": false})
	if err != nil {
		return nil, s.lost(ctx, err)
	}
	out, outW := io.Pipe()
	var stderr bytes.Buffer
	var errMu sync.Mutex
	go func() {
		outW.CloseWithError(demux(conn, outW, lockedWriter{&errMu, &stderr}))
	}()
	session, err := yamux.Server(stdio{out, conn}, tunnelConfig())
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	failed := func(err error) error {
		_ = session.Close()
		_ = conn.Close()
		errMu.Lock()
		defer errMu.Unlock()
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return fmt.Errorf("the forwarder did not start: %w: %s", err, msg)
		}
		return fmt.Errorf("the forwarder did not start: %w", err)
	}
	ready := make(chan error, 1)
	go func() {
		st, err := session.Accept()
		if err != nil {
			ready <- err
			return
		}
		defer st.Close()
		line, err := bufio.NewReader(st).ReadString('\n')
		if err == nil && line != tunnelReady {
			err = fmt.Errorf("it said %q", line)
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			return nil, failed(err)
		}
	case <-ctx.Done():
		return nil, failed(ctx.Err())
	}
	v := &dockerServing{srv: &http.Server{Handler: h, ReadHeaderTimeout: time.Minute}, session: session, conn: conn,
		done: make(chan struct{})}
	go func() {
		defer close(v.done)
		_ = v.srv.Serve(session)
	}()
	return v, nil
}

// copyForwarder puts this program's executable into the container as
// DockerServeDir/ForwarderName (PUT /containers/{id}/archive).
func (s *dockerSandbox) copyForwarder(ctx context.Context) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("the forwarder: this program's executable: %w", err)
	}
	f, err := os.Open(exe)
	if err != nil {
		return fmt.Errorf("the forwarder: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("the forwarder: %w", err)
	}
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := tw.WriteHeader(&tar.Header{Name: ForwarderName, Mode: 0o755, Size: fi.Size(), ModTime: fi.ModTime(),
			Typeflag: tar.TypeReg})
		if err == nil {
			_, err = io.Copy(tw, f)
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	err = s.putArchive(ctx, DockerServeDir, pr)
	pr.CloseWithError(errors.New("copy ended"))
	if err != nil {
		return fmt.Errorf("the forwarder: copy into the container's %s (a sandbox started without Spec.Serve has none): %w",
			DockerServeDir, s.lost(ctx, err))
	}
	return nil
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
