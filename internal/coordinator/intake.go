package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/client"
	"github.com/actloop/actloop/pkg/schema"
)

// A sample id names one run (docs/trainer-api.md, "Sample ids"): from the
// moment a sample is taken in until its result has left the results stream
// (ACTLOOP_RESULTS_MAX_AGE), a second sample under its id is refused, not
// run, since its result could never be stored on actloop.results.<id>,
// which holds one message ever. The trainer's client refuses such a sample
// before publishing it wherever it can see the earlier run (a result on
// the stream, a sample within the duplicate window); the coordinator
// refuses the rest here.

// holder is the earlier run that holds a sample id: what it is, in words,
// and what it says of its group (ok false when it says nothing or belongs
// to none).
type holder struct {
	what   string
	member schema.GroupMember
	ok     bool
}

// idHolder returns the earlier run that holds id, nil when id is free: a
// sample waiting, a trajectory running or whose state Redis keeps, or a
// result on the results stream.
func (c *Coordinator) idHolder(ctx context.Context, id string) (*holder, error) {
	if w := c.waiting.get(id); w != nil {
		m, ok := w.Sample.Member()
		return &holder{what: fmt.Sprintf("sample %s waiting for admission since %s", id, w.ArrivedAt.UTC().Format(time.RFC3339)),
			member: m, ok: ok}, nil
	}
	if e, ok := c.active.entry(id); ok {
		m, ok := entryMember(id, e)
		return &holder{what: fmt.Sprintf("trajectory %s, running on replica %s", id, e.Replica), member: m, ok: ok}, nil
	}
	switch t, err := c.store.Load(ctx, id, 0); {
	case err == nil:
		m, ok := t.Sample.Member()
		what := fmt.Sprintf("trajectory %s, admitted at %s, %s", id, t.AdmittedAt.UTC().Format(time.RFC3339), t.Status)
		if t.End != "" {
			what += fmt.Sprintf(" with status %s", t.End)
		}
		return &holder{what: what, member: m, ok: ok}, nil
	case !errors.Is(err, traj.ErrNotFound):
		return nil, err
	}
	taken, err := client.CheckIDs(ctx, c.d.JS, []string{id})
	if err != nil {
		return nil, err
	}
	if taken[0] != nil {
		return &holder{what: fmt.Sprintf("an earlier run of %s, whose result %s holds (kept ACTLOOP_RESULTS_MAX_AGE)", id,
			schema.SubjectResult(id))}, nil
	}
	return nil, nil
}

// entryMember is what an active trajectory's index entry says of its group.
func entryMember(id string, e traj.ActiveEntry) (schema.GroupMember, bool) {
	s := schema.Sample{ID: id, GroupID: e.GroupID, GroupIndex: e.GroupIndex, GroupSize: e.GroupSize, Purpose: e.Purpose}
	return s.Member()
}

// redelivered reports whether m was delivered before: a sample the
// coordinator took in once and whose acknowledgement was lost.
func redelivered(m jetstream.Msg) bool {
	md, err := m.Metadata()
	return err == nil && md.NumDelivered > 1
}

// refuseTaken refuses s, whose id h holds: the sample is dead-lettered
// with the reason (the handler's error), and not run; the earlier run
// keeps the id and has the one result under it. If s's place in its group
// is not h's (a sample resubmitted as it was keeps its group whole), that
// group can never complete and is ended (endGroup).
func (c *Coordinator) refuseTaken(ctx context.Context, s schema.Sample, h *holder) error {
	reason := fmt.Sprintf("sample %s refused: its id is taken by %s; a sample id names one run, so this one was not run", s.ID, h.what)
	c.d.Log.Warn("sample refused: id taken", "traj_id", s.ID, "earlier", h.what)
	if m, ok := s.Member(); ok && (!h.ok || h.member != m) {
		if err := c.endGroup(ctx, m.Group, m.Size, reason); err != nil {
			return err // tried again
		}
	}
	return bus.Malformed(errors.New(reason))
}

// groupConflict says why s cannot join its group as the group's waiting
// and running members, and those with a result, hold it (an index held,
// another size): conflict, nil when it can or belongs to no group; err is
// a failure to read the group's stored members (try again).
func (c *Coordinator) groupConflict(ctx context.Context, s schema.Sample) (conflict, err error) {
	m, ok := s.Member()
	if !ok {
		return nil, nil
	}
	size, members, err := c.store.GroupRecorded(ctx, m.Group)
	if err != nil {
		return nil, err
	}
	switch held, ok := members[m.Index]; {
	case size != 0 && size != m.Size:
		return &schema.FieldError{Field: "group_size", Reason: fmt.Sprintf("%d, but the members of group %s with a result say %d",
			m.Size, m.Group, size)}, nil
	case ok && held != s.ID:
		return &schema.FieldError{Field: "group_index", Reason: fmt.Sprintf("%d of group %s is held by sample %s, which has a result",
			m.Index, m.Group, held)}, nil
	}
	return c.liveGroupConflict(m), nil
}

// liveGroupConflict is groupConflict over the group's waiting and running
// members.
func (c *Coordinator) liveGroupConflict(m schema.GroupMember) error {
	groups := map[string]bool{m.Group: true}
	for _, id := range c.waiting.inGroups(groups) {
		if w := c.waiting.get(id); w != nil {
			if other, ok := w.Sample.Member(); ok {
				if err := schema.GroupConflict(m, other); err != nil {
					return err
				}
			}
		}
	}
	for _, id := range c.active.inGroups(groups) {
		if e, ok := c.active.entry(id); ok {
			if other, ok := entryMember(id, e); ok {
				if err := schema.GroupConflict(m, other); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// refuseGroupConflict refuses s, which cannot join its group (err says
// why): its group is ended (it can never complete as the trainer meant
// it), then s is answered with a result of status failed, and
// dead-lettered.
func (c *Coordinator) refuseGroupConflict(ctx context.Context, s schema.Sample, data []byte, err error) error {
	m, _ := s.Member()
	err = fmt.Errorf("sample: %w", err)
	if gerr := c.endGroup(ctx, m.Group, m.Size, fmt.Sprintf("sample %s refused: %v", s.ID, err)); gerr != nil {
		return gerr
	}
	if rerr := c.reject(ctx, data, err); rerr != nil {
		return rerr
	}
	return bus.Malformed(err)
}
