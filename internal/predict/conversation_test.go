package predict_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/actloop/actloop/internal/predict"
	"github.com/actloop/actloop/pkg/schema"
)

func msg(role, content string) schema.Message { return schema.Message{Role: role, Content: content} }

// conversation is a stored conversation of three model calls whose third
// reply's observation already came in.
var conversation = []schema.Message{
	msg("system", "sys"), msg("user", "task"),
	msg("assistant", "a1"), msg("user", "o1"),
	msg("assistant", "a2"), msg("user", "format error"),
	msg("assistant", "a3"), msg("user", "o3"),
}

func TestAsAsked(t *testing.T) {
	tests := []struct {
		turns int
		want  int // messages kept
	}{{0, 2}, {1, 3}, {2, 5}, {3, 7}, {4, 8}, {9, 8}}
	for _, tt := range tests {
		if got := predict.AsAsked(conversation, tt.turns); len(got) != tt.want {
			t.Errorf("AsAsked(turns %d) kept %d messages, want %d: %v", tt.turns, len(got), tt.want, got)
		}
	}
}

func TestTail(t *testing.T) {
	msgs := []schema.Message{msg("system", "0123456789"), msg("user", "abcde"), msg("assistant", "xyz")}
	tests := []struct {
		name        string
		msgs        []schema.Message
		max         int
		want        []schema.Message
		wantOmitted int
		wantCut     int
	}{
		{name: "all fit", msgs: msgs, max: 18, want: msgs},
		{name: "oldest left out", msgs: msgs, max: 17, want: msgs[1:], wantOmitted: 1},
		{name: "exactly two", msgs: msgs, max: 8, want: msgs[1:], wantOmitted: 1},
		{name: "newest only", msgs: msgs, max: 7, want: msgs[2:], wantOmitted: 2},
		{name: "newest cut", msgs: msgs, max: 2, want: []schema.Message{msg("assistant", "yz")}, wantOmitted: 2, wantCut: 1},
		{name: "cut at a character boundary", msgs: []schema.Message{msg("user", "ééé")}, max: 3,
			want: []schema.Message{msg("user", "é")}, wantCut: 4},
		{name: "no budget", msgs: msgs, max: 0, wantOmitted: 3},
		{name: "nothing", msgs: nil, max: 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, omitted, cut := predict.Tail(tt.msgs, tt.max)
			if !reflect.DeepEqual(got, tt.want) && (len(got) > 0 || len(tt.want) > 0) || omitted != tt.wantOmitted || cut != tt.wantCut {
				t.Fatalf("Tail = %v, %d, %d; want %v, %d, %d", got, omitted, cut, tt.want, tt.wantOmitted, tt.wantCut)
			}
		})
	}
}

// Whatever the messages and the budget: the tail fits, is valid UTF-8 where
// its source was, and with what was left out makes up the whole.
func FuzzTail(f *testing.F) {
	f.Add("sys", "task", "reply é", 5)
	f.Add("", "", "", 0)
	f.Add(strings.Repeat("x", 100), "ü", "日本語", 4)
	f.Fuzz(func(t *testing.T, a, b, c string, max int) {
		msgs := []schema.Message{msg("system", a), msg("user", b), msg("assistant", c)}
		tail, omitted, cut := predict.Tail(msgs, max)
		size := 0
		for _, m := range tail {
			size += len(m.Content)
		}
		if max > 0 && size > max || max <= 0 && len(tail) > 0 {
			t.Fatalf("tail of %d bytes over the budget %d", size, max)
		}
		if omitted+len(tail) != len(msgs) || omitted < 0 || cut < 0 {
			t.Fatalf("omitted %d + tail %d != %d (cut %d)", omitted, len(tail), len(msgs), cut)
		}
		for i, m := range tail {
			orig := msgs[omitted+i]
			if i == 0 && cut > 0 {
				if orig.Content[cut:] != m.Content || utf8.ValidString(orig.Content) && !utf8.ValidString(m.Content) {
					t.Fatalf("cut tail %q of %q at %d", m.Content, orig.Content, cut)
				}
				continue
			}
			if m != orig {
				t.Fatalf("tail message %d = %v, want %v", i, m, orig)
			}
		}
		if cut > 0 && (len(tail) != 1 || omitted != len(msgs)-1) {
			t.Fatalf("cut %d with a tail of %d", cut, len(tail))
		}
	})
}

func TestConversationOf(t *testing.T) {
	count := func(m schema.Message) int { return 2 + len(m.Content) } // the framing and a token per byte
	tests := []struct {
		name          string
		turns, ctx    int
		max           int
		wantMsgs      []schema.Message
		wantOmitted   int
		wantOmitTok   int
		wantCutBytes  int
		wantEmptyList bool
	}{
		{name: "as asked, all fit", turns: 2, ctx: 100, max: 1 << 10, wantMsgs: conversation[:5], wantOmitTok: 100 - 5*2 - 13},
		{name: "tail, from context tokens", turns: 3, ctx: 100, max: 15, wantMsgs: conversation[5:7], wantOmitted: 5,
			wantOmitTok: 100 - (2 + 12) - (2 + 2)},
		{name: "tail, counted without context tokens", turns: 3, max: 15, wantMsgs: conversation[5:7], wantOmitted: 5,
			wantOmitTok: 5 + 6 + 4 + 4 + 4},
		{name: "cut, counted without context tokens", turns: 3, max: 1, wantMsgs: []schema.Message{msg("assistant", "3")},
			wantOmitted: 6, wantCutBytes: 1, wantOmitTok: 5 + 6 + 4 + 4 + 4 + 14 + 1},
		{name: "context smaller than the tail", turns: 1, ctx: 3, max: 1 << 10, wantMsgs: conversation[:3], wantOmitTok: 0},
		{name: "no budget", turns: 1, ctx: 50, max: 0, wantOmitted: 3, wantOmitTok: 50, wantEmptyList: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := predict.ConversationOf(conversation, tt.turns, tt.ctx, tt.max, count)
			if tt.wantEmptyList && (c.Messages == nil || len(c.Messages) != 0) {
				t.Fatalf("messages %#v, want an empty list (JSON [] rather than null)", c.Messages)
			}
			if !tt.wantEmptyList && !reflect.DeepEqual(c.Messages, tt.wantMsgs) {
				t.Fatalf("messages %v, want %v", c.Messages, tt.wantMsgs)
			}
			if c.OmittedMessages != tt.wantOmitted || c.OmittedTokens != tt.wantOmitTok || c.CutBytes != tt.wantCutBytes {
				t.Fatalf("omitted %d messages, %d tokens, cut %d; want %d, %d, %d", c.OmittedMessages, c.OmittedTokens,
					c.CutBytes, tt.wantOmitted, tt.wantOmitTok, tt.wantCutBytes)
			}
		})
	}
}

func TestSiblingsOf(t *testing.T) {
	progress := map[string]string{"g-2": "500 3", "g-0": "100 1", "self": "9 9", "g-bad": "x 1", "g-neg": "-1 2", "g-1": "0 0"}
	s := predict.SiblingsOf("self", progress, []predict.Total{{Tokens: 1000, Turns: 5}, {Tokens: 300, Turns: 2}})
	want := predict.Siblings{
		Finished: []predict.SiblingTotal{{GenTokens: 1000, Turns: 5}, {GenTokens: 300, Turns: 2}},
		Running: []predict.SiblingProgress{{TrajID: "g-0", GenTokens: 100, Turns: 1}, {TrajID: "g-1"},
			{TrajID: "g-2", GenTokens: 500, Turns: 3}},
	}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("SiblingsOf = %+v, want %+v", s, want)
	}
	if e := predict.SiblingsOf("a", nil, nil); e.Finished == nil || e.Running == nil {
		t.Fatalf("no siblings: %#v, want empty lists (JSON [] rather than null)", e)
	}
	many := map[string]string{}
	var totals []predict.Total
	for i := range predict.MaxSiblings + 5 {
		many[fmt.Sprintf("t-%04d", i)] = "1 1"
		totals = append(totals, predict.Total{Tokens: 1, Turns: 1})
	}
	if s := predict.SiblingsOf("x", many, totals); len(s.Running) != predict.MaxSiblings || len(s.Finished) != predict.MaxSiblings ||
		s.Running[0].TrajID != "t-0000" {
		t.Fatalf("%d running (first %s), %d finished; want %d each, from t-0000", len(s.Running), s.Running[0].TrajID,
			len(s.Finished), predict.MaxSiblings)
	}
}

func TestLastExitCode(t *testing.T) {
	if got := predict.LastExitCode(schema.PredictRequest{ExitCode: 0}); got != nil {
		t.Fatalf("before the first observation: %v, want nil", *got)
	}
	for _, code := range []int{0, 2, -9} {
		if got := predict.LastExitCode(schema.PredictRequest{ObsTokens: 7, ExitCode: code}); got == nil || *got != code {
			t.Fatalf("after an observation with exit code %d: %v", code, got)
		}
	}
}

func TestDecodeHTTPRequest(t *testing.T) {
	const ok = `{"v":1,"traj_id":"t-1","turns":2,"gen_tokens":30,"turn_seq":4,"protocol":2,"last_exit_code":1,` +
		`"conversation":{"messages":[{"role":"user","content":"hi"}],"omitted_messages":3,"omitted_tokens":90,"cut_bytes":0},` +
		`"siblings":{"finished":[{"gen_tokens":100,"turns":3}],"running":[{"traj_id":"t-2","gen_tokens":5,"turns":1}]},"future":true}`
	r, err := predict.DecodeHTTPRequest([]byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	if r.TrajID != "t-1" || r.Protocol != 2 || *r.LastExitCode != 1 || r.Conversation.OmittedTokens != 90 ||
		r.Siblings.Running[0].TrajID != "t-2" {
		t.Fatalf("decoded %+v", r)
	}
	tests := []struct{ name, body, field string }{
		{"not JSON", `{`, "JSON"},
		{"no version", `{"traj_id":"t-1","turn_seq":0}`, "v"},
		{"bad traj_id", `{"v":1,"traj_id":"","turn_seq":0}`, "traj_id"},
		{"future protocol", `{"v":1,"traj_id":"t","turn_seq":0,"protocol":3}`, "protocol"},
		{"role missing", `{"v":1,"traj_id":"t","turn_seq":0,"conversation":{"messages":[{"content":"x"}]}}`, "conversation.messages[0].role"},
		{"negative omitted", `{"v":1,"traj_id":"t","turn_seq":0,"conversation":{"messages":[],"omitted_tokens":-1}}`, "conversation.omitted_tokens"},
		{"cut of nothing", `{"v":1,"traj_id":"t","turn_seq":0,"conversation":{"messages":[],"cut_bytes":2}}`, "conversation.cut_bytes"},
		{"too long", `{"v":1,"traj_id":"t","turn_seq":0,"conversation":{"messages":[{"role":"user","content":"` +
			strings.Repeat("x", predict.MaxMessagesBytes+1) + `"}]}}`, "conversation.messages"},
		{"finished without turns", `{"v":1,"traj_id":"t","turn_seq":0,"siblings":{"finished":[{"gen_tokens":1,"turns":0}]}}`, "siblings.finished[0]"},
		{"running bad id", `{"v":1,"traj_id":"t","turn_seq":0,"siblings":{"running":[{"traj_id":"a b"}]}}`, "siblings.running[0].traj_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := predict.DecodeHTTPRequest([]byte(tt.body))
			if !errors.Is(err, predict.ErrBadRequest) || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("DecodeHTTPRequest: %v, want ErrBadRequest naming %s", err, tt.field)
			}
		})
	}
}
