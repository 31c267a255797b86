package tokenize

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func texts(ps []piece) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.s
	}
	return out
}

// The Split behaviours, on the examples of the tokenizers library's docs.
func TestSplitBehaviors(t *testing.T) {
	tests := []struct {
		behavior string
		invert   bool
		want     []string
	}{
		{"Removed", false, []string{"the", "final", "countdown"}},
		{"Isolated", false, []string{"the", "-", "final", "-", "-", "countdown"}},
		{"MergedWithPrevious", false, []string{"the-", "final-", "-", "countdown"}},
		{"MergedWithNext", false, []string{"the", "-final", "-", "-countdown"}},
		{"Contiguous", false, []string{"the", "-", "final", "--", "countdown"}},
		{"Removed", true, []string{"-", "-", "-"}},
		{"MergedWithPrevious", true, []string{"the", "-final", "-", "-countdown"}},
		{"Contiguous", true, []string{"the", "-", "final", "--", "countdown"}},
	}
	for _, tt := range tests {
		for _, pat := range []hfPattern{{String: ptr("-")}, {Regex: ptr(`-`)}} {
			raw, _ := json.Marshal(map[string]any{"type": "Split", "pattern": pat, "behavior": tt.behavior, "invert": tt.invert})
			p, _, err := parsePreTokenizer(raw, "pre_tokenizer", true)
			if err != nil {
				t.Fatal(err)
			}
			if got := texts(p.preTokenize([]piece{{s: "the-final--countdown", first: true}})); !slices.Equal(got, tt.want) {
				t.Errorf("%s invert=%v: %q, want %q", tt.behavior, tt.invert, got, tt.want)
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }

func TestMetaspace(t *testing.T) {
	tests := []struct {
		scheme string
		split  bool
		in     []piece
		want   []string
	}{
		{"always", true, []piece{{"Hey friend!", true}}, []string{"▁Hey", "▁friend!"}},
		{"always", true, []piece{{"  x", true}}, []string{"▁", "▁x"}},
		{"always", false, []piece{{"Hey friend!", true}}, []string{"▁Hey▁friend!"}},
		{"first", true, []piece{{"a b", true}, {"c", false}}, []string{"▁a", "▁b", "c"}},
		{"never", true, []piece{{"a b", true}}, []string{"a", "▁b"}},
	}
	for _, tt := range tests {
		raw, _ := json.Marshal(map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": tt.scheme, "split": tt.split})
		p, _, err := parsePreTokenizer(raw, "pre_tokenizer", true)
		if err != nil {
			t.Fatal(err)
		}
		if got := texts(p.preTokenize(slices.Clone(tt.in))); !slices.Equal(got, tt.want) {
			t.Errorf("%s split=%v %v: %q, want %q", tt.scheme, tt.split, tt.in, got, tt.want)
		}
	}
}

// Oniguruma's \s is Unicode white space, and the one look-ahead is run by
// hand.
func TestRegexMatcher(t *testing.T) {
	m, err := newRegexMatcher(gpt2Pattern)
	if err != nil {
		t.Fatal(err)
	}
	in := "Hello  world\u00a0\u00a0x  "
	var got []string
	for _, x := range m.matches(in) {
		got = append(got, in[x[0]:x[1]])
	}
	if want := []string{"Hello", " ", " world", "\u00a0", "\u00a0", "x", "  "}; !slices.Equal(got, want) {
		t.Errorf("matches = %q, want %q", got, want)
	}
	for _, good := range []string{`(?<w>\w+)`, `[\u4e00-\u9fa5]+`, `(?i:'s|'t)`, `[\s\d]`} {
		if _, err := newRegexMatcher(good); err != nil {
			t.Errorf("newRegexMatcher(%q): %v", good, err)
		}
	}
	for _, bad := range []string{`(?=x)`, `(?!x)y`, `(?<=x)y`, `(?<!x)y`, `^a`, `a$`, `\bq`, `(a)\1`, `(?>a)`, `[\S]`, `a++`, `\u12`} {
		if _, err := newRegexMatcher(bad); !errors.Is(err, ErrUnsupported) {
			t.Errorf("newRegexMatcher(%q) = %v, want ErrUnsupported", bad, err)
		}
	}
}

func TestDecoders(t *testing.T) {
	tests := []struct {
		name string
		dec  any
		toks []string
		want string
	}{
		{"metaspace", map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"},
			[]string{"▁Hey", "▁friend", "!"}, "Hey friend!"},
		{"metaspace never", map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never"},
			[]string{"▁Hey", "▁friend"}, " Hey friend"},
		{"byte fallback", map[string]any{"type": "ByteFallback"}, []string{"<0xE2>", "<0x82>", "<0xAC>", "x"}, "€x"},
		{"byte fallback invalid", map[string]any{"type": "ByteFallback"}, []string{"<0xE2>", "<0x82>", "a", "<0xFF>"}, "\uFFFD\uFFFDa\uFFFD"},
		{"strip", map[string]any{"type": "Sequence", "decoders": []any{
			map[string]any{"type": "Fuse"}, map[string]any{"type": "Strip", "content": " ", "start": 1, "stop": 1}}},
			[]string{"  a", "b "}, " ab"},
		{"replace", map[string]any{"type": "Replace", "pattern": map[string]any{"String": "▁"}, "content": " "},
			[]string{"▁a", "▁▁b"}, " a  b"},
		{"byte level", map[string]any{"type": "Sequence", "decoders": []any{map[string]any{"type": "ByteLevel"}}},
			[]string{"Ġhi", "Ã", "©", "<|x|>", "Ã"}, " hié<|x|>\uFFFD"},
		{"byte level lossy", map[string]any{"type": "Sequence", "decoders": []any{map[string]any{"type": "ByteLevel"}}},
			// E2 82 is a broken-off sequence (one U+FFFD), FF FE two bytes that start none.
			[]string{"âĤ", "a", "ÿþ", "ðŁĺ"}, "\uFFFDa\uFFFD\uFFFD\uFFFD"},
		{"none", nil, []string{"a", "b"}, "a b"},
	}
	for _, tt := range tests {
		raw, _ := json.Marshal(tt.dec)
		_, d, err := parseDecoder(raw, "decoder")
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := strings.Join(d(slices.Clone(tt.toks)), ""); got != tt.want {
			t.Errorf("%s: %+q, want %+q", tt.name, got, tt.want)
		}
	}
}

func TestNormalizers(t *testing.T) {
	tests := []struct {
		name string
		n    any
		in   string
		want string
	}{
		{"prepend and replace", map[string]any{"type": "Sequence", "normalizers": []any{
			map[string]any{"type": "Prepend", "prepend": "▁"},
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"}}},
			"a b", "▁a▁b"},
		{"prepend empty", map[string]any{"type": "Prepend", "prepend": "▁"}, "", ""},
		{"replace regex", map[string]any{"type": "Replace", "pattern": map[string]any{"Regex": `\s+`}, "content": " "}, "a\u00a0\t b", "a b"},
		{"nfkc", map[string]any{"type": "NFKC"}, "ﬁ①", "fi1"},
		{"nfkc long run", map[string]any{"type": "NFKC"}, "\u1100\u1161\u11a8" + strings.Repeat("\u0316", 30), "\uac01" + strings.Repeat("\u0316", 30)},
		{"nfd", map[string]any{"type": "NFD"}, "é", "e\u0301"},
		{"lowercase", map[string]any{"type": "Lowercase"}, "AİΣ", "ai\u0307σ"},
		{"strip", map[string]any{"type": "Strip", "left": true, "right": false}, "  a  ", "a  "},
		{"strip accents", map[string]any{"type": "Sequence", "normalizers": []any{map[string]any{"type": "NFD"}, map[string]any{"type": "StripAccents"}}}, "café", "cafe"},
	}
	for _, tt := range tests {
		raw, _ := json.Marshal(tt.n)
		n, err := parseNormalizer(raw, "normalizer")
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := n(tt.in); got != tt.want {
			t.Errorf("%s: %+q, want %+q", tt.name, got, tt.want)
		}
	}
}

// A run of more than 30 combining marks after a Hangul syllable written as
// jamo gains no U+034F, in any normal form.
func TestNormalizeNoCGJ(t *testing.T) {
	for _, base := range []string{"\uac00", "\u1100\u1161", "\u1100\u1161\u11a8", "a"} {
		for _, mark := range []string{"\u0301", "\u0316", "\u05b0"} {
			for n := 28; n < 34; n++ {
				s := base + strings.Repeat(mark, n)
				for _, typ := range []string{"NFC", "NFD", "NFKC", "NFKD"} {
					f, err := parseNormalizer(json.RawMessage(`{"type":"`+typ+`"}`), "normalizer")
					if err != nil {
						t.Fatal(err)
					}
					if got := f(s); strings.Contains(got, cgj) || utf8.RuneCountInString(got) < n {
						t.Errorf("%s(%+q) = %+q", typ, s, got)
					}
				}
			}
		}
	}
}

// SentencePiece-style BPE: byte fallback for what the vocabulary lacks,
// unknown characters fused, continuing_subword_prefix and
// end_of_word_suffix on the symbols.
func TestBPEModelOptions(t *testing.T) {
	vocab := map[string]int32{"<unk>": 0, "<0x41>": 1, "a": 2, "b": 3, "ab": 4, "▁": 5, "▁ab": 6, "<0xC3>": 7, "<0xA9>": 8}
	mk := func(edit func(m map[string]any)) *bpeModel {
		t.Helper()
		m := map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{"a b", "▁ ab"}, "unk_token": "<unk>"}
		if edit != nil {
			edit(m)
		}
		raw, _ := json.Marshal(m)
		var bm bpeModel
		if err := bm.parse(raw, false); err != nil {
			t.Fatal(err)
		}
		return &bm
	}
	tests := []struct {
		name string
		edit func(m map[string]any)
		in   string
		want []int32
	}{
		{"merges", nil, "▁ab", []int32{6}},
		{"unk each", nil, "xyab", []int32{0, 0, 4}},
		{"unk fused", func(m map[string]any) { m["fuse_unk"] = true }, "xyab", []int32{0, 4}},
		{"byte fallback", func(m map[string]any) { m["byte_fallback"] = true }, "Aéa", []int32{1, 7, 8, 2}},
		{"byte fallback partial", func(m map[string]any) { m["byte_fallback"] = true; m["fuse_unk"] = true }, "Azq", []int32{1, 0}},
		{"no unk", func(m map[string]any) { delete(m, "unk_token") }, "xab", []int32{4}},
		{"ignore merges", func(m map[string]any) { m["ignore_merges"] = true; m["merges"] = []string{} }, "▁ab", []int32{6}},
	}
	for _, tt := range tests {
		if got := mk(tt.edit).encode(nil, tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("%s: encode(%q) = %v, want %v", tt.name, tt.in, got, tt.want)
		}
	}
	// With a prefix, "a" "##b" merges into "ab".
	raw, _ := json.Marshal(map[string]any{"type": "BPE", "vocab": map[string]int32{"a": 0, "##b": 1, "ab": 2, "b</w>": 3, "a</w>": 4},
		"merges": []string{"a ##b"}, "continuing_subword_prefix": "##", "end_of_word_suffix": "</w>"})
	var bm bpeModel
	if err := bm.parse(raw, false); err != nil {
		t.Fatal(err)
	}
	if got := bm.encode(nil, "a"); !slices.Equal(got, []int32{4}) {
		t.Errorf("suffix: %v", got)
	}
}

// A normalized added token is found in the normalized text; one that is
// not, in the text as given.
func TestAddedTokensNormalized(t *testing.T) {
	tok, err := ParseHF(tinyJSON(t, func(m map[string]any) {
		m["normalizer"] = map[string]any{"type": "Replace", "pattern": map[string]any{"String": "Q"}, "content": "x"}
		m["added_tokens"] = []any{
			map[string]any{"id": 300, "content": "<s>", "special": true, "normalized": false},
			map[string]any{"id": 301, "content": "xab", "special": false, "normalized": true},
			map[string]any{"id": 302, "content": "Qa", "special": false, "normalized": false, "rstrip": true},
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string][]int32{
		"Qab":   {302, 'b'},
		"Qxab":  {'x', 301},
		"QQab":  {'x', 302, 'b'},
		"Qa  b": {302, 'b'},
	} {
		if got := tok.Encode(in); !slices.Equal(got, want) {
			t.Errorf("Encode(%q) = %v, want %v", in, got, want)
		}
	}
}

// GPT-OSS's (o200k) pattern: case classes, an optional contraction on a
// word, and the white-space look-ahead.
func TestRegexMatcherO200k(t *testing.T) {
	const o200k = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	m, err := newRegexMatcher(o200k)
	if err != nil {
		t.Fatal(err)
	}
	in := "Hello World's 12345  HTTPServer\n\n  x"
	var got []string
	for _, x := range m.matches(in) {
		got = append(got, in[x[0]:x[1]])
	}
	want := []string{"Hello", " World's", " ", "123", "45", " ", " HTTPServer", "\n\n", " ", " x"}
	if !slices.Equal(got, want) {
		t.Errorf("matches = %q, want %q", got, want)
	}
}

// A single_word token is matched only between non-word characters, and
// one passed over hides the shorter tokens it covers.
func TestAddedTokensSingleWord(t *testing.T) {
	tok, err := ParseHF(tinyJSON(t, func(m map[string]any) {
		m["added_tokens"] = []any{
			map[string]any{"id": 300, "content": "xab", "single_word": true},
			map[string]any{"id": 301, "content": "ab", "lstrip": true},
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string][]int32{
		"xab":   {300},
		"q xab": {'q', ' ', 300},
		"qxab":  {'q', 'x', 256}, // "ab" inside the passed-over "xab" is not matched
		"qx ab": {'q', 'x', 301},
	} {
		if got := tok.Encode(in); !slices.Equal(got, want) {
			t.Errorf("Encode(%q) = %v, want %v", in, got, want)
		}
	}
}
