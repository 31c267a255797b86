package priority_test

import (
	"slices"
	"testing"

	"github.com/actloop/actloop/pkg/priority"
)

func TestHold(t *testing.T) {
	capacity := map[string]int{"a": 10000, "b": 10000}
	at := func(replica string, context int, held bool) priority.Footprint {
		return priority.Footprint{Replica: replica, Context: context, Held: held}
	}
	tests := []struct {
		name    string
		fs      []priority.Footprint
		perTurn float64
		want    []bool
	}{
		{"all fit: none held",
			[]priority.Footprint{at("a", 3000, false), at("a", 3000, false), at("a", 3000, false)}, 300,
			[]bool{false, false, false}},
		{"one turn more overfills a: the last in order is held",
			[]priority.Footprint{at("a", 3000, false), at("a", 3000, false), at("a", 3000, false)}, 400,
			[]bool{false, false, true}},
		{"as many are held as it takes, from the last",
			[]priority.Footprint{at("a", 4000, false), at("a", 4000, false), at("a", 4000, false), at("a", 100, false)}, 500,
			[]bool{false, false, true, true}},
		{"each replica on its own pool",
			[]priority.Footprint{at("a", 6000, false), at("b", 6000, false), at("a", 6000, false), at("b", 1000, false)}, 0,
			[]bool{false, false, true, false}},
		{"a held one is let go once it fits within ReleaseBelow",
			[]priority.Footprint{at("a", 4000, false), at("a", 4000, true)}, 500,
			[]bool{false, false}},
		{"but not while it would take the need past ReleaseBelow (hysteresis)",
			[]priority.Footprint{at("a", 4300, false), at("a", 4300, true)}, 300,
			[]bool{false, true}},
		{"let go in policy order, stopping at the first that does not fit",
			[]priority.Footprint{at("a", 2000, false), at("a", 7100, true), at("a", 100, true)}, 0,
			[]bool{false, true, true}},
		{"a finishing trajectory needs nothing and is never held",
			[]priority.Footprint{at("a", 9000, false), {Replica: "a", Context: 9000, Finishing: true, Held: true}}, 0,
			[]bool{false, false}},
		{"a replica that reports no pool holds nothing",
			[]priority.Footprint{at("c", 90000, false), at("c", 90000, true)}, 0,
			[]bool{false, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := (priority.KVPools{Capacity: capacity, Budget: 1}).Hold(tt.fs, tt.perTurn); !slices.Equal(got, tt.want) {
				t.Fatalf("Hold = %v, want %v", got, tt.want)
			}
		})
	}
}

// What Hold decides is stable: deciding again on what it decided, with
// nothing else changed, changes nothing, and the unheld contexts then fit.
func TestHoldIsStable(t *testing.T) {
	capacity := map[string]int{"a": 50000}
	var fs []priority.Footprint
	for k := range 40 {
		fs = append(fs, priority.Footprint{Replica: "a", Context: 500 + 137*k%3000, Held: k%7 == 3})
	}
	for _, budget := range []float64{0.5, 0.9, 1} {
		first := (priority.KVPools{Capacity: capacity, Budget: budget}).Hold(fs, 250)
		again := slices.Clone(fs)
		need := 0.0
		for k := range again {
			again[k].Held = first[k]
			if !first[k] {
				need += float64(again[k].Context) + 250
			}
		}
		if need > priority.HoldAbove*budget*50000 {
			t.Fatalf("budget %v: unheld need %v over the pool's %v", budget, need, budget*50000)
		}
		if second := (priority.KVPools{Capacity: capacity, Budget: budget}).Hold(again, 250); !slices.Equal(first, second) {
			t.Fatalf("budget %v: a second decision changed the first:\n%v\n%v", budget, first, second)
		}
	}
}

// With KV residency (Total set), a trajectory whose command runs
// (Offloadable) counts OnDevice of its need against the device pool, and
// every unheld one its whole need against Total: one is held while either
// is over, an Offloadable one only for Total.
func TestHoldWithKVResidency(t *testing.T) {
	pools := priority.KVPools{Capacity: map[string]int{"a": 10000}, Budget: 1, Total: map[string]int{"a": 20000}}
	at := func(context int, offloadable, held bool) priority.Footprint {
		return priority.Footprint{Replica: "a", Context: context, Offloadable: offloadable, Held: held}
	}
	tests := []struct {
		name string
		fs   []priority.Footprint
		want []bool
	}{
		{"contexts in their commands leave the device to those that generate",
			[]priority.Footprint{at(4000, false, false), at(4000, true, false), at(4000, true, false), at(4000, false, false)},
			[]bool{false, false, false, false}},
		{"the device overfills with those that generate: the last of them is held, not one in its command",
			[]priority.Footprint{at(4000, false, false), at(4000, false, false), at(4000, false, false), at(4000, true, false)},
			[]bool{false, false, true, false}},
		{"both tiers together overfill: the last is held, in its command or not",
			[]priority.Footprint{at(6000, true, false), at(6000, true, false), at(6000, true, false), at(6000, true, false)},
			[]bool{false, false, false, true}},
		{"a held one is let go when both have room",
			[]priority.Footprint{at(3000, true, false), at(3000, false, true)},
			[]bool{false, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pools.Hold(tt.fs, 0); !slices.Equal(got, tt.want) {
				t.Fatalf("Hold = %v, want %v", got, tt.want)
			}
		})
	}
	// Counted at half on the device, one in its command still leaves the
	// holding to those that generate while only the device is over.
	half := pools
	half.OnDevice = 0.5
	fs0 := []priority.Footprint{at(4500, false, false), at(4500, false, false), at(4500, true, false)}
	if got := half.Hold(fs0, 0); !slices.Equal(got, []bool{false, true, false}) {
		t.Fatalf("OnDevice 0.5: %v, want the second held, not the third (in its command)", got)
	}
	// Without Total, Offloadable changes nothing: every context counts on
	// the device.
	fs := []priority.Footprint{at(6000, true, false), at(6000, true, false)}
	if got := (priority.KVPools{Capacity: pools.Capacity, Budget: 1}).Hold(fs, 0); !slices.Equal(got, []bool{false, true}) {
		t.Fatalf("without residency: %v", got)
	}
}
