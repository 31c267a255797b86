package chaos

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// proc is a child process the harness starts, kills, stops and starts
// again with the same arguments and environment.
type proc struct {
	name string
	bin  string
	args []string
	env  []string
	log  string // output appended here
	// ready is polled after a start until it answers nil.
	ready func(ctx context.Context) error

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	starts int
}

func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	p.cmd, p.exited = cmd, done
	p.starts++
	return nil
}

// signal sends sig to the running process.
func (p *proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

// kill SIGKILLs the process and waits for it to be gone.
func (p *proc) kill() {
	p.signal(syscall.SIGCONT) // a stopped process dies on SIGKILL too, but let it go first
	p.signal(syscall.SIGKILL)
	p.wait(time.Minute)
}

// stop sends SIGTERM and waits, then SIGKILLs what is left.
func (p *proc) stop(grace time.Duration) {
	p.signal(syscall.SIGCONT)
	p.signal(syscall.SIGTERM)
	if !p.wait(grace) {
		p.kill()
	}
}

func (p *proc) wait(d time.Duration) bool {
	p.mu.Lock()
	exited := p.exited
	p.mu.Unlock()
	if exited == nil {
		return true
	}
	select {
	case <-exited:
		return true
	case <-time.After(d):
		return false
	}
}

// waitReady polls p.ready until it answers nil or the deadline passes.
func (p *proc) waitReady(ctx context.Context, deadline time.Duration) error {
	if p.ready == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	for {
		err := p.ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready within %v: %w", p.name, deadline, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// httpReady is a ready func: url answers 2xx.
func httpReady(url string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	}
}

// tcpReady is a ready func: addr accepts connections.
func tcpReady(addr string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
}

// build compiles pkg into dir and returns the binary's path.
func build(t testing.TB, dir, name, pkg string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = "../.."
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}
