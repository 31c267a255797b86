package genworker

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/pkg/llm"
)

// lockedBuffer is a log sink safe for the loop's goroutine and the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *lockedBuffer) has(s string) bool { return strings.Contains(l.String(), s) }

// scriptedContext is a generator whose server says each context length
// of answers in turn (the last one from then on), or fails with err.
type scriptedContext struct {
	llm.Generator
	mu      sync.Mutex
	answers []int
	err     error
	reads   int
}

func (s *scriptedContext) ContextLength(context.Context) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	if s.err != nil {
		err := s.err
		s.err = nil
		return 0, err
	}
	n := s.answers[0]
	if len(s.answers) > 1 {
		s.answers = s.answers[1:]
	}
	return n, nil
}

func (s *scriptedContext) readCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads
}

// contextWorker is a Worker with just what contextLoop uses, running it
// until the test ends.
func contextWorker(t *testing.T, gen llm.Generator, interval time.Duration) (*Worker, *lockedBuffer) {
	t.Helper()
	logs := &lockedBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	w := &Worker{cfg: Config{Replica: "r0", LLMHealthInterval: interval}, d: &service.Deps{Log: log}, gen: gen,
		health: newReplicaHealth(1, time.Hour, nil, discard)}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = w.contextLoop(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return w, logs
}

// The gen-worker reads the server's context length at start (its first
// gen step waits for the read), logs it, reads it again after a failed
// read and when the server comes back after being down; a server that
// does not say is unbounded, said once.
func TestContextLoop(t *testing.T) {
	gen := &scriptedContext{answers: []int{32768, 0}, err: errors.New("connection refused")}
	w, logs := contextWorker(t, gen, 10*time.Millisecond)
	testkit.Eventually(t, 10*time.Second, "the first read", w.ctxLen.ready)
	testkit.Eventually(t, 10*time.Second, "the read after the failed one, logged", func() bool {
		return w.ctxLen.length() == 32768 && logs.has("context_length=32768")
	})
	if !logs.has("read the inference server's context length (trying again") {
		t.Fatalf("logs:\n%s", logs.String())
	}
	reads := gen.readCount()
	w.health.observe(errors.New("down"), false)
	w.health.observe(nil, true)
	testkit.Eventually(t, 10*time.Second, "the read after the server came back", func() bool {
		return gen.readCount() > reads && w.ctxLen.length() == 0
	})
	testkit.Eventually(t, 10*time.Second, "the log of a server that does not say", func() bool {
		return logs.has("does not say its context length")
	})
}

// A client that reads no context length leaves generations uncapped, and
// the worker pulls at once.
func TestContextLoopWithoutReader(t *testing.T) {
	w, logs := contextWorker(t, &plainGenerator{}, time.Second)
	testkit.Eventually(t, 10*time.Second, "ready", w.ctxLen.ready)
	if w.ctxLen.length() != 0 || !logs.has("reads no context length") {
		t.Fatalf("length %d, logs:\n%s", w.ctxLen.length(), logs.String())
	}
}

// plainGenerator is a Generator and nothing else.
type plainGenerator struct{}

func (plainGenerator) Generate(context.Context, llm.Request) (llm.Result, error) {
	return llm.Result{}, errors.New("not here")
}
func (plainGenerator) Abort(context.Context, string) error { return nil }
