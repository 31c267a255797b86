package tokenize

import (
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// FuzzParseHF feeds ParseHF malformed files and odd combinations of
// components: each loads or returns an error, and a loaded one encodes and
// decodes without panicking.
func FuzzParseHF(f *testing.F) {
	f.Add(tinyJSON(f, nil))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{},"merges":[]}}`))
	f.Add([]byte(`{"model":{"type":"Unigram","vocab":[["a",0]]}}`))
	f.Add([]byte(`{"model":{"vocab":{"a":0,"b":1,"ab":2,"<unk>":3},"merges":["a b"],"unk_token":"<unk>","fuse_unk":true}}`))
	for _, edit := range []func(m map[string]any){
		func(m map[string]any) {
			m["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{
				map[string]any{"type": "Prepend", "prepend": "▁"},
				map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"}}}
			m["pre_tokenizer"] = nil
			m["model"].(map[string]any)["byte_fallback"] = true
			m["decoder"] = map[string]any{"type": "Sequence", "decoders": []any{
				map[string]any{"type": "Replace", "pattern": map[string]any{"String": "▁"}, "content": " "},
				map[string]any{"type": "ByteFallback"}, map[string]any{"type": "Fuse"},
				map[string]any{"type": "Strip", "content": " ", "start": 1, "stop": 0}}}
		},
		func(m map[string]any) {
			m["normalizer"] = map[string]any{"type": "NFKC"}
			m["pre_tokenizer"] = map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true}
			m["decoder"] = map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first"}
		},
		func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
				map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `\s+(?!\S)|\s+|[a-z]+`}, "behavior": "MergedWithNext", "invert": true},
				map[string]any{"type": "Digits", "individual_digits": true},
				map[string]any{"type": "ByteLevel", "add_prefix_space": true, "use_regex": true}}}
		},
		func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Split", "pattern": map[string]any{"String": "x"}, "behavior": "Contiguous"}
			m["decoder"] = nil
			m["model"].(map[string]any)["continuing_subword_prefix"] = ""
			m["model"].(map[string]any)["end_of_word_suffix"] = "c"
		},
	} {
		f.Add(tinyJSON(f, edit))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := ParseHF(data)
		if err != nil {
			return
		}
		for _, s := range []string{"ab<s> xx é", "  \t\n", "▁a▁▁b", "12345 x\u0301\u0301", "\xff\xfe"} {
			_ = tok.Decode(tok.Encode(s))
		}
		_ = tok.Decode([]int32{-1, 0, 1, 1 << 30})
	})
}

var llama2Once = sync.OnceValues(func() (*HF, error) {
	return LoadHF("testdata/hfref/models/llama2.tokenizer.json.gz")
})

func llama2(t testing.TB) *HF {
	t.Helper()
	tok, err := llama2Once()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// FuzzByteFallbackRoundTrip checks that the byte-fallback model (Mistral's
// 32k SentencePiece BPE) gives back any valid text from its ids, "▁" read
// as a space, as long as the text has none of its three special tokens.
func FuzzByteFallbackRoundTrip(f *testing.F) {
	for _, s := range roundTrip {
		f.Add(s)
	}
	for _, c := range hfRefCases(f, "llama2") {
		f.Add(c.Text)
	}
	tok := llama2(f)
	f.Fuzz(func(t *testing.T, s string) {
		ids := tok.Encode(s)
		if !utf8.ValidString(s) || strings.Contains(s, "<s>") || strings.Contains(s, "</s>") || strings.Contains(s, "<unk>") {
			return
		}
		for _, id := range ids {
			if id == 0 {
				t.Fatalf("Encode(%+q) = %v: an unknown token, though every byte has one", s, ids)
			}
		}
		if got, want := tok.Decode(ids), strings.ReplaceAll(s, "▁", " "); got != want {
			t.Fatalf("Decode(Encode(%+q)) = %+q, want %+q", s, got, want)
		}
	})
}

var deepseekOnce = sync.OnceValues(func() (*HF, error) {
	return LoadHF("testdata/hfref/models/deepseek_v3.tokenizer.json.gz")
})

// FuzzDeepSeekEncode runs the regex pre-tokenizers on any text: valid text
// decodes back to itself (DeepSeek V3 has no normalizer).
func FuzzDeepSeekEncode(f *testing.F) {
	for _, s := range roundTrip {
		f.Add(s)
	}
	tok, err := deepseekOnce()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ids := tok.Encode(s)
		if !utf8.ValidString(s) || strings.Contains(s, "<｜") {
			return
		}
		if got := tok.Decode(ids); got != s {
			t.Fatalf("Decode(Encode(%+q)) = %+q", s, got)
		}
	})
}

func benchmarkEncode(b *testing.B, tok *HF) {
	var sb strings.Builder
	for i := range 400 {
		sb.WriteString("func (s *Server) Handle(ctx context.Context) error {\n\treturn nil\n}\n")
		sb.WriteString("The observation was 1234567 bytes long; 日本語と中文 👍🏽 word")
		sb.WriteString(strings.Repeat(" ", i%5))
	}
	s := sb.String()
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		tok.cache = map[string][]int32{}
		_ = tok.Encode(s)
	}
}

func BenchmarkByteFallbackEncode(b *testing.B) { benchmarkEncode(b, llama2(b)) }

func BenchmarkDeepSeekEncode(b *testing.B) {
	tok, err := deepseekOnce()
	if err != nil {
		b.Fatal(err)
	}
	benchmarkEncode(b, tok)
}
