package sandbox

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Server is a Sandbox whose commands can reach one HTTP service of the
// caller's (the proxy flow's model endpoint, for example) and, where the
// backend isolates the network, nothing else. Local implements it, and
// Docker's sandboxes started with Spec.Serve (docker_serve.go).
type Server interface {
	// Serve serves h to the commands Exec runs from now on, at the base
	// URL it returns (http://127.0.0.1:<port>), until stop is called or
	// the sandbox is closed; stop closes every connection and is
	// idempotent. A sandbox serves one handler at a time: a second Serve
	// before stop fails with ErrServing.
	Serve(h http.Handler) (baseURL string, stop func(), err error)
}

// ErrServing is a Serve on a sandbox that already serves a handler.
var ErrServing = errors.New("sandbox already serves a handler")

// ForwarderName is the name a sandbox's port forwarder runs under. Under
// bubblewrap without the host's network (Local's default), a command
// cannot reach a socket of the host's network: Local listens on a Unix
// socket in the sandbox's /tmp instead and runs each command under a
// forwarder, its own executable mounted read-only at /ForwarderName, that
// listens on ServePort of the sandbox's loopback, passes each connection
// to that socket, runs the command as its child and exits as it does. A
// program that uses Local.Serve must call Forwarder first thing in main
// (and in TestMain), so that it can be that forwarder.
const ForwarderName = "actloop-forward"

// ServePort is the loopback port a bubblewrap sandbox's commands reach a
// served handler on (each command has a network namespace of its own, so
// it cannot be taken by anything but the sandbox's own processes), and a
// Docker container's (the container's own loopback).
const ServePort = 27121

// serveSocket is the Unix socket's name in the sandbox's /tmp.
const serveSocket = ".actloop-serve.sock"

// Forwarder runs this process as a sandbox's port forwarder when args (the
// process's os.Args) say it was started as one: it returns the exit code
// for main to exit with and true. Otherwise it returns 0 and false at once
// and the program goes on.
//
// As a forwarder its arguments are: the TCP address to listen on, the Unix
// socket to pass connections to, and the command to run (its argv). It
// exits with the command's exit code (128+N for death by signal N), or 125
// when it cannot listen or start the command. As a tunnel (Docker's
// sandboxes, see tunnel) they are "--tunnel" and the TCP address.
func Forwarder(args []string) (int, bool) {
	if len(args) == 0 || filepath.Base(args[0]) != ForwarderName {
		forwarderReady.Store(true)
		return 0, false
	}
	if len(args) == 3 && args[1] == tunnelFlag {
		return tunnel(args[2], os.Stdin, os.Stdout), true
	}
	if len(args) < 4 {
		fmt.Fprintf(os.Stderr, "%s: want <listen address> <socket> <command...>, got %q\n", ForwarderName, args[1:])
		return 125, true
	}
	addr, socket, argv := args[1], args[2], args[3:]
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", ForwarderName, err)
		return 125, true
	}
	defer ln.Close()
	go forward(ln, socket)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// The forwarder is the command's stand-in to whoever started it: a
	// signal it gets is the command's.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", ForwarderName, err)
		return 125, true
	}
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	_ = cmd.Wait()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return 128 + int(ws.Signal()), true
	}
	return ws.ExitStatus(), true
}

// forwarderReady is set once the program has called Forwarder (and is not
// a forwarder itself): only then can its executable be one.
var forwarderReady atomic.Bool

// ErrNoForwarder is a Serve under bubblewrap in a program that does not
// call Forwarder first thing: a copy of its executable would not forward.
var ErrNoForwarder = errors.New("this program does not call sandbox.Forwarder first thing in main (or TestMain): " +
	"its executable cannot forward a bubblewrap sandbox's port")

// forward passes each connection ln accepts to the Unix socket.
func forward(ln net.Listener, socket string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			u, err := net.Dial("unix", socket)
			if err != nil {
				return
			}
			defer u.Close()
			pipe(c, u)
		}()
	}
}

// forwarder is the executable a Local mounts as a serving sandbox's
// forwarder: a copy of its own, made at the first Serve, where the
// sandbox's user can read it (the program's own file may be in a directory
// only its user can enter, as go test's are).
type forwarder struct {
	path string // under Root
	once sync.Once
	err  error
}

func (f *forwarder) install() error {
	if !forwarderReady.Load() {
		return ErrNoForwarder
	}
	f.once.Do(func() {
		exe, err := os.Executable()
		if err != nil {
			f.err = fmt.Errorf("the forwarder: this program's executable: %w", err)
			return
		}
		if err := os.MkdirAll(filepath.Dir(f.path), 0o755); err != nil {
			f.err = fmt.Errorf("the forwarder: %w", err)
			return
		}
		src, err := os.Open(exe)
		if err != nil {
			f.err = fmt.Errorf("the forwarder: %w", err)
			return
		}
		defer src.Close()
		tmp, err := os.CreateTemp(filepath.Dir(f.path), ForwarderName+"-*")
		if err != nil {
			f.err = fmt.Errorf("the forwarder: %w", err)
			return
		}
		_, err = io.Copy(tmp, src)
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Chmod(tmp.Name(), 0o755)
		}
		if err == nil {
			err = os.Rename(tmp.Name(), f.path)
		}
		if err != nil {
			_ = os.Remove(tmp.Name())
			f.err = fmt.Errorf("the forwarder: copy %s: %w", exe, err)
		}
	})
	return f.err
}

// listenUnix listens on a Unix socket named name in dir. A socket's path
// is bounded (108 bytes with its terminating NUL on Linux) and a sandbox's
// /tmp can lie deeper than that, so it binds through a descriptor of dir
// (/proc/self/fd/N/name), which the kernel resolves to the same file; the
// listener removes it when closed, which it does before the descriptor is.
func listenUnix(dir, name string) (net.Listener, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("unix", fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), name))
	if err != nil {
		d.Close()
		return nil, err
	}
	return &dirListener{Listener: ln, dir: d}, nil
}

// dirListener is a Unix listener bound through dir's descriptor, which it
// keeps open until it is closed.
type dirListener struct {
	net.Listener
	dir *os.File
}

func (l *dirListener) Close() error {
	err := l.Listener.Close()
	l.dir.Close()
	return err
}

// serving is a handler a sandbox serves.
type serving struct {
	srv  *http.Server
	ln   net.Listener
	sock string // the socket as the sandbox sees it, when forwarded; else ""
	once sync.Once
	done chan struct{}
}

func (v *serving) stop() {
	v.once.Do(func() {
		_ = v.srv.Close()
		<-v.done
	})
}

// Serve implements Server. Under bubblewrap without the host's network,
// commands reach h through the forwarder (see ForwarderName); otherwise
// (unisolated, or LocalConfig.Network) on a port of the host's loopback,
// which every process of the host can reach too.
func (s *localSandbox) Serve(h http.Handler) (string, func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return "", nil, fmt.Errorf("sandbox %s: %w", s.id, ErrNotFound)
	}
	if s.serving != nil {
		return "", nil, fmt.Errorf("sandbox %s: %w", s.id, ErrServing)
	}
	forwarded := s.l.bwrap != "" && !s.l.network
	var (
		ln   net.Listener
		url  string
		sock string
		err  error
	)
	if forwarded {
		if err := s.l.forwarder.install(); err != nil {
			return "", nil, fmt.Errorf("sandbox %s: serve: %w", s.id, err)
		}
		host := filepath.Join(s.tmpDir, serveSocket)
		_ = os.Remove(host) // one left by a process that died
		if ln, err = listenUnix(s.tmpDir, serveSocket); err != nil {
			return "", nil, fmt.Errorf("sandbox %s: serve: %w", s.id, err)
		}
		if err := s.l.own(host); err != nil {
			_ = ln.Close()
			return "", nil, fmt.Errorf("sandbox %s: serve: %w", s.id, err)
		}
		url, sock = "http://127.0.0.1:"+strconv.Itoa(ServePort), "/tmp/"+serveSocket
	} else {
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return "", nil, fmt.Errorf("sandbox %s: serve: %w", s.id, err)
		}
		url = "http://" + ln.Addr().String()
	}
	v := &serving{srv: &http.Server{Handler: h, ReadHeaderTimeout: time.Minute}, ln: ln, sock: sock, done: make(chan struct{})}
	go func() {
		defer close(v.done)
		_ = v.srv.Serve(ln)
	}()
	s.serving = v
	stop := func() {
		v.stop()
		s.mu.Lock()
		if s.serving == v {
			s.serving = nil
		}
		s.mu.Unlock()
	}
	return url, stop, nil
}

// servedArgv is argv run under the forwarder when the sandbox serves a
// handler through one, and whether it is.
func (s *localSandbox) servedArgv(argv []string) ([]string, bool) {
	s.mu.Lock()
	v := s.serving
	s.mu.Unlock()
	if v == nil || v.sock == "" {
		return argv, false
	}
	return append([]string{"/" + ForwarderName, "127.0.0.1:" + strconv.Itoa(ServePort), v.sock}, argv...), true
}

// stopServing stops the handler the sandbox serves, if any.
func (s *localSandbox) stopServing() {
	s.mu.Lock()
	v := s.serving
	s.serving = nil
	s.mu.Unlock()
	if v != nil {
		v.stop()
	}
}
