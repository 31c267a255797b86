package priority

import (
	"fmt"
	"slices"
	"sync"
	"testing"
)

func TestBoard(t *testing.T) {
	snap := func(replica string, version int64, high ...string) *Snapshot {
		s := &Snapshot{V: SnapshotV, Replica: replica, Version: version, High: map[string]bool{}}
		for _, id := range high {
			s.High[id] = true
		}
		return s
	}
	var b Board
	if b.Get("r0") != nil || b.Class("r0", "a") != ClassLow || b.Held("r0", "a") {
		t.Fatal("empty board is not all low and unheld")
	}

	steps := []struct {
		name    string
		s       *Snapshot
		want    bool
		replica string
		held    int64 // version held for replica afterwards
	}{
		{name: "first", s: snap("r0", 5, "a"), want: true, replica: "r0", held: 5},
		{name: "older ignored", s: snap("r0", 4, "b"), want: false, replica: "r0", held: 5},
		{name: "same version ignored", s: snap("r0", 5, "b"), want: false, replica: "r0", held: 5},
		{name: "newer kept", s: snap("r0", 6, "b"), want: true, replica: "r0", held: 6},
		{name: "other replica independent", s: snap("r1", 0, "c"), want: true, replica: "r1", held: 0},
		{name: "r0 unaffected", s: snap("r1", 1, "c"), want: true, replica: "r0", held: 6},
		{name: "nil", s: nil, want: false, replica: "r0", held: 6},
		{name: "no replica", s: snap("", 99, "a"), want: false, replica: "r0", held: 6},
	}
	for _, st := range steps {
		if got := b.Set(st.s); got != st.want {
			t.Fatalf("%s: Set = %v, want %v", st.name, got, st.want)
		}
		if got := b.Get(st.replica); got == nil || got.Version != st.held {
			t.Fatalf("%s: held %+v, want version %d", st.name, got, st.held)
		}
	}
	for _, c := range []struct{ replica, id, want string }{
		{"r0", "a", ClassLow}, // version 5 had it, 6 does not
		{"r0", "b", ClassHigh},
		{"r1", "c", ClassHigh},
		{"r1", "b", ClassLow},
		{"r9", "b", ClassLow},
	} {
		if got := b.Class(c.replica, c.id); got != c.want {
			t.Fatalf("Class(%s, %s) = %s, want %s", c.replica, c.id, got, c.want)
		}
	}
	if got := b.Replicas(); !slices.Equal(got, []string{"r0", "r1"}) {
		t.Fatalf("Replicas = %v, want [r0 r1]", got)
	}
	held := snap("r8", 1)
	held.Held = map[string]bool{"h": true}
	b.Set(held)
	if !b.Held("r8", "h") || b.Held("r8", "a") || b.Held("r0", "h") {
		t.Fatal("a snapshot's held set: only its own trajectories on its own replica are held")
	}
}

// TestBoardConcurrent runs writers with shuffled versions against readers;
// run it with -race. Every reader must see versions only grow, and the board
// must end at the newest.
func TestBoardConcurrent(t *testing.T) {
	const (
		replicas = 3
		writers  = 4
		versions = 200
	)
	var b Board
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range versions {
				// Writers interleave versions in different orders.
				v := int64((i*7 + w*13) % versions)
				r := fmt.Sprintf("r%d", (i+w)%replicas)
				b.Set(&Snapshot{Replica: r, Version: v, High: map[string]bool{fmt.Sprintf("t%d", v): true}})
			}
		})
	}
	errs := make(chan error, writers)
	for range writers {
		wg.Go(func() {
			seen := map[string]int64{}
			for i := range versions * 2 {
				r := fmt.Sprintf("r%d", i%replicas)
				s := b.Get(r)
				if s == nil {
					continue
				}
				if s.Version < seen[r] {
					errs <- fmt.Errorf("%s went back from version %d to %d", r, seen[r], s.Version)
					return
				}
				seen[r] = s.Version
				if b.Class(r, fmt.Sprintf("t%d", s.Version)) == "" {
					errs <- fmt.Errorf("empty class")
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for r := range replicas {
		replica := fmt.Sprintf("r%d", r)
		// Every replica got some version from each writer; the newest kept
		// must be the largest written for it.
		var maxV int64 = -1
		for w := range writers {
			for i := range versions {
				if (i+w)%replicas == r {
					maxV = max(maxV, int64((i*7+w*13)%versions))
				}
			}
		}
		if s := b.Get(replica); s == nil || s.Version != maxV {
			t.Fatalf("%s holds %+v, want version %d", replica, s, maxV)
		}
	}
}
