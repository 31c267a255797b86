package sim

import (
	"fmt"
	"slices"

	"github.com/actloop/actloop/internal/tokenize"
)

// vocab is what the simulator knows of its tokenizer: it reads prompts
// rendered with the ChatML template and writes replies in the same ids.
type vocab struct {
	tok                       tokenize.Tokenizer
	imStart, imEnd, endOfText int32
	assistant, user, assistNL []int32 // "assistant", "user", "assistant\n"
	special                   func(id int32) bool
	size                      int32 // ids are in [0, size)
}

// CheckTokenizer reports whether the simulator can work with tok: it needs
// ChatML's <|im_start|>, <|im_end|> and <|endoftext|> as single tokens.
func CheckTokenizer(tok tokenize.Tokenizer) error {
	_, err := newVocab(tok)
	return err
}

func newVocab(tok tokenize.Tokenizer) (*vocab, error) {
	if tok == nil {
		tok = tokenize.Bytes{}
	}
	v := &vocab{tok: tok, assistant: tok.Encode("assistant"), user: tok.Encode("user"), assistNL: tok.Encode("assistant\n")}
	for _, sp := range []struct {
		text string
		id   *int32
	}{{"<|im_start|>", &v.imStart}, {"<|im_end|>", &v.imEnd}, {"<|endoftext|>", &v.endOfText}} {
		ids := tok.Encode(sp.text)
		if len(ids) != 1 {
			return nil, fmt.Errorf("sim: the tokenizer has no %s token", sp.text)
		}
		*sp.id = ids[0]
	}
	v.size = tokenize.VocabBytes
	if t, ok := tok.(interface{ VocabSize() int }); ok {
		v.size = int32(t.VocabSize())
	}
	switch t := tok.(type) {
	case interface{ IsSpecial(int32) bool }:
		v.special = t.IsSpecial
	default: // Bytes: its three specials
		v.special = func(id int32) bool { return id >= tokenize.ImStart && id < tokenize.VocabBytes }
	}
	return v, nil
}

// roleAt reports whether ids[i] opens a turn of role (<|im_start|> then the role).
func (v *vocab) roleAt(ids []int32, i int, role []int32) bool {
	return ids[i] == v.imStart && i+1+len(role) <= len(ids) && slices.Equal(ids[i+1:i+1+len(role)], role)
}

// countAssistantTurns counts the assistant turns opened in ids, the one the
// generation prompt opens included.
func (v *vocab) countAssistantTurns(ids []int32) int {
	n := 0
	for i := range ids {
		if v.roleAt(ids, i, v.assistant) {
			n++
		}
	}
	return n
}

// taskPrefix is ids up to the end of the first user message: the part of a
// trajectory that every turn shares. Without a user message it is ids up to
// the first assistant turn (or all of ids).
func (v *vocab) taskPrefix(ids []int32) []int32 {
	for i := range ids {
		if v.roleAt(ids, i, v.user) {
			if j := slices.Index(ids[i:], v.imEnd); j >= 0 {
				return ids[:i+j+1]
			}
			return ids
		}
		if v.roleAt(ids, i, v.assistant) {
			return ids[:i]
		}
	}
	return ids
}

// partialTurn returns the tokens of the assistant turn that input ends
// inside of (after the last "<|im_start|>assistant\n"), or nil.
func (v *vocab) partialTurn(input []int32) []int32 {
	for i := len(input) - 1; i >= 0; i-- {
		if input[i] == v.imEnd {
			return nil // the last turn is closed
		}
		if input[i] == v.imStart {
			if i+1+len(v.assistNL) <= len(input) && slices.Equal(input[i+1:i+1+len(v.assistNL)], v.assistNL) {
				return input[i+1+len(v.assistNL):]
			}
			return nil
		}
	}
	return nil
}
