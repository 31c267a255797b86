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

// maxNonStarters is the longest run of non-starters norm normalises
// without inserting cgj.
const maxNonStarters = 30

// nfc returns s in Normalization Form C as Unicode defines it and as the
// tokenizers library computes it (its NFC normalizer uses the Rust
// unicode-normalization crate, which inserts nothing). x/text's norm.NFC
// is exact except that it writes cgj into runs of more than 30
// non-starters ("zalgo" text), which would add a token and make Decode
// return text the input never had; such segments are composed here
// instead, from norm's per-rune data.
func nfc(s string) string {
	if norm.NFC.IsNormalString(s) {
		return s
	}
	out := norm.NFC.String(s)
	if strings.Count(out, cgj) == strings.Count(s, cgj) {
		return out
	}
	var b strings.Builder
	b.Grow(len(s))
	flushed := 0 // s[:flushed] is in b
	for start := 0; start < len(s); {
		end, nonStarters := nextSegment(s, start)
		if nonStarters > maxNonStarters && utf8.ValidString(s[start:end]) { // invalid bytes are norm's to keep
			b.WriteString(norm.NFC.String(s[flushed:start]))
			composeSegment(&b, s[start:end])
			flushed = end
		}
		start = end
	}
	b.WriteString(norm.NFC.String(s[flushed:]))
	return b.String()
}

// nextSegment returns the end of the normalization segment that starts at
// s[start] (a rune that cannot combine with what precedes it, or the start
// of s) and how many non-starters its runes decompose into. NFC of s is the
// concatenation of its segments' NFC.
func nextSegment(s string, start int) (end, nonStarters int) {
	end = start
	for end < len(s) {
		p := norm.NFC.PropertiesString(s[end:])
		if end > start && p.BoundaryBefore() {
			break
		}
		n := max(p.Size(), 1)
		nonStarters += countNonStarters(s[end : end+n])
		end += n
	}
	return end, nonStarters
}

// countNonStarters returns how many runes of r's canonical decomposition
// have a non-zero combining class.
func countNonStarters(r string) int {
	d := norm.NFD.PropertiesString(r).Decomposition()
	if d == nil {
		d = []byte(r)
	}
	n := 0
	for i := 0; i < len(d); {
		p := norm.NFD.Properties(d[i:])
		if p.CCC() != 0 {
			n++
		}
		i += max(p.Size(), 1)
	}
	return n
}

type classed struct {
	r   rune
	ccc uint8
}

// composeSegment writes the NFC of seg: the canonical decomposition of each
// rune, the canonical ordering of non-starters (a stable sort by combining
// class), then canonical composition (UAX #15 section 3.11). norm decomposes
// one rune at a time, which never reaches its 30-rune limit, and decides
// whether two runes have a primary composite.
func composeSegment(b *strings.Builder, seg string) {
	var rs []classed
	var buf []byte
	for i := 0; i < len(seg); {
		_, n := utf8.DecodeRuneInString(seg[i:])
		buf = norm.NFD.AppendString(buf[:0], seg[i:i+n])
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
