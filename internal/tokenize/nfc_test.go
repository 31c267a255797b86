package tokenize

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

type nfcCase struct {
	Text string `json:"text"`
	NFC  string `json:"nfc"`
}

// nfcCases reads testdata/golden/nfc.json: texts with long runs of
// combining marks and their NFC by Python's unicodedata (see nfc.py there).
func nfcCases(t testing.TB) []nfcCase {
	t.Helper()
	data, err := os.ReadFile("testdata/golden/nfc.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Cases []nfcCase `json:"cases"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	return f.Cases
}

// Text with more than 30 combining marks in a row normalizes to full NFC,
// as the tokenizers library does, with no U+034F added: the encoding is the
// normalizer-free encoding of the reference NFC, and decodes to it.
func TestNFCLongMarkRuns(t *testing.T) {
	tok := qwen(t)
	cases := nfcCases(t)
	streamSafe := 0 // cases where x/text's NFC alone would insert U+034F
	for _, c := range cases {
		if strings.Count(norm.NFC.String(c.Text), cgj) != strings.Count(c.Text, cgj) {
			streamSafe++
		}
		if got := nfc(c.Text); got != c.NFC {
			t.Errorf("nfc(%+q)\n got %+q\nwant %+q", c.Text, got, c.NFC)
			continue
		}
		ids := tok.Encode(c.Text)
		if want := encodeByPieces(tok, c.NFC, func(s string) string { return s }); !slices.Equal(ids, want) {
			t.Errorf("Encode(%+q) = %v, want %v", c.Text, ids, want)
		}
		if got := tok.Decode(ids); got != c.NFC {
			t.Errorf("Decode(Encode(%+q)) = %+q", c.Text, got)
		}
		if got := nfc(c.NFC); got != c.NFC {
			t.Errorf("nfc is not idempotent on %+q: %+q", c.NFC, got)
		}
	}
	if streamSafe < 20 {
		t.Fatalf("only %d of %d cases have a run that x/text would break", streamSafe, len(cases))
	}
}

// encodeByPieces encodes s as Encode does, with normalize in place of the
// tokenizer's normalizer: added tokens are cut out first and each piece
// between them is normalized on its own.
func encodeByPieces(tok *HF, s string, normalize func(string) string) []int32 {
	var ids []int32
	for len(s) > 0 {
		start, end, a := tok.findAdded(s)
		if a == nil {
			return tok.encodeNormalized(ids, normalize(s))
		}
		ids = tok.encodeNormalized(ids, normalize(s[:start]))
		ids = append(ids, a.id)
		s = s[end:]
	}
	return ids
}

func TestNFCShortRunsAsXText(t *testing.T) {
	for _, s := range []string{"", "abc", "e\u0301", "\u1100\u1161\u11a8", "a" + strings.Repeat("\u0316", 30),
		"\u0344\u0f73 x", "e" + strings.Repeat("\u0301\u0316", 15) + "b"} {
		if got, want := nfc(s), norm.NFC.String(s); got != want {
			t.Errorf("nfc(%+q) = %+q, want %+q", s, got, want)
		}
	}
}

func BenchmarkNFCLongRuns(b *testing.B) {
	var sb strings.Builder
	for i := range 200 {
		sb.WriteString("some ordinary text between runs, ")
		sb.WriteString("e" + strings.Repeat("\u0301\u0316", 16+i%8))
	}
	s := sb.String()
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		if !utf8.ValidString(nfc(s)) {
			b.Fatal("invalid")
		}
	}
}
