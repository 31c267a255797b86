package tokenize

import (
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

// bpe appends the ids of pre-token w, merging byte symbols by rank: the
// pair of lowest rank first, the leftmost among equals, as
// tokenizers/src/models/bpe/word.rs (merge_all) does with its priority queue.
func (t *HF) bpe(ids []int32, w string) []int32 {
	if t.ignoreMerges {
		if id, ok := t.vocab[toByteLevel(w)]; ok {
			return append(ids, id)
		}
	}
	n := len(w)
	sym := make([]int32, n)
	prev := make([]int32, n)
	next := make([]int32, n)
	for i := range n {
		sym[i] = t.byteIDs[w[i]]
		prev[i] = int32(i - 1)
		next[i] = int32(i + 1)
	}
	next[n-1] = -1
	var q mergeQueue
	for i := 0; i+1 < n; i++ {
		if m, ok := t.merges[pairKey(sym[i], sym[i+1])]; ok {
			q.push(queued{rank: m.rank, pos: int32(i), id: m.id})
		}
	}
	for len(q) > 0 {
		top := q.pop()
		r := next[top.pos]
		if sym[top.pos] < 0 || r < 0 {
			continue // merged away, or nothing to its right any more
		}
		if m, ok := t.merges[pairKey(sym[top.pos], sym[r])]; !ok || m.id != top.id {
			continue // the pair changed since it was queued
		}
		sym[top.pos] = top.id
		sym[r] = -1
		next[top.pos] = next[r]
		if nr := next[r]; nr >= 0 {
			prev[nr] = top.pos
		}
		if p := prev[top.pos]; p >= 0 {
			if m, ok := t.merges[pairKey(sym[p], sym[top.pos])]; ok {
				q.push(queued{rank: m.rank, pos: p, id: m.id})
			}
		}
		if nr := next[top.pos]; nr >= 0 {
			if m, ok := t.merges[pairKey(sym[top.pos], sym[nr])]; ok {
				q.push(queued{rank: m.rank, pos: top.pos, id: m.id})
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
