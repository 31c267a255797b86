package coordinator

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/pkg/schema"
)

// Replicas are learnt from the gen-workers' heartbeats: an expected one
// is live while its workers come up and down after that until one
// heartbeats; another joins with its first heartbeat and leaves when its
// last worker stops or goes silent. The admission bounds follow the slots
// the live replicas' workers announce.
func TestReplicasJoinAndLeave(t *testing.T) {
	var cfg Config
	service.Defaults(&cfg)
	cfg.Replicas, cfg.Slots, cfg.ReplicaTimeout = []string{"r0"}, 4, 10*time.Second
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := newMembership(cfg.Replicas, cfg.ReplicaTimeout, time.Minute, start)
	c := &Coordinator{cfg: cfg, members: m}
	beat := func(replica, worker string, slots int, at time.Time) {
		m.genBeat(replica, worker, schema.Heartbeat{V: schema.Version, Worker: worker, Replica: replica, Slots: slots, At: at}, at)
	}
	type want struct {
		known, live []string
		slots       map[string]int
		floor, ceil int
	}
	steps := []struct {
		name string
		at   time.Duration // after start
		do   func(at time.Time)
		want want
	}{
		{"expected, coming up", time.Second, nil,
			want{[]string{"r0"}, []string{"r0"}, map[string]int{"r0": 4}, 6, 18}},
		{"expected, never heard", 11 * time.Second, nil,
			want{[]string{"r0"}, nil, map[string]int{}, 6, 18}},
		{"r1 joins with 2 workers", 12 * time.Second, func(at time.Time) { beat("r1", "a", 2, at); beat("r1", "b", 2, at) },
			want{[]string{"r0", "r1"}, []string{"r1"}, map[string]int{"r1": 4}, 6, 18}},
		{"r0 heartbeats", 13 * time.Second, func(at time.Time) { beat("r0", "a", 8, at) },
			want{[]string{"r0", "r1"}, []string{"r0", "r1"}, map[string]int{"r0": 8, "r1": 4}, 18, 54}},
		{"one of r1's workers stops", 14 * time.Second, func(time.Time) { m.genGone("r1", "a") },
			want{[]string{"r0", "r1"}, []string{"r0", "r1"}, map[string]int{"r0": 8, "r1": 2}, 15, 45}},
		{"the other stops: r1 leaves", 15 * time.Second, func(time.Time) { m.genGone("r1", "b") },
			want{[]string{"r0", "r1"}, []string{"r0"}, map[string]int{"r0": 8}, 12, 36}},
		{"r0 goes silent", 24 * time.Second, nil,
			want{[]string{"r0", "r1"}, nil, map[string]int{}, 6, 18}},
	}
	for _, s := range steps {
		at := start.Add(s.at)
		if s.do != nil {
			s.do(at)
		}
		known, live, slots := m.replicas(), m.liveReplicas(at), c.replicaSlots(at)
		floor, ceil := c.activeBounds(at)
		got := want{known, live, slots, floor, ceil}
		if !slices.Equal(got.known, s.want.known) || !slices.Equal(got.live, s.want.live) ||
			!maps.Equal(got.slots, s.want.slots) || got.floor != s.want.floor || got.ceil != s.want.ceil {
			t.Errorf("%s: got %+v, want %+v", s.name, got, s.want)
		}
	}
}
