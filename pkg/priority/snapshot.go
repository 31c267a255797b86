package priority

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Classes of gen steps; they name the subject suffix. As siiRL-agentic's
// three queues (hp_resume > lp_resume > pending), a trajectory's first
// generation waits in its priority class (hi or lo, the pending ones) and
// every later gen step of it — back from an environment step, or the rest
// of a generation interrupted by a preemption or a pause — in its
// priority's resume class (rhi or rlo): see StepClass.
const (
	ClassHigh       = "hi"
	ClassLow        = "lo"
	ClassHighResume = "rhi"
	ClassLowResume  = "rlo"
)

// DispatchOrder is the order in which a gen-worker takes its steps: a
// trajectory under way before a trajectory's first generation, high before
// low within each (siiRL-agentic's hp_resume > lp_resume > pending, pending
// high before low). Steps of the high classes may preempt a running low
// generation.
var DispatchOrder = []string{ClassHighResume, ClassLowResume, ClassHigh, ClassLow}

// Resumed is the resume class of priority class class (ClassHigh or
// ClassLow; a resume class is its own).
func Resumed(class string) string {
	if IsHigh(class) {
		return ClassHighResume
	}
	return ClassLowResume
}

// StepClass is the class a gen step of a trajectory whose priority class is
// class waits in: class itself for the trajectory's first generation with
// nothing of it generated yet (first), else its resume class (Resumed).
func StepClass(class string, first bool) string {
	if first {
		return class
	}
	return Resumed(class)
}

// IsHigh reports whether class is a high one (ClassHigh, ClassHighResume).
func IsHigh(class string) bool { return class == ClassHigh || class == ClassHighResume }

// SnapshotV is the "v" that Marshal writes and DecodeSnapshot reads.
const SnapshotV = 1

// Snapshot is one replica's high class at a moment. Once published or handed
// to a Board it is read-only.
type Snapshot struct {
	V       int             `json:"v"`
	Replica string          `json:"replica"`
	Version int64           `json:"version"` // newer snapshots of a replica have larger versions
	At      time.Time       `json:"at"`
	High    map[string]bool `json:"high"` // trajectory ids in the high class
	// Held are the trajectory ids held (Hold): a gen-worker hands their gen
	// steps back, to be delivered again after HeldRetry, until a snapshot
	// no longer holds them. Absent: none.
	Held map[string]bool `json:"held,omitempty"`
}

// Class is ClassHigh for a trajectory in the high set, else ClassLow. A nil
// snapshot puts everything in the low class.
func (s *Snapshot) Class(trajID string) string {
	if s != nil && s.High[trajID] {
		return ClassHigh
	}
	return ClassLow
}

// IsHeld reports whether trajID is held by s (a nil snapshot holds none).
func (s *Snapshot) IsHeld(trajID string) bool { return s != nil && s.Held[trajID] }

// Snapshots builds each replica's snapshot: the first highSlots trajectories
// of that replica in the policy's order are high. Every replica with a fact
// gets a snapshot, even with no high slots; facts without a replica (waiting
// samples) are in none.
func Snapshots(p Policy, facts []Fact, highSlots int, version int64, now time.Time) map[string]*Snapshot {
	return SnapshotsOf(facts, p.Order(facts, now), highSlots, version, now)
}

// SnapshotsOf is Snapshots for facts already ordered by a policy (order as
// Policy.Order returns it).
func SnapshotsOf(facts []Fact, order []int, highSlots int, version int64, now time.Time) map[string]*Snapshot {
	out := map[string]*Snapshot{}
	for _, i := range order {
		f := &facts[i]
		if f.Replica == "" {
			continue
		}
		s := out[f.Replica]
		if s == nil {
			s = &Snapshot{V: SnapshotV, Replica: f.Replica, Version: version, At: now, High: make(map[string]bool, highSlots)}
			out[f.Replica] = s
		}
		if len(s.High) < highSlots {
			s.High[f.TrajID] = true
		}
	}
	return out
}

// ErrInvalidSnapshot is wrapped by every DecodeSnapshot error.
var ErrInvalidSnapshot = errors.New("invalid priority snapshot")

// FieldError names the field that made a snapshot invalid.
type FieldError struct {
	Field  string // JSON name, e.g. "replica"
	Reason string
}

func (e *FieldError) Error() string { return "snapshot " + e.Field + ": " + e.Reason }

// Unwrap makes every FieldError match ErrInvalidSnapshot.
func (e *FieldError) Unwrap() error { return ErrInvalidSnapshot }

// Validate reports every problem with s, each a *FieldError.
func (s *Snapshot) Validate() error {
	var errs []error
	if s.V != SnapshotV {
		errs = append(errs, &FieldError{"v", fmt.Sprintf("must be %d, got %d", SnapshotV, s.V)})
	}
	if s.Replica == "" {
		errs = append(errs, &FieldError{"replica", "missing"})
	}
	if s.Version < 0 {
		errs = append(errs, &FieldError{"version", fmt.Sprintf("must be >= 0, got %d", s.Version)})
	}
	return errors.Join(errs...)
}

// Marshal encodes s as JSON for NATS KV, with "v" set to SnapshotV.
func (s *Snapshot) Marshal() ([]byte, error) {
	c := *s
	c.V = SnapshotV
	b, err := json.Marshal(&c)
	if err != nil {
		return nil, fmt.Errorf("encode snapshot of %s: %w", s.Replica, err)
	}
	return b, nil
}

// DecodeSnapshot decodes and validates a snapshot written by Marshal. Its
// High is never nil.
func DecodeSnapshot(b []byte) (*Snapshot, error) {
	var s Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, jsonErr(err)
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if s.High == nil {
		s.High = map[string]bool{}
	}
	return &s, nil
}

// jsonErr names the field of an encoding/json error where it can.
func jsonErr(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return &FieldError{te.Field, fmt.Sprintf("has JSON type %s, want %s", te.Value, te.Type)}
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return &FieldError{"(message)", fmt.Sprintf("malformed JSON at byte %d: %v", se.Offset, se)}
	}
	return &FieldError{"(message)", err.Error()}
}
