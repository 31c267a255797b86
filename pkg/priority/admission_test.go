package priority_test

import (
	"maps"
	"math"
	"slices"
	"testing"

	"github.com/actloop/actloop/pkg/priority"
)

func TestNextLimit(t *testing.T) {
	const floor, ceiling = 12, 36
	tests := []struct {
		name    string
		limit   int
		l       priority.Load
		binding bool
		want    int
	}{
		{"idle slots, samples waiting, no re-prefill: rise by the idle slots", 12, priority.Load{Slots: 8, Running: 5, Generated: 1000}, true, 15},
		{"idle slots but nothing waiting: stay", 12, priority.Load{Slots: 8, Running: 5, Generated: 1000}, false, 12},
		{"every slot busy: stay", 20, priority.Load{Slots: 8, Running: 8, Generated: 1000}, true, 20},
		{"re-prefill above the bound: fall by a tenth", 30, priority.Load{Slots: 8, Running: 2, Generated: 1000, Reprefilled: 600}, true, 27},
		{"re-prefill between half the bound and the bound: stay", 20, priority.Load{Slots: 8, Running: 2, Generated: 1000, Reprefilled: 300}, true, 20},
		{"never below the floor", 12, priority.Load{Slots: 8, Running: 8, Generated: 100, Reprefilled: 1000}, true, floor},
		{"never above the ceiling", 35, priority.Load{Slots: 64, Running: 0, Generated: 1000}, true, ceiling},
		{"no tokens generated: re-prefill cannot lower it", 20, priority.Load{Slots: 8, Running: 8, Reprefilled: 50}, true, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := priority.NextLimit(tt.limit, floor, ceiling, tt.l, tt.binding, 0.5); got != tt.want {
				t.Fatalf("NextLimit = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestGrown(t *testing.T) {
	if priority.Grown(5, 100) != 5 || priority.Grown(150, 100) != 50 || priority.Grown(7, 7) != 0 {
		t.Fatal("Grown: a counter that went back counts whole")
	}
}

func TestStalenessRoomAndAdmissible(t *testing.T) {
	tests := []struct {
		name                        string
		maxStale, version           int64
		batch                       int
		admitted                    int64
		wantRoom                    int
		limit, active, wantAdmitted int
	}{
		{"no bound: the limit decides", -1, 3, 64, 500, -1, 10, 4, 6},
		{"no batch size: no bound", 2, 0, 0, 500, -1, 10, 4, 6},
		{"room below the limit's", 0, 0, 8, 6, 2, 10, 4, 2},
		{"a newer version makes room", 0, 1, 8, 6, 10, 10, 4, 6},
		{"over the bound: none", 1, 0, 4, 20, 0, 10, 4, 0},
		{"over the limit: none", -1, 0, 0, 0, -1, 4, 9, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			room := priority.StalenessRoom(tt.maxStale, tt.version, tt.batch, tt.admitted)
			if room != tt.wantRoom {
				t.Fatalf("StalenessRoom = %d, want %d", room, tt.wantRoom)
			}
			if got := priority.Admissible(tt.limit, tt.active, room); got != tt.wantAdmitted {
				t.Fatalf("Admissible = %d, want %d", got, tt.wantAdmitted)
			}
		})
	}
}

func TestAssignReplicas(t *testing.T) {
	tests := []struct {
		name string
		live []string
		load map[string]int
		n    int
		want []string
	}{
		{"none live", nil, map[string]int{"r0": 0}, 3, nil},
		{"fill the emptiest first, in order among equals", []string{"r0", "r1", "r2"}, map[string]int{"r0": 2, "r1": 0, "r2": 1}, 4,
			[]string{"r1", "r1", "r2", "r0"}},
		{"a dead replica's load does not count", []string{"r1"}, map[string]int{"r0": 0, "r1": 5}, 2, []string{"r1", "r1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			load := maps.Clone(tt.load)
			if got := priority.AssignReplicas(tt.live, load, tt.n); !slices.Equal(got, tt.want) {
				t.Fatalf("AssignReplicas = %v, want %v", got, tt.want)
			}
		})
	}
	if got := priority.LeastLoaded(nil, nil); got != "" {
		t.Fatalf("LeastLoaded(none live) = %q", got)
	}
}

func TestActiveBounds(t *testing.T) {
	for _, c := range []struct {
		name                                string
		mode                                string
		slots, replicas, maxActive, ceiling int
		wantFloor, wantCeiling              int
	}{
		{"trajectory: the slots", priority.SchedulingTrajectory, 8, 2, 0, 0, 16, 16},
		{"action: 1.5 x the slots, 3 x that", priority.SchedulingAction, 8, 2, 0, 0, 24, 72},
		{"action: odd slots round up", priority.SchedulingAction, 3, 1, 0, 0, 5, 15},
		{"action: MAX_ACTIVE", priority.SchedulingAction, 8, 2, 10, 0, 10, 30},
		{"action: a ceiling below the floor is the floor", priority.SchedulingAction, 8, 2, 10, 4, 10, 10},
		{"action: a ceiling", priority.SchedulingAction, 8, 2, 0, 100, 24, 100},
	} {
		f, x := priority.ActiveBounds(c.mode, c.slots, c.replicas, c.maxActive, c.ceiling)
		if f != c.wantFloor || x != c.wantCeiling {
			t.Errorf("%s: ActiveBounds = %d, %d; want %d, %d", c.name, f, x, c.wantFloor, c.wantCeiling)
		}
	}
}

// Admission by KV counts against a ceiling only when one is set.
func TestKVCeiling(t *testing.T) {
	if got := priority.KVCeiling(0); got != math.MaxInt {
		t.Errorf("unset: %d, want no ceiling", got)
	}
	if got := priority.KVCeiling(40); got != 40 {
		t.Errorf("set to 40: %d", got)
	}
}
