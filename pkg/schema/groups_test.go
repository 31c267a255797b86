package schema

import (
	"errors"
	"strings"
	"testing"
)

// GroupCheck refuses a member that takes another's group_index or says
// another group_size, naming the field and the other sample; samples of
// no group (group_size 0, validation rollouts) pass (issue 31, item 8).
func TestGroupCheck(t *testing.T) {
	m := func(id, group string, index, size int) Sample {
		return Sample{ID: id, GroupID: group, GroupIndex: index, GroupSize: size}
	}
	val := m("v", "g", 0, 2)
	val.Purpose = PurposeValidation
	tests := []struct {
		name    string
		samples []Sample
		bad     int // index of the refused sample, -1 for none
		want    string
	}{
		{"consistent", []Sample{m("a", "g", 0, 2), m("b", "g", 1, 2), m("c", "h", 0, 2)}, -1, ""},
		{"index twice", []Sample{m("a", "g", 0, 2), m("b", "g", 0, 2)}, 1, "group_index: 0 of group g is held by sample a"},
		{"size disagrees", []Sample{m("a", "g", 0, 2), m("b", "g", 1, 3)}, 1, "group_size: 3, but sample a of group g says 2"},
		{"size disagrees with a later index", []Sample{m("a", "g", 0, 2), m("b", "g", 1, 2), m("c", "g", 1, 4)}, 2, "group_size: 4"},
		{"group id defaults to the id", []Sample{m("a", "", 0, 2), m("b", "a", 0, 2)}, 1, "held by sample a"},
		{"no group", []Sample{m("a", "g", 0, 0), m("b", "g", 0, 0)}, -1, ""},
		{"validation rollouts count to none", []Sample{m("a", "g", 0, 2), val}, -1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c GroupCheck
			for i := range tt.samples {
				err := c.Add(&tt.samples[i])
				switch {
				case i == tt.bad && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want)):
					t.Fatalf("sample %d: %v, want an invalid-field error with %q", i, err, tt.want)
				case i != tt.bad && err != nil:
					t.Fatalf("sample %d: %v", i, err)
				}
			}
		})
	}
}

// A GroupDone that ends a group incomplete says why and may list fewer
// members than its size; a complete one lists them all.
func TestGroupDoneIncomplete(t *testing.T) {
	if _, err := Decode[GroupDone]([]byte(`{"v":1,"group_id":"g","size":2,"traj_ids":[],"reason":"ended incomplete: x"}`)); err != nil {
		t.Fatalf("ended group: %v", err)
	}
	g, err := Decode[GroupDone]([]byte(`{"v":1,"group_id":"g","size":2,"traj_ids":["a","b"]}`))
	if err != nil || !g.Complete() {
		t.Fatalf("complete group: %+v %v", g, err)
	}
}
