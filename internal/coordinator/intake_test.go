package coordinator_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/client"
	"github.com/actloop/actloop/pkg/schema"
)

// last waits for the message on subject in stream and decodes it.
func last[T any](t *testing.T, ctx context.Context, js jetstream.JetStream, stream, subject string) T {
	t.Helper()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	var m *jetstream.RawStreamMsg
	testkit.Eventually(t, wait, "a message on "+subject, func() bool {
		m, err = st.GetLastMsgForSubject(ctx, subject)
		return err == nil
	})
	var v T
	if err := json.Unmarshal(m.Data, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// dlqReason waits for a dead letter whose reason holds want, and returns
// it.
func dlqReason(t *testing.T, ctx context.Context, js jetstream.JetStream, want string) string {
	t.Helper()
	st, err := js.Stream(ctx, schema.StreamDLQ)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	testkit.Eventually(t, wait, "a dead letter with "+want, func() bool {
		info, err := st.Info(ctx)
		if err != nil {
			return false
		}
		got = got[:0]
		for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if err != nil {
				continue
			}
			var e schema.DLQEntry
			if json.Unmarshal(m.Data, &e) == nil {
				got = append(got, e.Reason)
				if strings.Contains(e.Reason, want) {
					return true
				}
			}
		}
		return false
	})
	return got[len(got)-1]
}

func member(id, group string, index, size int) schema.Sample {
	s := sample(id)
	s.GroupID, s.GroupIndex, s.GroupSize = group, index, size
	return s
}

// A sample whose id an earlier run used, its Redis keys expired but its
// result still on the results stream, is refused and not run (its result
// could never be stored), dead-lettered naming the earlier run; its group,
// which can now never complete, is ended with the reason (issue 31, items
// 5 and 8).
func TestReusedIDIsRefused(t *testing.T) {
	ctx, s, d := stack(t)
	c, err := s.StartCoordinator(ctx, s.CoordinatorConfig())
	if err != nil {
		t.Fatal(err)
	}
	old := traj.FallbackResult(schema.ResultHead{TrajID: "x", Status: schema.StatusFailed, Reason: "the first run",
		AdmittedAt: time.Now(), FinishedAt: time.Now()})
	if err := d.Results.Publish(ctx, old, schema.MsgID("x", 3, "result")); err != nil {
		t.Fatal(err)
	}
	if err := d.Pub.Publish(ctx, schema.SubjectSamples, "x", member("x", "gx", 0, 2)); err != nil {
		t.Fatal(err)
	}
	reason := dlqReason(t, ctx, d.JS, "sample x refused")
	for _, w := range []string{"its id is taken by an earlier run of x", schema.SubjectResult("x")} {
		if !strings.Contains(reason, w) {
			t.Errorf("dead letter %q lacks %q", reason, w)
		}
	}
	done := last[schema.GroupDone](t, ctx, d.JS, schema.StreamResults, schema.SubjectGroup("gx"))
	if done.Complete() || !strings.Contains(done.Reason, "sample x refused") || done.Size != 2 || len(done.TrajIDs) != 0 {
		t.Fatalf("group gx: %+v, want it ended naming sample x", done)
	}
	if _, err := d.Store.Load(ctx, "x", 0); !errors.Is(err, traj.ErrNotFound) {
		t.Fatalf("trajectory x: %v, want none (not run)", err)
	}
	if st, err := c.Status(ctx); err != nil || int(st.Queued)+st.Active != 0 {
		t.Fatalf("status %+v %v: want nothing taken in", st, err)
	}
	r := last[schema.ResultHead](t, ctx, d.JS, schema.StreamResults, schema.SubjectResult("x"))
	if r.Reason != "the first run" {
		t.Fatalf("result of x: %+v, want the first run's kept", r)
	}
}

// A second sample under the id of one still waiting or running, published
// after the stream's duplicate window (here: under another message id), is
// refused naming the earlier one, not dropped in silence; a sample resubmitted as
// it was does not end its own group (issue 31, item 6).
func TestDuplicateOfATakenIDIsRefused(t *testing.T) {
	ctx, s, d := stack(t)
	c, err := s.StartCoordinator(ctx, s.CoordinatorConfig())
	if err != nil {
		t.Fatal(err)
	}
	w := member("w", "gw", 0, 2)
	if err := d.Pub.Publish(ctx, schema.SubjectSamples, "w", w); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, wait, "w taken in", func() bool {
		st, err := c.Status(ctx)
		return err == nil && int(st.Queued)+st.Active == 1
	})
	if err := d.Pub.Publish(ctx, schema.SubjectSamples, "w-later", w); err != nil {
		t.Fatal(err)
	}
	reason := dlqReason(t, ctx, d.JS, "sample w refused")
	if !strings.Contains(reason, "its id is taken by sample w waiting for admission since") &&
		!strings.Contains(reason, "its id is taken by trajectory w, running on replica") {
		t.Errorf("dead letter %q does not name the earlier sample", reason)
	}
	// w may be counted both waiting and active while it is being admitted.
	testkit.Eventually(t, wait, "w alone taken in", func() bool {
		st, err := c.Status(ctx)
		return err == nil && int(st.Queued)+st.Active == 1
	})
	if n := subjectMsgs(t, ctx, d.JS, schema.SubjectGroup("gw")); n != 0 {
		t.Fatalf("group gw has %d messages: the sample that holds its place still runs", n)
	}
}

// Two members of a group that share a group_index, or disagree on its
// size, are not both taken in: the later is answered with a failed result
// naming the clash, and the group, which can never complete as the
// trainer meant it, gets a GroupDone saying why, instead of never one
// (issue 31, item 8).
func TestInconsistentGroupEnds(t *testing.T) {
	ctx, s, d := stack(t)
	c, err := s.StartCoordinator(ctx, s.CoordinatorConfig())
	if err != nil {
		t.Fatal(err)
	}
	// Each first member is taken in before the second is published: the
	// coordinator takes samples in several at a time, in no set order.
	publish := func(m schema.Sample) {
		t.Helper()
		if err := d.Pub.Publish(ctx, schema.SubjectSamples, m.ID, m); err != nil {
			t.Fatal(err)
		}
	}
	taken := func(n int) {
		t.Helper()
		testkit.Eventually(t, wait, "samples taken in", func() bool {
			st, err := c.Status(ctx)
			return err == nil && int(st.Queued)+st.Active == n
		})
	}
	publish(member("a", "g1", 0, 2))
	taken(1)
	publish(member("b", "g1", 0, 2))
	publish(member("c", "g2", 0, 2))
	taken(2)
	publish(member("d", "g2", 1, 3))
	for _, tt := range []struct{ id, group, want string }{
		{"b", "g1", "group_index: 0 of group g1 is held by sample a"},
		{"d", "g2", "group_size: 3, but sample c of group g2 says 2"},
	} {
		r := last[schema.ResultHead](t, ctx, d.JS, schema.StreamResults, schema.SubjectResult(tt.id))
		if r.Status != schema.StatusFailed || !strings.HasPrefix(r.Reason, "rejected: sample: ") || !strings.Contains(r.Reason, tt.want) {
			t.Errorf("result of %s: %s %q, want failed naming %q", tt.id, r.Status, r.Reason, tt.want)
		}
		done := last[schema.GroupDone](t, ctx, d.JS, schema.StreamResults, schema.SubjectGroup(tt.group))
		if done.Complete() || !strings.Contains(done.Reason, tt.want) {
			t.Errorf("group %s: %+v, want it ended naming %q", tt.group, done, tt.want)
		}
	}
	testkit.Eventually(t, wait, "a and c alone taken in", func() bool {
		st, err := c.Status(ctx)
		return err == nil && int(st.Queued)+st.Active == 2
	})
}

// Members of a group that disagree on its size, taken in at different
// times (the earlier ones finished before the later were submitted, so
// the intake no longer saw them), are not counted at whichever size came
// last, nor left waiting for a size never reached: the first result to
// disagree ends the group, its GroupDone naming the sizes (issue 31, item
// 8). In any order the results are handled, the group ends so.
func TestGroupSizeConflictInResultsEndsGroup(t *testing.T) {
	ctx, s, d := stack(t)
	if _, err := s.StartCoordinator(ctx, s.CoordinatorConfig()); err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct {
		id          string
		index, size int
	}{{"c", 2, 3}, {"b", 1, 3}, {"a", 0, 2}} {
		r := traj.FallbackResult(schema.ResultHead{TrajID: m.id, GroupID: "g3", GroupIndex: m.index, GroupSize: m.size,
			Status: schema.StatusFailed, Reason: "ran", AdmittedAt: time.Now(), FinishedAt: time.Now()})
		if err := d.Results.Publish(ctx, r, schema.MsgID(m.id, 1, "result")); err != nil {
			t.Fatal(err)
		}
	}
	done := last[schema.GroupDone](t, ctx, d.JS, schema.StreamResults, schema.SubjectGroup("g3"))
	if done.Complete() || len(done.TrajIDs) != 0 || !strings.Contains(done.Reason, "group_size") ||
		!strings.Contains(done.Reason, "but its members with a result said") {
		t.Fatalf("group g3: %+v, want it ended naming the sizes that disagree", done)
	}
}

// A member submitted after its group's other members have a result (the
// intake no longer holds them) is checked against what the group stored:
// one that says another size, or takes an index a member with a result
// holds, is refused at intake naming the clash, and the group ended, as
// one that clashes with a waiting member is (issue 31, item 8).
func TestGroupMemberAfterResultsIsRefused(t *testing.T) {
	ctx, s, d := stack(t)
	if _, err := s.StartCoordinator(ctx, s.CoordinatorConfig()); err != nil {
		t.Fatal(err)
	}
	r := traj.FallbackResult(schema.ResultHead{TrajID: "e", GroupID: "g4", GroupIndex: 0, GroupSize: 2,
		Status: schema.StatusFailed, Reason: "ran", AdmittedAt: time.Now(), FinishedAt: time.Now()})
	if err := d.Results.Publish(ctx, r, schema.MsgID("e", 1, "result")); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, wait, "e's result recorded in its group", func() bool {
		size, members, err := d.Store.GroupRecorded(ctx, "g4")
		return err == nil && size == 2 && members[0] == "e"
	})
	for _, tt := range []struct {
		m    schema.Sample
		want string
	}{
		{member("f", "g4", 1, 3), "group_size: 3, but the members of group g4 with a result say 2"},
		{member("h", "g4", 0, 2), "group_index: 0 of group g4 is held by sample e, which has a result"},
	} {
		if err := d.Pub.Publish(ctx, schema.SubjectSamples, tt.m.ID, tt.m); err != nil {
			t.Fatal(err)
		}
		r := last[schema.ResultHead](t, ctx, d.JS, schema.StreamResults, schema.SubjectResult(tt.m.ID))
		if r.Status != schema.StatusFailed || !strings.Contains(r.Reason, tt.want) {
			t.Errorf("result of %s: %s %q, want failed naming %q", tt.m.ID, r.Status, r.Reason, tt.want)
		}
	}
	done := last[schema.GroupDone](t, ctx, d.JS, schema.StreamResults, schema.SubjectGroup("g4"))
	if done.Complete() || !strings.Contains(done.Reason, "group_size") {
		t.Fatalf("group g4: %+v, want it ended naming the size", done)
	}
}

// The coordinator makes a trainer's consumer with
// ACTLOOP_TRAINER_CONSUMER_INACTIVE as its inactive threshold, so that
// the server deletes one nobody pulls from (issue 31, item 12).
func TestTrainerConsumersExpire(t *testing.T) {
	ctx, s, d := stack(t)
	cfg := s.CoordinatorConfig()
	cfg.TrainerConsumerInactive = 90 * time.Minute
	if _, err := s.StartCoordinator(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	// Until the coordinator listens, the client makes the consumer itself
	// (client.ConsumerInactive); once it answers, the consumer is its.
	var got time.Duration
	testkit.Eventually(t, wait, "the coordinator to make the consumer", func() bool {
		cons, err := client.EnsureConsumer(ctx, d.NC, d.JS, "once", schema.SubjectResults)
		if err != nil {
			return false
		}
		info, err := cons.Info(ctx)
		if err != nil {
			return false
		}
		got = info.Config.InactiveThreshold
		return got == cfg.TrainerConsumerInactive
	})
}

func subjectMsgs(t *testing.T, ctx context.Context, js jetstream.JetStream, subject string) uint64 {
	t.Helper()
	st, err := js.Stream(ctx, schema.StreamResults)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[subject]
}
