package client_test

import (
	"testing"

	"github.com/actloop/actloop/pkg/client"
	"github.com/actloop/actloop/pkg/schema"
)

// PublishFirst goes by the subject, not the message id: a subject with its
// message refuses every later publish (under the same id or another), and
// a subject whose message is gone takes the next publish even under the
// id the stream's duplicate window still remembers (the stream would
// answer that one as a duplicate and store nothing).
func TestPublishFirstGoesBySubject(t *testing.T) {
	e := newEnv(t)
	stream, err := e.js.Stream(e.ctx, schema.StreamResults)
	if err != nil {
		t.Fatal(err)
	}
	subject := schema.SubjectGroup("g")
	steps := []struct {
		name       string
		msgID      string
		deleteLast bool // the stream loses the subject's message first
		want       bool
	}{
		{name: "first", msgID: "group:g", want: true},
		{name: "same id again", msgID: "group:g", want: false},
		{name: "another id", msgID: "group:g:other", want: false},
		{name: "same id after the message is lost", msgID: "group:g", deleteLast: true, want: true},
		{name: "same id once more", msgID: "group:g", want: false},
	}
	for _, s := range steps {
		if s.deleteLast {
			m, err := stream.GetLastMsgForSubject(e.ctx, subject)
			if err != nil {
				t.Fatal(err)
			}
			if err := stream.DeleteMsg(e.ctx, m.Sequence); err != nil {
				t.Fatal(err)
			}
		}
		stored, err := client.PublishFirst(e.ctx, e.js, subject, s.msgID, []byte(`{"v":1}`))
		if err != nil || stored != s.want {
			t.Fatalf("%s: stored %v (%v), want %v", s.name, stored, err, s.want)
		}
		if _, err := stream.GetLastMsgForSubject(e.ctx, subject); err != nil {
			t.Fatalf("%s: the subject holds no message: %v", s.name, err)
		}
	}
	info, err := stream.Info(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("%d messages on the stream, want 1", info.State.Msgs)
	}
}
