package testkit

import (
	"fmt"
	"slices"
	"testing"

	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/pkg/schema"
)

// Consistent checks that a completed result's tokens are exactly its
// messages rendered turn by turn by tmpl, with each assistant turn's
// generated ids as the server returned them and the loss mask 1 exactly on
// those; that they are the ids of rendering and tokenizing the whole
// conversation at once (the simulator's replies are the tokenizer's own
// encoding), but for a trajectory ended by a limit, whose ids keep the
// generation prompt of the call it did not make before its terminating
// message; that there is one assistant message per turn (a step applied
// twice would add one); and that masks, log-probs and versions line up.
func Consistent(tmpl tokenize.ChatTemplate, r schema.Result) error {
	tok := tmpl.Tokenizer()
	if len(r.LossMask) != len(r.Tokens) || len(r.Logprobs) != len(r.Tokens) || len(r.Versions) != len(r.Tokens) {
		return fmt.Errorf("%s: %d tokens, %d mask, %d logprobs, %d versions", r.TrajID, len(r.Tokens), len(r.LossMask),
			len(r.Logprobs), len(r.Versions))
	}
	pos := 0
	expect := func(ids []int32, what string) error {
		if pos+len(ids) > len(r.Tokens) || !slices.Equal(r.Tokens[pos:pos+len(ids)], ids) {
			return fmt.Errorf("%s: %s at token %d: got %q, want %q", r.TrajID, what, pos,
				tok.Decode(r.Tokens[pos:min(pos+len(ids)+8, len(r.Tokens))]), tok.Decode(ids))
		}
		for i := range ids {
			if r.LossMask[pos+i] != 0 {
				return fmt.Errorf("%s: token %d (%s) is not generated but has mask 1", r.TrajID, pos+i, what)
			}
		}
		pos += len(ids)
		return nil
	}
	if err := expect(tmpl.Begin(), "begin"); err != nil {
		return err
	}
	// A run to its end closes with mini-swe-agent's terminating message (a
	// user message no generation prompt follows).
	closing := schema.Trainable(r.Status) && len(r.Messages) > 0 && r.Messages[len(r.Messages)-1].Role == schema.RoleUser
	turns := 0
	var msgs []tokenize.Msg
	for k, m := range r.Messages {
		msgs = append(msgs, tokenize.Msg{Role: m.Role, Content: m.Content})
		if m.Role != schema.RoleAssistant {
			if err := expect(tmpl.Message(m.Role, m.Content), fmt.Sprintf("message %d (%s)", k, m.Role)); err != nil {
				return err
			}
			if m.Role == schema.RoleUser && !(closing && k == len(r.Messages)-1) {
				if err := expect(tmpl.GenerationPrompt(), "generation prompt"); err != nil {
					return err
				}
			}
			continue
		}
		turns++
		start := pos
		for pos < len(r.Tokens) && r.LossMask[pos] == 1 {
			pos++
		}
		gen := r.Tokens[start:pos]
		if len(gen) == 0 {
			return fmt.Errorf("%s: assistant message %d has no generated tokens", r.TrajID, k)
		}
		if text := tok.Decode(tokenize.TrimStop(gen, tmpl.StopTokenIDs())); text != m.Content {
			return fmt.Errorf("%s: message %d is %q, its generated tokens say %q", r.TrajID, k, m.Content, text)
		}
		if err := expect(tmpl.CloseTurn(gen), "end of turn"); err != nil {
			return err
		}
	}
	if pos != len(r.Tokens) {
		return fmt.Errorf("%s: %d tokens past the messages: %q", r.TrajID, len(r.Tokens)-pos, tok.Decode(r.Tokens[pos:]))
	}
	var end []int32
	if closing {
		m := msgs[len(msgs)-1]
		msgs, end = msgs[:len(msgs)-1], tmpl.Message(m.Role, m.Content)
	}
	last := len(msgs) > 0 && msgs[len(msgs)-1].Role == schema.RoleUser
	if whole := append(tok.Encode(tmpl.Render(msgs, last)), end...); !slices.Equal(whole, r.Tokens) {
		return fmt.Errorf("%s: tokens differ from the whole conversation tokenized at once:\n got %q\nwant %q", r.TrajID,
			tok.Decode(r.Tokens), tok.Decode(whole))
	}
	if turns != r.Turns {
		return fmt.Errorf("%s: %d assistant messages, %d turns", r.TrajID, turns, r.Turns)
	}
	for i, m := range r.LossMask {
		if (m == 1) != (r.Logprobs[i] != 0 || r.Versions[i] >= 0) {
			return fmt.Errorf("%s: token %d: mask %d with logprob %g version %d", r.TrajID, i, m, r.Logprobs[i], r.Versions[i])
		}
	}
	return nil
}

// ChatTemplate returns the built-in chat template name over the Qwen
// tokenizer built into the binary.
func ChatTemplate(t testing.TB, name string) tokenize.ChatTemplate {
	t.Helper()
	tmpl, err := tokenize.Chat{Tokenizer: tokenize.TokenizerQwen, ChatTemplate: name}.Template()
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}
