package priority_test

import (
	"math"
	"testing"
	"time"

	"github.com/actloop/actloop/pkg/priority"
	"github.com/actloop/actloop/pkg/schema"
)

func TestVictim(t *testing.T) {
	now := time.Unix(100, 0)
	past, future := now.Add(-time.Second), now.Add(time.Second)
	tests := []struct {
		name      string
		notBefore []time.Time
		want      int
	}{
		{"none running", nil, -1},
		{"the newest", []time.Time{{}, {}, {}}, 2},
		{"the newest not in its cooldown", []time.Time{past, {}, future}, 1},
		{"cooldown ending now counts as ended", []time.Time{future, now}, 1},
		{"all in their cooldown", []time.Time{future, future}, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := priority.Victim(tt.notBefore, now); got != tt.want {
				t.Fatalf("Victim = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestMustRestart(t *testing.T) {
	tests := []struct {
		name   string
		ctl    schema.Control
		oldest int64
		want   bool
	}{
		{"keep never restarts", schema.Control{StalePolicy: schema.StaleKeep, MaxStaleness: 0, WeightVersion: 5}, 1, false},
		{"mask never restarts", schema.Control{StalePolicy: schema.StaleMask, MaxStaleness: 0, WeightVersion: 5}, 1, false},
		{"no bound", schema.Control{StalePolicy: schema.StaleRestart, MaxStaleness: -1, WeightVersion: 5}, 0, false},
		{"within the bound", schema.Control{StalePolicy: schema.StaleRestart, MaxStaleness: 2, WeightVersion: 5}, 3, false},
		{"beyond the bound", schema.Control{StalePolicy: schema.StaleRestart, MaxStaleness: 2, WeightVersion: 5}, 2, true},
		{"nothing generated", schema.Control{StalePolicy: schema.StaleRestart, MaxStaleness: 0, WeightVersion: 5}, math.MaxInt64, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := priority.MustRestart(tt.ctl, tt.oldest); got != tt.want {
				t.Fatalf("MustRestart = %v, want %v", got, tt.want)
			}
		})
	}
	if got := priority.OldestVersion([]int8{0, 1, 1, 0}, []int32{-1, 7, 4, -1}); got != 4 {
		t.Fatalf("OldestVersion = %d, want 4", got)
	}
	if got := priority.OldestVersion(nil, nil); got != math.MaxInt64 {
		t.Fatalf("OldestVersion(none) = %d", got)
	}
}
