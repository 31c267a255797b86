package sandbox

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// SimConfig configures a Sim backend.
type SimConfig struct {
	// StartLatency and ExecLatency are the mean simulated durations of Start
	// and of a command (a `sleep N` adds N seconds).
	StartLatency, ExecLatency time.Duration
	// Jitter spreads latencies uniformly by ±Jitter relative to the mean
	// (clamped to 0..1), deterministically from Seed, the id and the command.
	Jitter float64
	// TimeScale converts simulated time to real waiting: wall = simulated *
	// TimeScale. 0 (or less) means no waiting at all.
	TimeScale float64
	// Seed makes jitter reproducible.
	Seed int64
	// OutputLimit is how many bytes of a command's output are kept (head
	// and tail, as Local does); 0 means DefaultOutputLimit.
	OutputLimit int
	// StartFailures is the share of Start calls that fail the way sandbox
	// creation fails in clusters (quota, image pull, API errors): with
	// ErrStartFailed, deterministically from Seed, the id and the attempt.
	StartFailures float64
}

// ErrStartFailed is Sim's simulated failure to create a sandbox.
var ErrStartFailed = errors.New("sandbox: simulated creation failure (quota, image pull or API error)")

// Sim is a Backend that runs no processes. Its sandboxes live in memory and
// understand three commands:
//
//   - `echo ARG` prints ARG (one level of single or double quotes
//     stripped) and a newline;
//   - `sleep N` takes N simulated seconds, so it can time out;
//   - `exit N` returns N.
//
// Anything else prints "ok: <first word>\n" and returns 0. Setup commands
// run the same way, so `exit 1` fails Start; Patch and Env are ignored.
// Handles are "sim:<id>" and valid only within the same Sim value.
type Sim struct {
	cfg SimConfig

	mu       sync.Mutex
	live     map[string]*simSandbox
	attempts map[string]int // Start calls per id, for StartFailures
}

var _ Backend = (*Sim)(nil)

const simHandlePrefix = "sim:"

// maxSimSeq bounds the numbers `seq` prints in Sim.
const maxSimSeq = 1 << 20

// NewSim returns a Sim; out-of-range values in cfg are clamped.
func NewSim(cfg SimConfig) *Sim {
	cfg.StartLatency = max(cfg.StartLatency, 0)
	cfg.ExecLatency = max(cfg.ExecLatency, 0)
	cfg.Jitter = min(max(cfg.Jitter, 0), 1)
	if cfg.TimeScale < 0 || math.IsNaN(cfg.TimeScale) {
		cfg.TimeScale = 0
	}
	cfg.StartFailures = min(max(cfg.StartFailures, 0), 1)
	return &Sim{cfg: cfg, live: make(map[string]*simSandbox), attempts: map[string]int{}}
}

// Start simulates starting a sandbox, including its setup commands.
func (m *Sim) Start(ctx context.Context, id string, spec Spec) (Sandbox, error) {
	if err := ValidateID(id); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("start sandbox %s: %w", id, err)
	}
	sb := &simSandbox{sim: m, id: id, done: make(chan struct{})}
	m.mu.Lock()
	if m.live[id] != nil {
		m.mu.Unlock()
		return nil, fmt.Errorf("start sandbox %s: %w", id, ErrExists)
	}
	m.attempts[id]++
	if m.cfg.StartFailures > 0 && mix(m.unit(id, fmt.Sprint("start ", m.attempts[id]))) < m.cfg.StartFailures {
		m.mu.Unlock()
		return nil, fmt.Errorf("start sandbox %s: %w", id, ErrStartFailed)
	}
	m.live[id] = sb
	m.mu.Unlock()

	if err := m.setup(ctx, sb, spec); err != nil {
		_ = sb.Close(ctx)
		return nil, fmt.Errorf("start sandbox %s: %w", id, err)
	}
	return sb, nil
}

func (m *Sim) setup(ctx context.Context, sb *simSandbox, spec Spec) error {
	if err := m.wait(ctx, sb.done, m.latency(m.cfg.StartLatency, sb.id, "")); err != nil {
		return err
	}
	return runSetup(ctx, sb, spec)
}

// Attach returns a sandbox started by this Sim and not yet closed.
func (m *Sim) Attach(ctx context.Context, handle string) (Sandbox, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("attach sandbox: %w", err)
	}
	id, ok := strings.CutPrefix(handle, simHandlePrefix)
	if !ok || ValidateID(id) != nil {
		return nil, fmt.Errorf("attach %q: %w", handle, ErrInvalidHandle)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	sb := m.live[id]
	if sb == nil {
		return nil, fmt.Errorf("attach sandbox %s: %w", id, ErrNotFound)
	}
	return sb, nil
}

// latency returns mean spread by the jitter, from a hash of seed, id, cmd.
func (m *Sim) latency(mean time.Duration, id, cmd string) time.Duration {
	if mean <= 0 || m.cfg.Jitter == 0 {
		return mean
	}
	return time.Duration(float64(mean) * (1 + m.cfg.Jitter*(2*m.unit(id, cmd)-1)))
}

// mix scrambles u (from unit) so that draws whose inputs differ only in
// their last bytes are independent: FNV-1a barely moves its top bits then.
// (Latencies keep unit's plain value, so simulated timings stay as they were.)
func mix(u float64) float64 {
	x := uint64(u * (1 << 53))
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / (1 << 53)
}

// unit is uniform in [0, 1), from a hash of the seed, id and what.
func (m *Sim) unit(id, what string) float64 {
	h := fnv.New64a()
	_ = binary.Write(h, binary.LittleEndian, m.cfg.Seed)
	_, _ = h.Write([]byte(id))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(what))
	return float64(h.Sum64()>>11) / (1 << 53)
}

// wait blocks for a simulated duration scaled to wall time, or until ctx
// ends or the sandbox is closed (closed).
func (m *Sim) wait(ctx context.Context, closed <-chan struct{}, simulated time.Duration) error {
	wall := time.Duration(float64(simulated) * m.cfg.TimeScale)
	if wall <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(wall)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-closed:
		return nil // the caller's next check reports ErrNotFound
	case <-t.C:
		return nil
	}
}

type simSandbox struct {
	sim *Sim
	id  string

	mu     sync.Mutex
	closed bool
	done   chan struct{} // closed by Close, interrupting waits
	// files written by `seq A B > FILE`, by name: the range each holds
	// (what Diff shows as new files).
	files map[string][2]int
}

var _ Sandbox = (*simSandbox)(nil)

func (s *simSandbox) Handle() string { return simHandlePrefix + s.id }

func (s *simSandbox) check() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("sandbox %s: %w", s.id, ErrNotFound)
	}
	return nil
}

func (s *simSandbox) Exec(ctx context.Context, cmd string, timeout time.Duration) (ExecResult, error) {
	if err := s.check(); err != nil {
		return ExecResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return ExecResult{}, fmt.Errorf("sandbox %s: %w", s.id, err)
	}
	res, busy := simulate(cmd)
	if name, first, last, ok := seqToFile(cmd); ok {
		s.mu.Lock()
		if s.files == nil {
			s.files = map[string][2]int{}
		}
		s.files[name] = [2]int{first, last}
		s.mu.Unlock()
		res, busy = ExecResult{}, 0
	}
	if limit := cmp.Or(max(s.sim.cfg.OutputLimit, 0), DefaultOutputLimit); len(res.Output) > limit {
		out := newHeadTail(limit)
		_, _ = out.Write([]byte(res.Output))
		res.Output, res.Truncated, res.Replaced = out.output()
	}
	res.Duration = s.sim.latency(s.sim.cfg.ExecLatency, s.id, cmd) + busy
	if timeout > 0 && res.Duration > timeout {
		res = ExecResult{ReturnCode: -1, TimedOut: true, Duration: timeout}
	}
	if err := s.sim.wait(ctx, s.done, res.Duration); err != nil {
		return ExecResult{}, fmt.Errorf("sandbox %s: %w", s.id, err)
	}
	if err := s.check(); err != nil {
		return ExecResult{}, err
	}
	return res, nil
}

// simulate returns the result of cmd and how long it keeps busy beyond the
// exec latency.
func simulate(cmd string) (ExecResult, time.Duration) {
	cmd = strings.TrimSpace(cmd)
	if arg, ok := strings.CutPrefix(cmd, "echo "); ok {
		return ExecResult{Output: unquote(strings.TrimSpace(arg)) + "\n"}, 0
	}
	fields := strings.Fields(cmd)
	switch {
	case len(fields) == 0:
		return ExecResult{}, 0
	case fields[0] == "echo" && len(fields) == 1:
		return ExecResult{Output: "\n"}, 0
	case fields[0] == "sleep" && len(fields) == 2:
		secs, err := strconv.ParseFloat(strings.TrimSuffix(fields[1], "s"), 64)
		if err != nil || secs < 0 || math.IsNaN(secs) {
			return ExecResult{Output: "sleep: invalid time interval\n", ReturnCode: 1}, 0
		}
		// Clamp to what a Duration holds (about 292 years).
		return ExecResult{}, time.Duration(min(secs, float64(math.MaxInt64/2)/float64(time.Second)) * float64(time.Second))
	case fields[0] == "seq" && len(fields) == 3:
		first, err1 := strconv.Atoi(fields[1])
		last, err2 := strconv.Atoi(fields[2])
		if err1 != nil || err2 != nil || last-first > maxSimSeq {
			return ExecResult{Output: "seq: invalid or too long a range\n", ReturnCode: 1}, 0
		}
		var b strings.Builder
		for i := first; i <= last; i++ {
			b.WriteString(strconv.Itoa(i))
			b.WriteByte('\n')
		}
		return ExecResult{Output: b.String()}, 0
	case fields[0] == "exit" && len(fields) <= 2:
		code := 0
		if len(fields) == 2 {
			n, err := strconv.Atoi(fields[1])
			if err != nil {
				return ExecResult{Output: "exit: numeric argument required\n", ReturnCode: 2}, 0
			}
			code = n & 0xff // as bash does
		}
		return ExecResult{ReturnCode: code}, 0
	}
	return ExecResult{Output: "ok: " + fields[0] + "\n"}, 0
}

// unquote strips one level of matching single or double quotes.
func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '\'' || s[0] == '"') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}

// seqToFile reads `seq A B > FILE`, the one command of a simulated sandbox
// that changes its files.
func seqToFile(cmd string) (name string, first, last int, ok bool) {
	f := strings.Fields(cmd)
	if len(f) != 5 || f[0] != "seq" || f[3] != ">" || !validSimFile(f[4]) {
		return "", 0, 0, false
	}
	first, err1 := strconv.Atoi(f[1])
	last, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil || last < first || last-first > maxSimSeq {
		return "", 0, 0, false
	}
	return f[4], first, last, true
}

// validSimFile is a plain relative file name.
func validSimFile(name string) bool {
	return name != "" && !strings.ContainsAny(name, "/\\$`'\"") && !strings.HasPrefix(name, "-") && name != "." && name != ".."
}

// Diff returns a git diff of the files `seq A B > FILE` wrote, as new
// files (in name order); "" when the commands changed nothing.
func (s *simSandbox) Diff(ctx context.Context) (string, error) {
	if err := s.check(); err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("sandbox %s: %w", s.id, err)
	}
	s.mu.Lock()
	names := slices.Sorted(maps.Keys(s.files))
	files := maps.Clone(s.files)
	s.mu.Unlock()
	var b strings.Builder
	for _, name := range names {
		r := files[name]
		fmt.Fprintf(&b, "diff --git a/%s b/%s\nnew file mode 100644\n--- /dev/null\n+++ b/%s\n@@ -0,0 +1,%d @@\n",
			name, name, name, r[1]-r[0]+1)
		for i := r[0]; i <= r[1]; i++ {
			b.WriteByte('+')
			b.WriteString(strconv.Itoa(i))
			b.WriteByte('\n')
		}
	}
	return b.String(), nil
}

func (s *simSandbox) Close(context.Context) error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.done)
	}
	s.mu.Unlock()
	s.sim.mu.Lock()
	if s.sim.live[s.id] == s {
		delete(s.sim.live, s.id)
	}
	s.sim.mu.Unlock()
	return nil
}
