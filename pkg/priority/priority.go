// Package priority decides which trajectories' generations go first. A
// Policy is pure code over a snapshot of trajectory facts, so it can be
// tested without I/O; the coordinator publishes the resulting high class per
// replica, and whoever publishes a trajectory's next gen step sends it to
// .hi or .lo by the newest Snapshot it has.
package priority

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Fact is what a policy knows of one active trajectory.
type Fact struct {
	TrajID       string
	Replica      string
	AdmittedAt   time.Time
	Turns        int
	Tokens       int
	Predicted    float64 // predicted remaining tokens; 0 = unknown
	WaitingSince time.Time
}

// Policy orders active trajectories, most urgent first.
type Policy interface {
	Name() string
	Rank(facts []Fact, now time.Time) []Fact
}

// FCFS ranks by admission order (ties by id, so the order is total).
type FCFS struct{}

// Name implements Policy.
func (FCFS) Name() string { return "fcfs" }

// Rank implements Policy.
func (FCFS) Rank(facts []Fact, _ time.Time) []Fact {
	out := slices.Clone(facts)
	slices.SortStableFunc(out, func(a, b Fact) int {
		if c := a.AdmittedAt.Compare(b.AdmittedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.TrajID, b.TrajID)
	})
	return out
}

// ByName returns the policy called name.
func ByName(name string) (Policy, error) {
	switch name {
	case "fcfs", "":
		return FCFS{}, nil
	}
	return nil, fmt.Errorf("unknown policy %q (this build has fcfs)", name)
}

// Snapshot is one replica's high class at a moment.
type Snapshot struct {
	Replica string          `json:"replica"`
	Version int64           `json:"version"`
	At      time.Time       `json:"at"`
	High    map[string]bool `json:"high"`
}

// Class is ClassHigh for a trajectory in the high set, else ClassLow. A nil
// snapshot puts everything in the low class.
func (s *Snapshot) Class(trajID string) string {
	if s != nil && s.High[trajID] {
		return ClassHigh
	}
	return ClassLow
}

// Classes of gen steps; they name the subject suffix.
const (
	ClassHigh = "hi"
	ClassLow  = "lo"
)

// Snapshots builds each replica's snapshot: the first highSlots trajectories
// of that replica in the policy's order are high.
func Snapshots(p Policy, facts []Fact, highSlots int, version int64, now time.Time) map[string]*Snapshot {
	out := map[string]*Snapshot{}
	for _, f := range p.Rank(facts, now) {
		s := out[f.Replica]
		if s == nil {
			s = &Snapshot{Replica: f.Replica, Version: version, At: now, High: map[string]bool{}}
			out[f.Replica] = s
		}
		if len(s.High) < highSlots {
			s.High[f.TrajID] = true
		}
	}
	return out
}
