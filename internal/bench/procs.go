package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/actloop/actloop/internal/genworker"
	"github.com/actloop/actloop/internal/service"
)

// serviceProcs are services run as child processes of this binary
// ('actloop serve NAME'), each with its settings in its environment.
type serviceProcs struct {
	log     string // append the children's output here ("": discard)
	procs   []*serviceProc
	stopped bool
}

type serviceProc struct {
	use  ServiceUse
	addr string // where it serves /readyz
	cmd  *exec.Cmd
	done chan struct{}
}

// start runs service svc, called name in reports, with settings, serving
// its HTTP endpoints on addr.
func (p *serviceProcs) start(svc, name, addr string, settings any) error {
	env, err := service.Environ(settings)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe, "serve", svc)
	cmd.Env = append(os.Environ(), env...)
	// A child outlives no parent: a killed bench leaves no services behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if p.log != "" {
		f, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer f.Close() // the child holds its own descriptor
		cmd.Stdout, cmd.Stderr = f, f
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	sp := &serviceProc{use: ServiceUse{Name: name}, addr: addr, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(sp.done) }()
	p.procs = append(p.procs, sp)
	return nil
}

// ready waits until every child answers /readyz, then records each one's
// resident memory as its baseline.
func (p *serviceProcs) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, c := range p.procs {
		for {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.addr+"/readyz", nil)
			if err != nil {
				return err
			}
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			select {
			case <-c.done:
				return fmt.Errorf("%s exited: %v", c.use.Name, c.cmd.ProcessState)
			case <-ctx.Done():
				return fmt.Errorf("%s not ready: %w", c.use.Name, ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
		c.use.baseRSSKB = procStatusKB(c.cmd.Process.Pid, "VmRSS:")
	}
	return nil
}

// stop records each child's peak resident memory, asks it to stop
// (SIGTERM), kills it if it has not stopped within ten seconds, and
// records its CPU time. Stopping twice is harmless.
func (p *serviceProcs) stop() {
	if p.stopped {
		return
	}
	p.stopped = true
	for _, c := range p.procs {
		c.use.peakRSSKB = procStatusKB(c.cmd.Process.Pid, "VmHWM:")
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, c := range p.procs {
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.done
		}
		if st := c.cmd.ProcessState; st != nil {
			c.use.cpu = st.UserTime() + st.SystemTime()
		}
	}
}

// procStatusKB is a field in KiB of a live process's /proc status (VmRSS:
// resident now, VmHWM: peak resident); 0 where /proc does not say.
func procStatusKB(pid int, field string) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// freeAddr returns a loopback address with a port free at the moment.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// fetchStats reads each gen-worker's /v1/stats.
func fetchStats(ctx context.Context, urls map[string]string) (map[string]genworker.Stats, error) {
	out := map[string]genworker.Stats{}
	for r, u := range urls {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, fmt.Errorf("gen-worker %s stats: %w", r, err)
		}
		var s genworker.Stats
		err = json.NewDecoder(resp.Body).Decode(&s)
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("gen-worker %s stats: %w", r, err)
		}
		out[r] = s
	}
	return out, nil
}
