package priority

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSnapshots(t *testing.T) {
	now := sec(100)
	facts := []Fact{
		{TrajID: "a", Replica: "r0", AdmittedAt: sec(1), Predicted: 100},
		{TrajID: "b", Replica: "r0", AdmittedAt: sec(2), Predicted: 900},
		{TrajID: "c", Replica: "r0", AdmittedAt: sec(3), Predicted: 500},
		{TrajID: "d", Replica: "r1", AdmittedAt: sec(4), Predicted: 50},
		{TrajID: "e", Replica: "r1", AdmittedAt: sec(5), Predicted: 10, WaitingSince: now.Add(-time.Minute)}, // aged
		{TrajID: "f", Replica: "r1", AdmittedAt: sec(6), Predicted: 70},
		{TrajID: "w", Replica: "", AdmittedAt: sec(0), Predicted: 1e9}, // waiting sample
	}
	lpt := mustNew(t, "lpt", Config{AgeLimit: time.Minute})
	tests := []struct {
		name      string
		highSlots int
		want      map[string][]string // replica -> high ids
	}{
		{name: "top two per replica", highSlots: 2, want: map[string][]string{"r0": {"b", "c"}, "r1": {"e", "f"}}},
		{name: "one slot, ageing wins", highSlots: 1, want: map[string][]string{"r0": {"b"}, "r1": {"e"}}},
		{name: "no high slots", highSlots: 0, want: map[string][]string{"r0": {}, "r1": {}}},
		{name: "more slots than trajectories", highSlots: 10, want: map[string][]string{"r0": {"a", "b", "c"}, "r1": {"d", "e", "f"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snaps := Snapshots(lpt, facts, tt.highSlots, 42, now)
			if got := slices.Sorted(maps.Keys(snaps)); !slices.Equal(got, []string{"r0", "r1"}) {
				t.Fatalf("replicas = %v, want [r0 r1]", got)
			}
			for replica, want := range tt.want {
				s := snaps[replica]
				if s.Replica != replica || s.Version != 42 || !s.At.Equal(now) || s.V != SnapshotV {
					t.Fatalf("%s header = %+v", replica, s)
				}
				if got := slices.Sorted(maps.Keys(s.High)); !slices.Equal(got, want) {
					t.Fatalf("%s high = %v, want %v", replica, got, want)
				}
				for _, f := range facts {
					want := ClassLow
					if slices.Contains(tt.want[f.Replica], f.TrajID) {
						want = ClassHigh
					}
					if f.Replica == replica && s.Class(f.TrajID) != want {
						t.Fatalf("%s class of %s = %s, want %s", replica, f.TrajID, s.Class(f.TrajID), want)
					}
				}
			}
		})
	}
	if snaps := Snapshots(lpt, nil, 4, 1, now); len(snaps) != 0 {
		t.Fatalf("snapshots of nothing = %v", snaps)
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	s := &Snapshot{Replica: "r3", Version: 17, At: sec(5).In(time.FixedZone("x", 3600)), High: map[string]bool{"a": true, "b": true},
		Held: map[string]bool{"c": true}}
	b, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"v":1`) {
		t.Fatalf("encoded %s has no v", b)
	}
	got, err := DecodeSnapshot(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.V != SnapshotV || got.Replica != s.Replica || got.Version != s.Version || !got.At.Equal(s.At) || !maps.Equal(got.High, s.High) ||
		!maps.Equal(got.Held, s.Held) || !got.IsHeld("c") || got.IsHeld("a") {
		t.Fatalf("round trip: %+v, want %+v", got, s)
	}
	if s.V != 0 {
		t.Fatal("Marshal modified its receiver")
	}
}

func TestDecodeSnapshot(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		wantField string // "" = valid
		wantHigh  []string
	}{
		{name: "valid", in: `{"v":1,"replica":"r0","version":3,"at":"2026-01-02T03:04:05Z","high":{"a":true,"b":false}}`, wantHigh: []string{"a"}},
		{name: "version zero", in: `{"v":1,"replica":"r0","version":0}`},
		{name: "null high", in: `{"v":1,"replica":"r0","version":1,"high":null}`},
		{name: "unknown fields ignored", in: `{"v":1,"replica":"r0","version":1,"later":[1,2]}`},
		{name: "missing replica", in: `{"v":1,"version":1}`, wantField: "replica"},
		{name: "empty replica", in: `{"v":1,"replica":"","version":1}`, wantField: "replica"},
		{name: "negative version", in: `{"v":1,"replica":"r0","version":-1}`, wantField: "version"},
		{name: "missing v", in: `{"replica":"r0","version":1}`, wantField: "v"},
		{name: "future v", in: `{"v":2,"replica":"r0","version":1}`, wantField: "v"},
		{name: "version a string", in: `{"v":1,"replica":"r0","version":"7"}`, wantField: "version"},
		{name: "high a list", in: `{"v":1,"replica":"r0","version":1,"high":["a"]}`, wantField: "high"},
		{name: "bad time", in: `{"v":1,"replica":"r0","version":1,"at":"yesterday"}`, wantField: "(message)"},
		{name: "truncated", in: `{"v":1,"replica":"r0"`, wantField: "(message)"},
		{name: "not an object", in: `[]`, wantField: "(message)"},
		{name: "empty", in: ``, wantField: "(message)"},
		{name: "trailing data", in: `{"v":1,"replica":"r0","version":1}{}`, wantField: "(message)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := DecodeSnapshot([]byte(tt.in))
			if tt.wantField == "" {
				if err != nil {
					t.Fatal(err)
				}
				if s.High == nil {
					t.Fatal("High is nil")
				}
				for _, id := range tt.wantHigh {
					if s.Class(id) != ClassHigh {
						t.Fatalf("%s not high in %+v", id, s)
					}
				}
				return
			}
			if s != nil || !errors.Is(err, ErrInvalidSnapshot) {
				t.Fatalf("got %+v, %v; want an ErrInvalidSnapshot", s, err)
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tt.wantField {
				t.Fatalf("err = %v, want field %q", err, tt.wantField)
			}
			if !strings.Contains(err.Error(), tt.wantField) {
				t.Fatalf("err %q does not name %q", err, tt.wantField)
			}
		})
	}
	// Several problems are reported together.
	_, err := DecodeSnapshot([]byte(`{"v":1,"replica":"","version":-2}`))
	if err == nil || !strings.Contains(err.Error(), "replica") || !strings.Contains(err.Error(), "version") {
		t.Fatalf("err = %v, want both replica and version", err)
	}
}

func FuzzDecodeSnapshot(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"replica":"r0","version":3,"at":"2026-01-02T03:04:05Z","high":{"a":true,"b":false}}`,
		`{"v":1,"replica":"r0","version":0,"high":null}`,
		`{"v":1,"replica":"r","version":9223372036854775807,"at":"0001-01-01T00:00:00+23:59"}`,
		`{"v":1,"replica":"r0","version":-1}`,
		`{"v":"1","replica":["r0"]}`,
		`{"Replica":"r0","V":1,"VERSION":1e3}`,
		`null`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSnapshot(b)
		if err != nil {
			if s != nil || !errors.Is(err, ErrInvalidSnapshot) {
				t.Fatalf("error %v (%T) with snapshot %+v", err, err, s)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("decoded snapshot invalid: %v", err)
		}
		if s.High == nil {
			t.Fatal("High is nil")
		}
		enc, err := s.Marshal()
		if err != nil {
			t.Fatalf("re-encode %+v: %v", s, err)
		}
		again, err := DecodeSnapshot(enc)
		if err != nil {
			t.Fatalf("decode re-encoded %s: %v", enc, err)
		}
		if again.Replica != s.Replica || again.Version != s.Version || !again.At.Equal(s.At) || !maps.Equal(again.High, s.High) {
			t.Fatalf("round trip changed %+v into %+v", s, again)
		}
		if !json.Valid(enc) {
			t.Fatalf("Marshal wrote invalid JSON %s", enc)
		}
	})
}

func TestStepClass(t *testing.T) {
	tests := []struct {
		name  string
		class string
		first bool
		want  string
	}{
		{"a high first generation waits in hi", ClassHigh, true, ClassHigh},
		{"a low first generation waits in lo", ClassLow, true, ClassLow},
		{"a high trajectory under way waits in rhi", ClassHigh, false, ClassHighResume},
		{"a low trajectory under way waits in rlo", ClassLow, false, ClassLowResume},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := StepClass(tt.class, tt.first); got != tt.want {
				t.Errorf("StepClass(%q, %v) = %q, want %q", tt.class, tt.first, got, tt.want)
			}
		})
	}
	// The dispatch order takes every trajectory under way before any first
	// generation, high before low within each.
	pos := func(c string) int { return slices.Index(DispatchOrder, c) }
	if !(pos(ClassHighResume) < pos(ClassLowResume) && pos(ClassLowResume) < pos(ClassHigh) && pos(ClassHigh) < pos(ClassLow)) {
		t.Errorf("DispatchOrder = %v, want rhi, rlo, hi, lo", DispatchOrder)
	}
}
