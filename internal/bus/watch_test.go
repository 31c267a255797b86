package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/internal/testkit"
)

// A watch that ends under the watcher (nats.go closes the updates of an
// ordered consumer it could not recreate, as while a NATS node restarts)
// is opened again from the next revision: the changes made while it was
// down arrive, none twice, and a failed reopen is tried again.
func TestWatchSurvivesItsEnd(t *testing.T) {
	js := testkit.JetStream(t, testkit.StartNATS(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "watch_test", History: 1})
	if err != nil {
		t.Fatal(err)
	}
	put := func(key, value string) {
		t.Helper()
		if _, err := kv.Put(ctx, key, []byte(value)); err != nil {
			t.Fatal(err)
		}
	}
	put("a", "a1")
	put("b", "b1")

	var mu sync.Mutex
	var seen []string // "key=value initial"
	var watchers []jetstream.KeyWatcher
	opens := 0
	reopen := make(chan struct{}) // closed when the watch may open again
	open := func(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
		mu.Lock()
		opens++
		n := opens
		mu.Unlock()
		if n == 2 {
			<-reopen
			return nil, errors.New("nats: no responders available for request") // as during a restart
		}
		w, err := kv.WatchAll(ctx, opts...)
		if err == nil {
			mu.Lock()
			watchers = append(watchers, w)
			mu.Unlock()
		}
		return w, err
	}
	caughtUp := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- follow(ctx, slog.New(slog.DiscardHandler), "watch_test", open, func(e jetstream.KeyValueEntry, initial bool) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, fmt.Sprintf("%s=%s %v", e.Key(), e.Value(), initial))
		}, func() { close(caughtUp) })
	}()
	select {
	case <-caughtUp:
	case <-time.After(time.Minute):
		t.Fatal("no end of the initial values")
	}
	put("a", "a2")
	waitSeen := func(n int) {
		t.Helper()
		testkit.Eventually(t, time.Minute, fmt.Sprintf("%d entries", n), func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(seen) >= n
		})
	}
	waitSeen(3)

	// The library gives up on the watch: its updates channel closes.
	mu.Lock()
	first := watchers[0]
	mu.Unlock()
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, "the watch to be opened again", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return opens == 2
	})
	// Changes while no watch is open.
	put("b", "b2")
	put("c", "c1")
	put("a", "a3")
	close(reopen) // the second open fails; the third resumes
	waitSeen(6)
	put("c", "c2")
	waitSeen(7)

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("follow returned %v, want nil at the end of its context", err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"a=a1 true", "b=b1 true", "a=a2 false", "b=b2 false", "c=c1 false", "a=a3 false", "c=c2 false"}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("passed %v\nwant     %v", seen, want)
	}
	if opens != 3 {
		t.Errorf("%d opens, want 3 (the first, a failed reopen, the one that resumed)", opens)
	}
}

// The first open's failure is the watch's error: a service that cannot
// watch at its start says so.
func TestWatchFirstOpenFails(t *testing.T) {
	boom := errors.New("no bucket")
	err := follow(context.Background(), slog.New(slog.DiscardHandler), "b", func(context.Context, ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
		return nil, boom
	}, func(jetstream.KeyValueEntry, bool) {}, nil)
	if !errors.Is(err, boom) {
		t.Fatalf("got %v, want %v", err, boom)
	}
}
