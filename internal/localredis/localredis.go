// Package localredis starts a Redis for `actloop dev` and tests: a real
// redis-server from PATH when there is one, else an in-process
// Redis-compatible server (miniredis), which runs the same Lua scripts.
package localredis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Kinds of server Start may return.
const (
	KindReal      = "redis-server"
	KindInProcess = "in-process"
)

// Server is a running local Redis.
type Server struct {
	Addr string
	Kind string
	stop func()
	kill func()

	password string               // the default user's
	mini     *miniredis.Miniredis // the in-process one
}

// AddUser adds (or resets) the ACL user name with password and rules (ACL
// SETUSER's, after the password; see service.RedisRules). The
// in-process server checks the user's password only, not its rules.
func (s *Server) AddUser(ctx context.Context, name, password string, rules []string) error {
	if s.mini != nil {
		s.mini.RequireUserAuth(name, password)
		return nil
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr, Password: s.password})
	defer c.Close()
	if err := c.ACLSetUser(ctx, name, append([]string{"reset", "on", ">" + password}, rules...)...).Err(); err != nil {
		return fmt.Errorf("redis ACL SETUSER %s: %w", name, err)
	}
	return nil
}

// ACLDenials are the entries of the real server's ACL LOG (the commands,
// keys and channels it refused a user), each as "user: reason object
// (context)"; none for the in-process server, which keeps no such log.
func (s *Server) ACLDenials(ctx context.Context) ([]string, error) {
	if s.mini != nil {
		return nil, nil
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr, Password: s.password})
	defer c.Close()
	entries, err := c.ACLLog(ctx, 128).Result()
	if err != nil {
		return nil, fmt.Errorf("redis ACL LOG: %w", err)
	}
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		out = append(out, fmt.Sprintf("%s: %s %s (%s, %d times)", e.Username, e.Reason, e.Object, e.Context, e.Count))
	}
	return out, nil
}

// Close stops the server and waits for it.
func (s *Server) Close() { s.stop() }

// Kill ends the server at once (SIGKILL; the in-process one closes) and
// waits for it: a crash, not a shutdown.
func (s *Server) Kill() { s.kill() }

// Start starts a Redis of the given kind: KindReal, KindInProcess, or "" for
// the real one when redis-server is on PATH and the in-process one otherwise.
// dir holds the real server's files. It wants no password.
func Start(ctx context.Context, kind, dir string) (*Server, error) {
	return StartWithPassword(ctx, kind, dir, "")
}

// StartWithPassword is Start with a server that wants password from every
// client (requirepass; none when empty).
func StartWithPassword(ctx context.Context, kind, dir, password string) (*Server, error) {
	if kind == "" {
		kind = KindInProcess
		if _, err := exec.LookPath("redis-server"); err == nil {
			kind = KindReal
		}
	}
	switch kind {
	case KindReal:
		var extra []string
		if password != "" {
			extra = []string{"--requirepass", password}
		}
		return startReal(ctx, dir, password, extra...)
	case KindInProcess:
		m := miniredis.NewMiniRedis()
		if password != "" {
			m.RequireAuth(password)
		}
		if err := m.Start(); err != nil {
			return nil, fmt.Errorf("start in-process redis: %w", err)
		}
		return &Server{Addr: m.Addr(), Kind: KindInProcess, stop: m.Close, kill: m.Close, password: password, mini: m}, nil
	default:
		return nil, fmt.Errorf("unknown redis kind %q (want %q or %q)", kind, KindReal, KindInProcess)
	}
}

// startReal starts redis-server with its files in dir, and extra
// arguments after actloop's own; password is the one they set, if any.
func startReal(ctx context.Context, dir, password string, extra ...string) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not on PATH: %w", err)
	}
	// Pick a free port; retry if another process takes it first.
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--dir", dir, "--save", "", "--appendonly", "no", "--protected-mode", "yes"}, extra...)
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = nil, nil
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("start redis-server: %w", err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		stop := func() {
			_ = cmd.Process.Signal(os.Interrupt)
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		}
		kill := func() {
			_ = cmd.Process.Kill()
			<-done
		}
		if err := waitReady(ctx, addr, password, done); err != nil {
			stop()
			if errors.Is(err, errExited) {
				continue // port taken between freePort and start
			}
			return nil, err
		}
		return &Server{Addr: addr, Kind: KindReal, stop: stop, kill: kill, password: password}, nil
	}
	return nil, errors.New("start redis-server: no free port after 5 attempts")
}

var errExited = errors.New("redis-server exited")

func waitReady(ctx context.Context, addr, password string, exited <-chan struct{}) error {
	c := redis.NewClient(&redis.Options{Addr: addr, Password: password, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if c.Ping(ctx).Err() == nil {
			return nil
		}
		select {
		case <-exited:
			return errExited
		case <-ctx.Done():
			return fmt.Errorf("redis-server at %s not ready: %w", addr, ctx.Err())
		case <-tick.C:
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Dir returns a directory for the server's files under base.
func Dir(base string) string { return filepath.Join(base, "redis") }
