package tokenize

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

func qwen(t testing.TB) *HF {
	t.Helper()
	tok, err := Qwen()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// The Qwen tokenizer encodes like the reference implementation.
func TestQwenMatchesReference(t *testing.T) {
	tok := qwen(t)
	data, err := os.ReadFile("testdata/golden/qwen3.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Text string  `json:"text"`
		IDs  []int32 `json:"ids"`
	}
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 400 {
		t.Fatalf("only %d reference cases", len(cases))
	}
	for _, c := range cases {
		got := tok.Encode(c.Text)
		if !slices.Equal(got, c.IDs) && !(len(got) == 0 && len(c.IDs) == 0) {
			t.Errorf("Encode(%q)\n got %v\nwant %v", c.Text, got, c.IDs)
		}
	}
}

func TestQwenSpecialTokens(t *testing.T) {
	tok := qwen(t)
	for content, want := range map[string]int32{"<|endoftext|>": 151643, "<|im_start|>": 151644,
		"<|im_end|>": 151645, "<think>": 151667, "</think>": 151668} {
		id, ok := tok.TokenID(content)
		if !ok || id != want {
			t.Errorf("TokenID(%q) = %d, %v; want %d", content, id, ok, want)
		}
		if got := tok.Encode(content); !slices.Equal(got, []int32{want}) {
			t.Errorf("Encode(%q) = %v", content, got)
		}
	}
	if !tok.IsSpecial(151645) || tok.IsSpecial(151667) || tok.IsSpecial(9707) {
		t.Error("IsSpecial: <|im_end|> is special, <think> and words are not")
	}
	if tok.VocabSize() != 151669 {
		t.Errorf("VocabSize = %d", tok.VocabSize())
	}
}

var roundTrip = []string{
	"", "a", "Hello, world!", "  \t \n\n\r\n  mixed   whitespace \u3000\u00a0 ", "1234567890 3.14e-10",
	"你好，世界", "😀👍🏽🇫🇷", "func f() {\n\treturn nil\n}\n", "<|im_start|>x<|im_end|>\n<|im_", "<think></think>",
	"don't 'LL 'Re 'ſ", "\u0085 next line \ufeff bom", strings.Repeat("ab", 5000), strings.Repeat(" ", 1000) + "x",
	strings.Repeat("\n", 500), "\x00\x01\x7f control", "\u2028\u2029",
}

func TestQwenRoundTrip(t *testing.T) {
	tok := qwen(t)
	for _, s := range roundTrip {
		if got := tok.Decode(tok.Encode(s)); got != s {
			t.Errorf("Decode(Encode(%.40q)) = %.40q", s, got)
		}
	}
	// Text is NFC-normalized first, as the tokenizer.json says.
	if got := tok.Decode(tok.Encode("e\u0301")); got != "é" {
		t.Errorf("NFC: got %q", got)
	}
	if got := tok.Decode([]int32{-1, 1 << 30}); got != "\uFFFD\uFFFD" {
		t.Errorf("unknown ids decode to %q", got)
	}
}

func TestSplit(t *testing.T) {
	tests := []struct {
		name   string
		digits int
		in     string
		want   []string
	}{
		{"words", 1, "Hello world", []string{"Hello", " world"}},
		{"contractions", 1, "don't I'LL 'Ve", []string{"don", "'t", " I", "'LL", " '", "Ve"}},
		{"long s folds", 1, "'ſ", []string{"'ſ"}},
		{"punct and newline", 1, "x.\n\ny", []string{"x", ".\n\n", "y"}},
		{"space before punct", 1, "a (b)", []string{"a", " (", "b", ")"}},
		{"space runs", 1, "a   b", []string{"a", "  ", " b"}},
		{"trailing space", 1, "a  ", []string{"a", "  "}},
		{"newline run", 1, "a \n \n  b", []string{"a", " \n \n", " ", " b"}},
		{"tab before word", 1, "\tx", []string{"\tx"}},
		{"newline before word", 1, "\nx", []string{"\n", "x"}},
		{"digits one by one", 1, "12345", []string{"1", "2", "3", "4", "5"}},
		{"digits by three", 3, "12345", []string{"123", "45"}},
		{"unicode", 1, "你好 世界", []string{"你好", " 世界"}},
		{"invalid utf8", 1, "a\xffb", []string{"a", "\xffb"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			splitter{maxDigits: tt.digits}.split(tt.in, func(p string) { got = append(got, p) })
			if !slices.Equal(got, tt.want) {
				t.Fatalf("split(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// tinyJSON is a complete tokenizer.json small enough to reason about: the
// 256 byte tokens, "ab", "abc", " x" and "xx".
func tinyJSON(t testing.TB, edit func(m map[string]any)) []byte {
	t.Helper()
	vocab := map[string]int{}
	for b := range 256 {
		vocab[string(byteToRune[b])] = b
	}
	vocab["ab"], vocab["abc"], vocab["Ġx"], vocab["xx"], vocab["xxxx"] = 256, 257, 258, 259, 260
	m := map[string]any{
		"added_tokens": []any{map[string]any{"id": 300, "content": "<s>", "special": true}},
		"normalizer":   nil,
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": patternLlama3}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}}},
		"decoder": map[string]any{"type": "ByteLevel"},
		"model": map[string]any{"type": "BPE", "vocab": vocab, "ignore_merges": false,
			"merges": [][2]string{{"a", "b"}, {"ab", "c"}, {"Ġ", "x"}, {"x", "x"}, {"xx", "xx"}}},
	}
	if edit != nil {
		edit(m)
	}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestParseHFTiny(t *testing.T) {
	tok, err := ParseHF(tinyJSON(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		in   string
		want []int32
	}{
		{"abc", []int32{257}},
		{"ab<s>c", []int32{256, 300, 'c'}},
		{" x", []int32{258}},
		{"xxx", []int32{259, 'x'}},
		{"xxxxx", []int32{260, 'x'}},
		{"é", []int32{0xc3, 0xa9}},
	}
	for _, tt := range tests {
		if got := tok.Encode(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("Encode(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
	// ignore_merges takes a pre-token that is a vocabulary entry whole.
	tok, err = ParseHF(tinyJSON(t, func(m map[string]any) {
		model := m["model"].(map[string]any)
		model["ignore_merges"] = true
		model["merges"] = []string{"a b", "ab c", "Ġ x", "x x", "xx xx"} // the older way to write merges
		model["vocab"].(map[string]int)["xxx"] = 261
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode("xxx"); !slices.Equal(got, []int32{261}) {
		t.Errorf("ignore_merges: Encode(xxx) = %v", got)
	}
}

func TestParseHFRejects(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(m map[string]any)
		wantErr error
	}{
		{"look-behind pattern", func(m map[string]any) {
			m["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["pattern"] = map[string]any{"Regex": `(?<=a)b`}
		}, ErrUnsupported},
		{"word boundary", func(m map[string]any) {
			m["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["pattern"] = map[string]any{"Regex": `\bx`}
		}, ErrUnsupported},
		{"split behavior", func(m map[string]any) {
			m["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["behavior"] = "Sideways"
		}, ErrUnsupported},
		{"byte level first", func(m map[string]any) {
			pts := m["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)
			pts[0], pts[1] = pts[1], pts[0]
		}, ErrUnsupported},
		{"bert pre-tokenizer", func(m map[string]any) { m["pre_tokenizer"] = map[string]any{"type": "BertPreTokenizer"} }, ErrUnsupported},
		{"metaspace scheme", func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "sometimes"}
		}, ErrUnsupported},
		{"precompiled", func(m map[string]any) {
			m["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{map[string]any{"type": "Precompiled"}}}
		}, ErrUnsupported},
		{"unigram", func(m map[string]any) { m["model"].(map[string]any)["type"] = "Unigram" }, ErrUnsupported},
		{"wordpiece", func(m map[string]any) { m["model"].(map[string]any)["type"] = "WordPiece" }, ErrUnsupported},
		{"dropout", func(m map[string]any) { m["model"].(map[string]any)["dropout"] = 0.1 }, ErrUnsupported},
		{"decoder", func(m map[string]any) { m["decoder"] = map[string]any{"type": "WordPiece"} }, ErrUnsupported},
		{"unk outside vocab", func(m map[string]any) { m["model"].(map[string]any)["unk_token"] = "<nope>" }, nil},
		{"missing merge token", func(m map[string]any) { delete(m["model"].(map[string]any)["vocab"].(map[string]int), "a") }, nil},
		{"merge outside vocab", func(m map[string]any) { m["model"].(map[string]any)["merges"] = []string{"q z"} }, nil},
		{"merge of one token", func(m map[string]any) { m["model"].(map[string]any)["merges"] = []string{"ab"} }, nil},
		{"mixed merges", func(m map[string]any) { m["model"].(map[string]any)["merges"] = []any{"a b", []string{"ab", "c"}} }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseHF(tinyJSON(t, tt.edit))
			if err == nil || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
		})
	}
	if _, err := ParseHF([]byte("{")); err == nil {
		t.Fatal("ParseHF accepted broken JSON")
	}
	// The error names the type and where it sits.
	_, err := ParseHF(tinyJSON(t, func(m map[string]any) { m["model"].(map[string]any)["type"] = "Unigram" }))
	if want := `tokenizer.json: model.type "Unigram" is not supported (supported: BPE)`; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("err = %v, want %s…", err, want)
	}
	_, err = ParseHF(tinyJSON(t, func(m map[string]any) {
		m["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{map[string]any{"type": "NFC"}, map[string]any{"type": "Precompiled"}}}
	}))
	if want := `tokenizer.json: normalizer.normalizers[1].type "Precompiled" is not supported`; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("err = %v, want %s…", err, want)
	}
	if _, err := LoadHF("testdata/none.json"); err == nil {
		t.Fatal("LoadHF of a missing file succeeded")
	}
}

func TestLoadHFGzip(t *testing.T) {
	tok, err := LoadHF("models/qwen3/tokenizer.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode("Hello world"); !slices.Equal(got, []int32{9707, 1879}) {
		t.Fatalf("Encode = %v", got)
	}
}

// FuzzQwenEncode checks that the split covers its input and that valid
// text decodes to its NFC (each piece between added tokens normalized on
// its own, as the tokenizers library does), with no U+034F added however
// long its runs of combining marks.
func FuzzQwenEncode(f *testing.F) {
	for _, s := range roundTrip {
		f.Add(s)
	}
	for _, c := range nfcCases(f) {
		f.Add(c.Text)
	}
	tok := qwen(f)
	f.Fuzz(func(t *testing.T, s string) {
		var pieces []string
		splitter{maxDigits: 1}.split(s, func(p string) { pieces = append(pieces, p) })
		if strings.Join(pieces, "") != s || slices.Contains(pieces, "") {
			t.Fatalf("split(%q) = %q", s, pieces)
		}
		ids := tok.Encode(s)
		if !utf8.ValidString(s) {
			return
		}
		want := tok.Decode(encodeByPieces(tok, s, nfc))
		if got := tok.Decode(ids); got != want {
			t.Fatalf("Decode(Encode(%+q)) = %+q, want %+q", s, got, want)
		}
		if norm.NFC.IsNormalString(s) && want != s {
			t.Fatalf("normal text %+q changed to %+q", s, want)
		}
		n := nfc(s)
		if strings.Count(n, cgj) != strings.Count(s, cgj) || nfc(n) != n {
			t.Fatalf("nfc(%+q) = %+q: U+034F added or removed, or not idempotent", s, n)
		}
		if x := norm.NFC.String(s); strings.Count(x, cgj) == strings.Count(s, cgj) && x != n {
			t.Fatalf("nfc(%+q) = %+q, x/text says %+q", s, n, x)
		}
	})
}

func BenchmarkQwenEncode(b *testing.B) {
	tok := qwen(b)
	text := strings.Repeat("THOUGHT: Let me inspect the failing test first.\n\n```bash\nsed -n '1,40p' pkg/x/x_test.go\n```\n", 20)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tok.Encode(text)
	}
}

func BenchmarkQwenEncodeUncached(b *testing.B) {
	tok := qwen(b)
	text := strings.Repeat("abcdefghij", 400) // one 4,000-byte pre-token: past the cache
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tok.Encode(text)
	}
}

func BenchmarkParseQwen(b *testing.B) {
	zr, _ := gzip.NewReader(bytes.NewReader(qwen3JSON))
	data, _ := io.ReadAll(zr)
	for b.Loop() {
		if _, err := ParseHF(data); err != nil {
			b.Fatal(err)
		}
	}
}
