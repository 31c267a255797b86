package schema

import "testing"

// The control state names the coordinator's scheduling mode, or none; any
// other is refused, naming the field.
func TestControlScheduling(t *testing.T) {
	for _, mode := range []string{"", "action", "trajectory"} {
		c, err := Decode[Control]([]byte(`{"v":1,"scheduling":"` + mode + `"}`))
		if err != nil || c.Scheduling != mode {
			t.Fatalf("scheduling %q: %+v %v", mode, c, err)
		}
	}
	if _, err := Decode[Control]([]byte(`{"v":1,"scheduling":"batch"}`)); !isField(err, "scheduling") {
		t.Fatalf("Control scheduling batch: %v", err)
	}
}
