package schema

import "fmt"

// GroupMember is what a sample says of its group: its id, group_id,
// group_index and group_size, as Sample.Member reads them.
type GroupMember struct {
	ID    string
	Group string
	Index int
	Size  int
}

// Member returns what s says of its group, and whether it belongs to one:
// a sample with a group_size of at least 1 that is not a validation
// rollout (validation rollouts count towards no group). The group id
// defaults to the sample's id, as Normalize fills it.
func (s *Sample) Member() (GroupMember, bool) {
	m := GroupMember{ID: s.ID, Group: s.GroupID, Index: s.GroupIndex, Size: s.GroupSize}
	if m.Group == "" {
		m.Group = s.ID
	}
	return m, s.GroupSize >= 1 && !s.Validation()
}

// GroupConflict says why m cannot join a group that other holds a place
// in: m takes other's group_index, or says another group_size; nil when
// they agree (or belong to different groups). Members of one group must
// agree on its size and each hold an index of their own, or the group
// never completes (or completes at the first size it saw).
func GroupConflict(m, other GroupMember) error {
	switch {
	case m.Group != other.Group || m.ID == other.ID:
		return nil
	case m.Size != other.Size:
		return &FieldError{Field: "group_size", Reason: fmt.Sprintf("%d, but sample %s of group %s says %d",
			m.Size, other.ID, m.Group, other.Size)}
	case m.Index == other.Index:
		return &FieldError{Field: "group_index", Reason: fmt.Sprintf("%d of group %s is held by sample %s",
			m.Index, m.Group, other.ID)}
	}
	return nil
}

// GroupCheck checks that the samples of a batch agree on their groups: no
// two members of a group share a group_index, and all say the same
// group_size. The zero value is ready to use.
type GroupCheck struct {
	groups map[string]*groupSeen
}

type groupSeen struct {
	first   GroupMember         // the first member seen: the group's size
	indices map[int]GroupMember // by group_index
}

// Add records s, and reports (naming the field and the sample it clashes
// with) why it cannot join its group as the samples added before it did;
// a sample refused is not recorded.
func (c *GroupCheck) Add(s *Sample) error {
	m, ok := s.Member()
	if !ok {
		return nil
	}
	if c.groups == nil {
		c.groups = map[string]*groupSeen{}
	}
	g := c.groups[m.Group]
	if g == nil {
		c.groups[m.Group] = &groupSeen{first: m, indices: map[int]GroupMember{m.Index: m}}
		return nil
	}
	if err := GroupConflict(m, g.first); err != nil {
		return err
	}
	if other, held := g.indices[m.Index]; held {
		if err := GroupConflict(m, other); err != nil {
			return err
		}
	}
	g.indices[m.Index] = m
	return nil
}
