// Package testkit holds test helpers: local Redis and NATS servers and a
// polling wait.
package testkit

import (
	"compress/gzip"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/redis/go-redis/v9"

	"time"

	"github.com/actloop/actloop/internal/localnats"
	"github.com/actloop/actloop/internal/localredis"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// RedisKinds returns the kinds of Redis the tests should run against: the real
// redis-server when it is on PATH, and always the in-process one.
// ACTLOOP_TEST_REDIS=real|in-process restricts the list; "real" without a
// redis-server is a test failure, so CI cannot silently skip it.
func RedisKinds(t testing.TB) []string {
	t.Helper()
	_, err := exec.LookPath("redis-server")
	switch os.Getenv("ACTLOOP_TEST_REDIS") {
	case "real":
		if err != nil {
			t.Fatalf("ACTLOOP_TEST_REDIS=real but redis-server is not on PATH")
		}
		return []string{localredis.KindReal}
	case localredis.KindInProcess:
		return []string{localredis.KindInProcess}
	}
	if err != nil {
		t.Logf("redis-server not on PATH: Redis-facing tests run on the in-process server only")
		return []string{localredis.KindInProcess}
	}
	return []string{localredis.KindReal, localredis.KindInProcess}
}

// PreferredRedis is the first of RedisKinds: the real server where there is one.
func PreferredRedis(t testing.TB) string { return RedisKinds(t)[0] }

// StartTB starts a Redis of kind for a test and returns a client; both stop
// at the end of the test.
func StartRedis(t testing.TB, kind string) (*redis.Client, *localredis.Server) {
	t.Helper()
	srv, err := localredis.Start(context.Background(), kind, t.TempDir())
	if err != nil {
		t.Fatalf("start redis (%s): %v", kind, err)
	}
	t.Cleanup(srv.Close)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	return c, srv
}

// StartNATS starts an embedded NATS server with JetStream for a test and
// shuts it down at the end. Its limits are nats-server's defaults
// (max_payload 1 MiB), as a user's deployment has them.
func StartNATS(t testing.TB) *server.Server {
	t.Helper()
	s, err := localnats.Start(t.TempDir(), -1, localnats.Sync{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// JetStream connects a client to s for a test (closed at its end) and
// returns its JetStream.
func JetStream(t testing.TB, s *server.Server) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// Eventually polls cond every 10ms until it returns true or the deadline (a
// generous one: tests run on loaded machines) passes.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Poll(context.Background(), within, cond) {
		t.Fatalf("timed out after %v waiting for %s", within, what)
	}
}

// Poll calls cond every 10ms until it returns true (Poll returns true), or
// within passes or ctx ends (false): Eventually for a caller that handles
// the timeout itself.
func Poll(ctx context.Context, within time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return cond()
		case <-t.C:
		}
	}
	return true
}

// Pause waits d, or until ctx ends: the pace of a test's schedule (a fault
// window, a quiet period), not a wait for a condition (Poll is that).
func Pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// SearchableTempDir is t.TempDir() with its parents made searchable by
// everyone: run as root, bwrap runs as an unprivileged user that must
// reach the sandbox dirs, and t.TempDir's parent is private.
func SearchableTempDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	for p := dir; p != os.TempDir() && p != "/" && p != "."; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, fi.Mode().Perm()|0o111); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// FreePort returns a loopback TCP port nothing listened on a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Gunzip returns the content of the gzipped file at path (a test fixture
// such as a model's tokenizer.json.gz).
func Gunzip(t testing.TB, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
