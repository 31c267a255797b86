package priority

import (
	"testing"
	"time"
)

func TestFCFSAndSnapshots(t *testing.T) {
	t0 := time.Unix(1000, 0)
	facts := []Fact{
		{TrajID: "c", Replica: "r0", AdmittedAt: t0.Add(2 * time.Second)},
		{TrajID: "a", Replica: "r0", AdmittedAt: t0},
		{TrajID: "b", Replica: "r1", AdmittedAt: t0.Add(time.Second)},
		{TrajID: "d", Replica: "r0", AdmittedAt: t0.Add(time.Second)},
	}
	got := FCFS{}.Rank(facts, t0)
	want := []string{"a", "b", "d", "c"}
	for i, f := range got {
		if f.TrajID != want[i] {
			t.Fatalf("rank %d = %s, want %s (%v)", i, f.TrajID, want[i], got)
		}
	}
	snaps := Snapshots(FCFS{}, facts, 2, 7, t0)
	if s := snaps["r0"]; s.Class("a") != ClassHigh || s.Class("d") != ClassHigh || s.Class("c") != ClassLow || s.Version != 7 {
		t.Fatalf("r0 snapshot %+v", s)
	}
	var none *Snapshot
	if none.Class("a") != ClassLow {
		t.Fatal("nil snapshot must classify low")
	}
	if _, err := ByName("nope"); err == nil {
		t.Fatal("unknown policy accepted")
	}
}
