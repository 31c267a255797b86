package tokenize

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// byteToRune is GPT-2's bytes_to_unicode: printable bytes stand for
// themselves, the others for U+0100 upwards, so every byte sequence is a
// string of visible characters (tokenizers/src/pre_tokenizers/byte_level.rs).
var byteToRune, runeToByte = byteLevelTables()

func byteLevelTables() (b2r [256]rune, r2b map[rune]byte) {
	r2b = make(map[rune]byte, 256)
	n := 0
	for b := range 256 {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			b2r[b] = rune(b)
		} else {
			b2r[b] = rune(256 + n)
			n++
		}
		r2b[b2r[b]] = byte(b)
	}
	return b2r, r2b
}

// toByteLevel maps the bytes of s to their byte-level characters.
func toByteLevel(s string) string {
	var b strings.Builder
	b.Grow(2 * len(s))
	for i := 0; i < len(s); i++ {
		b.WriteRune(byteToRune[s[i]])
	}
	return b.String()
}

// fromByteLevel maps a vocabulary entry back to its bytes; a character
// outside the byte-level alphabet is kept as its UTF-8.
func fromByteLevel(tok string) []byte {
	out := make([]byte, 0, len(tok))
	for _, r := range tok {
		if b, ok := runeToByte[r]; ok {
			out = append(out, b)
		} else {
			out = utf8.AppendRune(out, r)
		}
	}
	return out
}

// bpeModel is the tokenizers library's BPE model (models/bpe/model.rs).
type bpeModel struct {
	vocab        map[string]int32
	merges       map[uint64]merge
	byteIDs      [256]int32 // byte-level models: byte → id of its character
	byteLevel    bool       // the pre-tokens are bytes, seen through byteToRune
	fastBytes    bool       // byteLevel, every byte's character in vocab, no prefix or suffix
	ignoreMerges bool
	byteFallback bool
	fuseUnk      bool
	unk          int32 // -1 for none
	prefix       string
	suffix       string
	byteTokens   [256]int32 // byte fallback: byte → id of "<0xNN>", -1 if absent
}

type merge struct {
	rank int32
	id   int32
}

type hfModel struct {
	Type                    *string          `json:"type"`
	Dropout                 *float64         `json:"dropout"`
	UnkToken                *string          `json:"unk_token"`
	ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
	FuseUnk                 bool             `json:"fuse_unk"`
	ByteFallback            bool             `json:"byte_fallback"`
	IgnoreMerges            bool             `json:"ignore_merges"`
	Vocab                   map[string]int32 `json:"vocab"`
	Merges                  json.RawMessage  `json:"merges"`
}

// parse reads tokenizer.json's model. byteLevel says the pre-tokenizer
// ends in ByteLevel.
func (m *bpeModel) parse(raw json.RawMessage, byteLevel bool) error {
	if isNull(raw) {
		return errors.New("tokenizer.json: model is missing")
	}
	var f hfModel
	if err := json.Unmarshal(raw, &f); err != nil {
		return fmt.Errorf("tokenizer.json: model: %w", err)
	}
	// The library takes a model without a type for BPE when it has merges.
	if f.Type != nil && *f.Type != "BPE" {
		return unsupported("model", *f.Type, "BPE")
	}
	if f.Dropout != nil && *f.Dropout != 0 {
		return fmt.Errorf("tokenizer.json: model.dropout %v is not supported (supported: null): %w", *f.Dropout, ErrUnsupported)
	}
	if len(f.Vocab) == 0 {
		return errors.New("tokenizer.json: model.vocab is empty")
	}
	for tok, id := range f.Vocab {
		if id < 0 || id >= maxID {
			return fmt.Errorf("tokenizer.json: model.vocab[%q]: id %d out of range [0, %d)", tok, id, maxID)
		}
	}
	m.vocab = f.Vocab
	m.byteLevel = byteLevel
	m.ignoreMerges = f.IgnoreMerges
	m.byteFallback = f.ByteFallback
	m.fuseUnk = f.FuseUnk
	if f.ContinuingSubwordPrefix != nil {
		m.prefix = *f.ContinuingSubwordPrefix
	}
	if f.EndOfWordSuffix != nil {
		m.suffix = *f.EndOfWordSuffix
	}
	m.unk = -1
	if f.UnkToken != nil {
		id, ok := m.vocab[*f.UnkToken]
		if !ok {
			return fmt.Errorf("tokenizer.json: model.unk_token %q is not in model.vocab", *f.UnkToken)
		}
		m.unk = id
	}
	m.fastBytes = byteLevel && m.prefix == "" && m.suffix == ""
	for b := range 256 {
		m.byteIDs[b] = -1
		if id, ok := m.vocab[string(byteToRune[b])]; ok {
			m.byteIDs[b] = id
		} else {
			m.fastBytes = false
		}
		m.byteTokens[b] = -1
		if id, ok := m.vocab[fmt.Sprintf("<0x%02X>", b)]; ok {
			m.byteTokens[b] = id
		}
	}
	merges, err := parseMerges(f.Merges)
	if err != nil {
		return err
	}
	m.merges = make(map[uint64]merge, len(merges))
	for rank, mg := range merges {
		a, b := mg[0], mg[1]
		ia, oka := m.vocab[a]
		ib, okb := m.vocab[b]
		if !oka || !okb || len(b) < len(m.prefix) {
			return fmt.Errorf("tokenizer.json: model.merges[%d] (%q %q): token not in vocab", rank, a, b)
		}
		id, okm := m.vocab[a+b[len(m.prefix):]]
		if !okm {
			return fmt.Errorf("tokenizer.json: model.merges[%d] (%q %q): merged token not in vocab", rank, a, b)
		}
		key := pairKey(ia, ib)
		if _, dup := m.merges[key]; !dup { // the first (lowest) rank wins
			m.merges[key] = merge{rank: int32(rank), id: id}
		}
	}
	return nil
}

// parseMerges reads model.merges, written as ["a b", …] (older files) or
// as [["a", "b"], …].
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var pairs [][2]string
	if err := json.Unmarshal(raw, &pairs); err == nil {
		return pairs, nil
	}
	var strs []string
	if err := json.Unmarshal(raw, &strs); err != nil {
		return nil, errors.New("tokenizer.json: model.merges: want a list of \"a b\" strings or of [a, b] pairs")
	}
	pairs = make([][2]string, len(strs))
	for i, s := range strs {
		a, b, ok := strings.Cut(s, " ")
		if !ok {
			return nil, fmt.Errorf("tokenizer.json: model.merges[%d]: %q is not two tokens", i, s)
		}
		pairs[i] = [2]string{a, b}
	}
	return pairs, nil
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// encode appends the ids of pre-token w.
func (m *bpeModel) encode(ids []int32, w string) []int32 {
	if m.fastBytes && len(w) == 1 {
		return append(ids, m.byteIDs[w[0]])
	}
	word := w // w as the vocabulary writes it
	if m.byteLevel && (m.ignoreMerges || !m.fastBytes) {
		word = toByteLevel(w)
	}
	if m.ignoreMerges {
		if id, ok := m.vocab[word]; ok {
			return append(ids, id)
		}
	}
	var sym []int32
	if m.fastBytes {
		sym = make([]int32, len(w))
		for i := range len(w) {
			sym[i] = m.byteIDs[w[i]]
		}
	} else {
		sym = m.symbols(word)
	}
	if len(sym) == 0 {
		return ids
	}
	return m.merge(ids, sym)
}

// symbols returns the initial symbols of word, one per character, as
// merge_word in models/bpe/model.rs builds them: a character outside the
// vocabulary becomes its "<0xNN>" byte tokens under byte_fallback, else
// the unknown token (runs of them fused into one under fuse_unk), else
// nothing.
func (m *bpeModel) symbols(word string) []int32 {
	sym := make([]int32, 0, len(word))
	unk, pending := int32(0), false
	for i := 0; i < len(word); {
		_, n := utf8.DecodeRuneInString(word[i:])
		s := word[i : i+n]
		if m.prefix != "" && i > 0 {
			s = m.prefix + s
		}
		if m.suffix != "" && i+n == len(word) {
			s += m.suffix
		}
		i += n
		if id, ok := m.vocab[s]; ok {
			if pending {
				sym = append(sym, unk)
				pending = false
			}
			sym = append(sym, id)
			continue
		}
		if m.byteFallback && m.allBytes(s) {
			for k := 0; k < len(s); k++ {
				sym = append(sym, m.byteTokens[s[k]])
			}
			continue
		}
		if m.unk < 0 {
			continue
		}
		if pending && !m.fuseUnk {
			sym = append(sym, unk)
		}
		unk, pending = m.unk, true
	}
	if pending {
		sym = append(sym, unk)
	}
	return sym
}

func (m *bpeModel) allBytes(s string) bool {
	for k := 0; k < len(s); k++ {
		if m.byteTokens[s[k]] < 0 {
			return false
		}
	}
	return true
}

// merge appends sym merged by rank: the pair of lowest rank first, the
// leftmost among equals, as tokenizers/src/models/bpe/word.rs (merge_all)
// does with its priority queue.
func (m *bpeModel) merge(ids []int32, sym []int32) []int32 {
	n := len(sym)
	prev := make([]int32, n)
	next := make([]int32, n)
	for i := range n {
		prev[i] = int32(i - 1)
		next[i] = int32(i + 1)
	}
	next[n-1] = -1
	var q mergeQueue
	for i := 0; i+1 < n; i++ {
		if mg, ok := m.merges[pairKey(sym[i], sym[i+1])]; ok {
			q.push(queued{rank: mg.rank, pos: int32(i), id: mg.id})
		}
	}
	for len(q) > 0 {
		top := q.pop()
		r := next[top.pos]
		if sym[top.pos] < 0 || r < 0 {
			continue // merged away, or nothing to its right any more
		}
		if mg, ok := m.merges[pairKey(sym[top.pos], sym[r])]; !ok || mg.id != top.id {
			continue // the pair changed since it was queued
		}
		sym[top.pos] = top.id
		sym[r] = -1
		next[top.pos] = next[r]
		if nr := next[r]; nr >= 0 {
			prev[nr] = top.pos
		}
		if p := prev[top.pos]; p >= 0 {
			if mg, ok := m.merges[pairKey(sym[p], sym[top.pos])]; ok {
				q.push(queued{rank: mg.rank, pos: p, id: mg.id})
			}
		}
		if nr := next[top.pos]; nr >= 0 {
			if mg, ok := m.merges[pairKey(sym[top.pos], sym[nr])]; ok {
				q.push(queued{rank: mg.rank, pos: top.pos, id: mg.id})
			}
		}
	}
	for i := int32(0); i >= 0; i = next[i] {
		ids = append(ids, sym[i])
	}
	return ids
}

type queued struct {
	rank, pos, id int32
}

func (a queued) less(b queued) bool { return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos) }

// mergeQueue is a binary min-heap of candidate merges.
type mergeQueue []queued

func (q *mergeQueue) push(x queued) {
	*q = append(*q, x)
	h := *q
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h[i].less(h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *mergeQueue) pop() queued {
	h := *q
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h) && h[l].less(h[m]) {
			m = l
		}
		if r < len(h) && h[r].less(h[m]) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*q = h
	return top
}
