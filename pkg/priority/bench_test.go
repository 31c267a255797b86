package priority

import (
	"fmt"
	"testing"
	"time"
)

// benchFacts are n active trajectories over 8 replicas.
func benchFacts(n int) []Fact {
	t0 := time.Unix(1_700_000_000, 0)
	facts := make([]Fact, n)
	for i := range facts {
		facts[i] = Fact{TrajID: fmt.Sprintf("t%05d", i), Replica: fmt.Sprintf("r%d", i%8), GroupID: fmt.Sprintf("g%d", i/4),
			AdmittedAt: t0.Add(time.Duration(i) * time.Millisecond), WaitingSince: t0.Add(time.Duration(i%97) * time.Second),
			Turns: i % 30, Tokens: (i % 30) * 200, Predicted: float64((i * 7919) % 20000)}
	}
	return facts
}

// BenchmarkSnapshots10k is one recomputation of every replica's classes for
// 10,000 active trajectories, as the coordinator does when facts change.
func BenchmarkSnapshots10k(b *testing.B) {
	facts := benchFacts(10000)
	now := time.Unix(1_700_000_100, 0)
	for _, name := range []string{"fcfs", "lpt", "sjf"} {
		p, err := New(name, Config{AgeLimit: 2 * time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if s := Snapshots(p, facts, 32, 1, now); len(s) != 8 {
					b.Fatalf("%d snapshots", len(s))
				}
			}
		})
	}
}

// BenchmarkSnapshotMarshal is the encoding of one replica's snapshot (of
// 1,250 trajectories, 32 high) before it goes to NATS KV.
func BenchmarkSnapshotMarshal(b *testing.B) {
	p, _ := New("lpt", Config{AgeLimit: 2 * time.Minute})
	snaps := Snapshots(p, benchFacts(10000), 32, 1, time.Unix(1_700_000_100, 0))
	s := snaps["r0"]
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Marshal(); err != nil {
			b.Fatal(err)
		}
	}
}
