package tokenize

import (
	"strings"
)

// Tokenizer maps text to token ids and back.
type Tokenizer interface {
	// Encode returns the ids of s. Special-token text (e.g. "<|im_end|>") maps to
	// the special token's id, as Hugging Face tokenizers do by default.
	Encode(s string) []int32
	// Decode returns the text of ids; special tokens decode to their text.
	Decode(ids []int32) string
}

// Special tokens of the Bytes tokenizer. Ids 0–255 are the bytes themselves.
const (
	ImStart    int32 = 256 // <|im_start|>
	ImEnd      int32 = 257 // <|im_end|>
	EndOfText  int32 = 258 // <|endoftext|>
	VocabBytes       = 259 // vocabulary size of Bytes
)

var byteSpecials = []string{"<|im_start|>", "<|im_end|>", "<|endoftext|>"}

// Bytes is a byte-level tokenizer: every byte is one token, plus three
// ChatML special tokens. It is lossless for any input, which is what the
// simulator and tests need; it is not a model's tokenizer.
type Bytes struct{}

var _ Tokenizer = Bytes{}

// Encode implements Tokenizer.
func (Bytes) Encode(s string) []int32 {
	ids := make([]int32, 0, len(s))
	for i := 0; i < len(s); {
		if s[i] == '<' {
			if id, n := matchSpecial(s[i:]); n > 0 {
				ids = append(ids, id)
				i += n
				continue
			}
		}
		ids = append(ids, int32(s[i]))
		i++
	}
	return ids
}

func matchSpecial(s string) (int32, int) {
	for k, sp := range byteSpecials {
		if strings.HasPrefix(s, sp) {
			return ImStart + int32(k), len(sp)
		}
	}
	return 0, 0
}

// Decode implements Tokenizer. Ids outside the vocabulary decode to U+FFFD.
func (Bytes) Decode(ids []int32) string {
	var b strings.Builder
	b.Grow(len(ids))
	for _, id := range ids {
		switch {
		case id >= 0 && id < 256:
			b.WriteByte(byte(id))
		case id >= ImStart && id < VocabBytes:
			b.WriteString(byteSpecials[id-ImStart])
		default:
			b.WriteString("\uFFFD")
		}
	}
	return b.String()
}
