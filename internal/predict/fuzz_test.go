package predict

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/actloop/actloop/pkg/schema"
)

func FuzzDecodeHTTPReply(f *testing.F) {
	f.Add([]byte(`{"remaining_tokens": 1234.5, "remaining_turns": 3}`))
	f.Add([]byte(`{"remaining_tokens": 0, "remaining_turns": 0, "source": "x"}`))
	f.Add([]byte(`{"remaining_tokens": -1, "remaining_turns": 3}`))
	f.Add([]byte(`{"remaining_tokens": 1e400, "remaining_turns": 3}`))
	f.Add([]byte(`{"remaining_tokens": "1", "remaining_turns": 3}`))
	f.Add([]byte(`{"remaining_turns": 3}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`[]`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, b []byte) {
		rep, err := decodeHTTPReply(b)
		if err != nil {
			if !errors.Is(err, ErrBadReply) {
				t.Fatalf("error %v does not wrap ErrBadReply", err)
			}
			return
		}
		if rep.Source != SourceHTTP || rep.Error != "" {
			t.Fatalf("reply %+v", rep)
		}
		if err := rep.Validate(); err != nil {
			t.Fatalf("accepted an invalid reply %+v: %v", rep, err)
		}
	})
}

func FuzzDecodeHTTPRequest(f *testing.F) {
	f.Add([]byte(`{"v":1,"traj_id":"t-1","turns":2,"gen_tokens":30,"turn_seq":4,"protocol":2,"last_exit_code":1,` +
		`"conversation":{"messages":[{"role":"user","content":"hi"}],"omitted_messages":3,"omitted_tokens":90,"cut_bytes":1},` +
		`"siblings":{"finished":[{"gen_tokens":100,"turns":3}],"running":[{"traj_id":"t-2","gen_tokens":5,"turns":1}]}}`))
	f.Add([]byte(`{"v":1,"traj_id":"t-1","turn_seq":0}`))
	f.Add([]byte(`{"v":1,"traj_id":"t-1","turn_seq":0,"protocol":2,"last_exit_code":null,"conversation":null,"siblings":null}`))
	f.Add([]byte(`{"v":1,"traj_id":"t-1","turn_seq":0,"conversation":{"messages":[{"role":"","content":"x"}]}}`))
	f.Add([]byte(`{"v":1,"traj_id":"t-1","turn_seq":0,"siblings":{"running":[{"traj_id":"../x"}]}}`))
	f.Add([]byte(`{"v":2}`))
	f.Add([]byte(`null`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeHTTPRequest(b)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("error %v does not wrap ErrBadRequest", err)
			}
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("accepted an invalid request %+v: %v", r, err)
		}
		again, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("accepted a request it cannot encode: %v", err)
		}
		if _, err := DecodeHTTPRequest(again); err != nil {
			t.Fatalf("its own encoding %s is refused: %v", again, err)
		}
	})
}

// Whatever the stored conversation, the body HTTP builds of it is one a
// model server's decoder accepts.
func FuzzHTTPBodyDecodes(f *testing.F) {
	f.Add("sys", "task", "reply", "obs", 2, 100, 64, 1)
	f.Add("", "", "", "", 0, 0, 0, 0)
	f.Add("é", "日本語", "\x00\xff", "x", 5, -3, 1, 0)
	f.Fuzz(func(t *testing.T, a, b, c, d string, turns, ctxTokens, maxBytes, exit int) {
		msgs := []schema.Message{{Role: "system", Content: a}, {Role: "user", Content: b},
			{Role: "assistant", Content: c}, {Role: "user", Content: d}}
		turns, ctxTokens, maxBytes = max(turns, 0)%4, max(ctxTokens, 0), max(maxBytes, 0)%MaxMessagesBytes
		conv := ConversationOf(msgs, turns, ctxTokens, maxBytes, func(m schema.Message) int { return 3 + len(m.Content) })
		req := schema.PredictRequest{V: schema.Version, TrajID: "t-1", Turns: turns, ContextTokens: ctxTokens, ObsTokens: 1, ExitCode: exit}
		in := HTTPRequest{PredictRequest: req, Protocol: HTTPProtocol, LastExitCode: LastExitCode(req), Conversation: &conv,
			Siblings: &Siblings{Finished: []SiblingTotal{}, Running: []SiblingProgress{}}}
		body, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeHTTPRequest(body)
		if err != nil {
			t.Fatalf("the body %s is refused: %v", body, err)
		}
		if got.Conversation.OmittedMessages+len(got.Conversation.Messages) != len(AsAsked(msgs, turns)) {
			t.Fatalf("conversation %+v does not add up to the %d messages asked about", got.Conversation, len(AsAsked(msgs, turns)))
		}
	})
}
