package tokenize

import (
	"slices"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// cgj is U+034F COMBINING GRAPHEME JOINER, which x/text's norm inserts
// after every 30 non-starters in a row (the Stream-Safe Text Format, UAX
// #15 section 13).
const cgj = "\u034f"

// nfc returns s in Normalization Form C as Unicode defines it and as the
// tokenizers library computes it (its NFC normalizer uses the Rust
// unicode-normalization crate, which inserts nothing).
func nfc(s string) string { return normalizeForm(s, norm.NFC) }

// normalizeForm returns s in form f as the unicode-normalization crate
// computes it. x/text's norm is exact except that it writes cgj into runs
// of more than 30 non-starters ("zalgo" text; it counts a Hangul syllable
// written as conjoining jamo into the run), which would add a token and
// make Decode return text the input never had; a segment where norm does
// that is normalized here instead, from norm's per-rune data.
func normalizeForm(s string, f norm.Form) string {
	if f.IsNormalString(s) {
		return s
	}
	out := f.String(s)
	if strings.Count(out, cgj) == strings.Count(s, cgj) {
		return out
	}
	var b strings.Builder
	b.Grow(len(s))
	flushed := 0 // s[:flushed] is in b
	for start := 0; start < len(s); {
		end := nextSegment(s, start, f)
		seg := s[start:end]
		if utf8.ValidString(seg) && strings.Count(f.String(seg), cgj) != strings.Count(seg, cgj) { // invalid bytes are norm's to keep
			b.WriteString(f.String(s[flushed:start]))
			normalizeSegment(&b, seg, f)
			flushed = end
		}
		start = end
	}
	b.WriteString(f.String(s[flushed:]))
	return b.String()
}

// nextSegment returns the end of the normalization segment that starts at
// s[start] (a rune that cannot combine with what precedes it, or the start
// of s). The normal form of s is the concatenation of its segments'.
func nextSegment(s string, start int, f norm.Form) (end int) {
	end = start
	for end < len(s) {
		p := f.PropertiesString(s[end:])
		if end > start && p.BoundaryBefore() {
			break
		}
		end += max(p.Size(), 1)
	}
	return end
}

type classed struct {
	r   rune
	ccc uint8
}

// normalizeSegment writes seg in form f: the canonical (NFC, NFD) or
// compatibility (NFKC, NFKD) decomposition of each rune, the canonical
// ordering of non-starters (a stable sort by combining class), then for
// NFC and NFKC canonical composition (UAX #15 section 3.11). norm
// decomposes one rune at a time, which never reaches its 30-rune limit,
// and decides whether two runes have a primary composite.
func normalizeSegment(b *strings.Builder, seg string, f norm.Form) {
	decompose := norm.NFD
	if f == norm.NFKC || f == norm.NFKD {
		decompose = norm.NFKD
	}
	var rs []classed
	var buf []byte
	for i := 0; i < len(seg); {
		_, n := utf8.DecodeRuneInString(seg[i:])
		buf = decompose.AppendString(buf[:0], seg[i:i+n])
		for _, r := range string(buf) {
			rs = append(rs, classed{r, norm.NFD.PropertiesString(string(r)).CCC()})
		}
		i += n
	}
	for i := 0; i < len(rs); {
		if rs[i].ccc == 0 {
			i++
			continue
		}
		j := i
		for j < len(rs) && rs[j].ccc != 0 {
			j++
		}
		slices.SortStableFunc(rs[i:j], func(a, b classed) int { return int(a.ccc) - int(b.ccc) })
		i = j
	}
	if f == norm.NFD || f == norm.NFKD {
		for _, c := range rs {
			b.WriteRune(c.r)
		}
		return
	}
	out := rs[:0]
	starter := -1  // index in out of the last starter, -1 before the first
	var last uint8 // combining class of out's last rune
	for _, c := range rs {
		// c is blocked from the starter by a rune between them of class 0 or
		// of c's class or above; the runes between are in canonical order,
		// so the last one has the highest class.
		if starter >= 0 && (starter == len(out)-1 || (last != 0 && last < c.ccc)) {
			if r, ok := primaryComposite(out[starter].r, c.r); ok {
				out[starter].r = r
				continue
			}
		}
		if c.ccc == 0 {
			starter = len(out)
		}
		last = c.ccc
		out = append(out, c)
	}
	for _, c := range out {
		b.WriteRune(c.r)
	}
}

// primaryComposite returns the rune that starter and c compose to, if any.
// norm.NFC of the pair is that rune alone exactly when it exists: the
// starter's own decomposition is already in canonical order before c, and
// composition exclusions are norm's.
func primaryComposite(starter, c rune) (rune, bool) {
	s := norm.NFC.String(string(starter) + string(c))
	r, n := utf8.DecodeRuneInString(s)
	return r, n == len(s) && n > 0
}
