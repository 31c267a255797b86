package tokenize

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
)

// HF is a BPE tokenizer read from a Hugging Face tokenizer.json: the
// byte-level kind (Qwen2/2.5/3, Llama 3, DeepSeek V3, GPT-OSS) and the
// SentencePiece kind with byte fallback (Llama 2, Mistral, Gemma). Encode
// follows the tokenizers library (huggingface/tokenizers: tokenizers/src/
// tokenizer/added_vocabulary.rs, normalizers, pre_tokenizers, models/bpe):
// added tokens are cut out first (leftmost, longest; those marked
// "normalized" are looked for in the normalized text), the rest is
// normalized (NFC exactly as the library's, see nfc), split into
// pre-tokens and merged by rank. It adds no special tokens of its own (as
// encode(add_special_tokens=False)); a ChatTemplate writes them.
//
// A component the package does not implement (a Unigram or WordPiece
// model, an unknown normalizer, a Split regex with look-around other than
// `\s+(?!\S)`) is refused by ParseHF with ErrUnsupported, naming its type
// and where it sits in the file, rather than encoding differently from the
// library.
//
// An HF is safe for concurrent use.
type HF struct {
	vocab   map[string]int32
	tokens  []string // id → its vocabulary entry or added-token content; "" for none
	pieces  [][]byte // id → the bytes it decodes to, when the decoder is ByteLevel alone
	special []bool   // id → a special added token

	added     addedSet // matched on the text as given
	normAdded addedSet // matched on the normalized text

	normalize normalizer // nil for none
	pre       preTokenizer
	fast      *splitter // the pre-tokenizer when it is a known Split then ByteLevel
	byteLevel bool      // the pre-tokenizer ends in ByteLevel: the model sees bytes
	decode    decoder   // nil when the decoder is ByteLevel alone (pieces)

	model bpeModel

	mu    sync.RWMutex
	cache map[string][]int32
}

var _ Tokenizer = (*HF)(nil)

// maxID bounds the ids a tokenizer.json may use (the largest vocabularies
// have about 2^18 entries), so a corrupt file cannot ask for huge tables.
const maxID = 1 << 24

// maxCached bounds the pre-token cache; it is emptied when full.
const maxCached = 1 << 16

// maxCachedLen is the longest pre-token (in bytes) that is cached.
const maxCachedLen = 128

// The parts of tokenizer.json this package reads.
type hfFile struct {
	AddedTokens []struct {
		ID         int32  `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		LStrip     bool   `json:"lstrip"`
		RStrip     bool   `json:"rstrip"`
		Normalized *bool  `json:"normalized"`
		Special    bool   `json:"special"`
	} `json:"added_tokens"`
	Normalizer   json.RawMessage `json:"normalizer"`
	PreTokenizer json.RawMessage `json:"pre_tokenizer"`
	Decoder      json.RawMessage `json:"decoder"`
	Model        json.RawMessage `json:"model"`
}

// ErrUnsupported reports a tokenizer.json this package cannot run exactly.
var ErrUnsupported = errors.New("unsupported tokenizer")

// LoadHF reads a tokenizer.json file; a name ending in .gz is gunzipped.
func LoadHF(path string) (*HF, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		defer zr.Close()
		r = zr
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	t, err := ParseHF(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// ParseHF builds a tokenizer from the contents of a tokenizer.json. It
// returns an error wrapping ErrUnsupported for a normalizer, pre-tokenizer,
// model or decoder it does not implement, rather than encode differently
// from the tokenizers library.
func ParseHF(data []byte) (*HF, error) {
	var f hfFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	t := &HF{cache: map[string][]int32{}}
	var err error
	if t.normalize, err = parseNormalizer(f.Normalizer, "normalizer"); err != nil {
		return nil, err
	}
	if t.pre, t.byteLevel, err = parsePreTokenizer(f.PreTokenizer, "pre_tokenizer", true); err != nil {
		return nil, err
	}
	t.fast = fastSplit(t.pre)
	plainByteLevel, dec, err := parseDecoder(f.Decoder, "decoder")
	if err != nil {
		return nil, err
	}
	if !plainByteLevel {
		t.decode = dec
	}
	if err := t.model.parse(f.Model, t.byteLevel); err != nil {
		return nil, err
	}
	t.vocab = t.model.vocab
	var added, normAdded []addedToken
	for i, a := range f.AddedTokens {
		if a.Content == "" || a.ID < 0 || a.ID >= maxID {
			return nil, fmt.Errorf("tokenizer.json: added_tokens[%d] (id %d, %q): empty content or negative id", i, a.ID, a.Content)
		}
		at := addedToken{content: a.Content, id: a.ID, lstrip: a.LStrip, rstrip: a.RStrip,
			singleWord: a.SingleWord, special: a.Special}
		// The library's AddedToken::from(content, special) sets normalized
		// to !special when the file leaves it out.
		normalized := !a.Special
		if a.Normalized != nil {
			normalized = *a.Normalized
		}
		if normalized && t.normalize != nil {
			normAdded = append(normAdded, at)
		} else {
			added = append(added, at)
		}
	}
	t.added, t.normAdded = newAddedSet(added), newAddedSet(normAdded)
	t.index(plainByteLevel)
	return t, nil
}

// unsupported reports component type typ at path of tokenizer.json.
func unsupported(path, typ string, supported string) error {
	return fmt.Errorf("tokenizer.json: %s.type %q is not supported (supported: %s): %w", path, typ, supported, ErrUnsupported)
}

func isNull(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null"
}

// index builds the id tables and the added-token lookup.
func (t *HF) index(plainByteLevel bool) {
	n := 0
	for _, id := range t.vocab {
		n = max(n, int(id)+1)
	}
	for _, as := range [][]addedToken{t.added.tokens, t.normAdded.tokens} {
		for _, a := range as {
			n = max(n, int(a.id)+1)
		}
	}
	t.tokens = make([]string, n)
	t.special = make([]bool, n)
	for tok, id := range t.vocab {
		if id >= 0 {
			t.tokens[id] = tok
		}
	}
	for _, as := range [][]addedToken{t.added.tokens, t.normAdded.tokens} {
		for _, a := range as {
			t.tokens[a.id] = a.content
			t.special[a.id] = a.special
		}
	}
	if plainByteLevel {
		t.pieces = make([][]byte, n)
		for id, tok := range t.tokens {
			if tok != "" {
				t.pieces[id] = fromByteLevel(tok)
			}
		}
	}
}

// VocabSize is one more than the largest id.
func (t *HF) VocabSize() int { return len(t.tokens) }

// TokenID returns the id of an added token (e.g. "<|im_end|>") or of a
// vocabulary entry written as the vocabulary writes it (byte-level form,
// or with "▁" for a space).
func (t *HF) TokenID(content string) (int32, bool) {
	for _, as := range [][]addedToken{t.added.tokens, t.normAdded.tokens} {
		for _, a := range as {
			if a.content == content {
				return a.id, true
			}
		}
	}
	id, ok := t.vocab[content]
	return id, ok
}

// IsSpecial reports whether id is a special added token (those a server
// leaves out of its text with skip_special_tokens).
func (t *HF) IsSpecial(id int32) bool {
	return id >= 0 && int(id) < len(t.special) && t.special[id]
}

// Decode implements Tokenizer, returning what the library's decode
// (skip_special_tokens=False) returns, through the file's decoder. Unknown
// ids decode to U+FFFD.
//
// With a ByteLevel decoder alone (Qwen, Llama 3, DeepSeek) Decode returns
// the bytes the ids stand for, so decoding a sequence in parts and joining
// the parts equals decoding it whole, even where a part ends inside a UTF-8
// sequence; the library returns the same text wherever those bytes are
// valid UTF-8. Other decoders work on the whole sequence (a Strip or
// Metaspace decoder drops the first token's leading space), so for those
// parts do not join to the whole.
func (t *HF) Decode(ids []int32) string {
	if t.decode == nil {
		var b strings.Builder
		for _, id := range ids {
			if id >= 0 && int(id) < len(t.pieces) && t.pieces[id] != nil {
				b.Write(t.pieces[id])
			} else {
				b.WriteString("\uFFFD")
			}
		}
		return b.String()
	}
	toks := make([]string, len(ids))
	for i, id := range ids {
		if id >= 0 && int(id) < len(t.tokens) && t.tokens[id] != "" {
			toks[i] = t.tokens[id]
		} else {
			toks[i] = "\uFFFD"
		}
	}
	return strings.Join(t.decode(toks), "")
}

// Encode implements Tokenizer.
func (t *HF) Encode(s string) []int32 {
	ids := make([]int32, 0, len(s)/3+1)
	first := true // the piece starts the text, as Metaspace's prepend_scheme "first" asks
	for len(s) > 0 {
		start, end, a := t.added.find(s)
		if a == nil {
			ids = t.encodeText(ids, s, first)
			break
		}
		ids = t.encodeText(ids, s[:start], first)
		ids = append(ids, a.id)
		s = s[end:]
		first = false
	}
	return ids
}

// findAdded returns the leftmost added token matched on the text as given
// and the span it covers.
func (t *HF) findAdded(s string) (start, end int, a *addedToken) { return t.added.find(s) }

// encodeText appends the ids of s, which holds no added token matched on
// the text as given: it normalizes s, then cuts out the added tokens
// matched on normalized text.
func (t *HF) encodeText(ids []int32, s string, first bool) []int32 {
	if s == "" {
		return ids
	}
	if t.normalize != nil {
		s = t.normalize(s)
	}
	for len(s) > 0 {
		start, end, a := t.normAdded.find(s)
		if a == nil {
			return t.encodePiece(ids, s, first)
		}
		ids = t.encodePiece(ids, s[:start], first)
		ids = append(ids, a.id)
		s = s[end:]
		first = false
	}
	return ids
}

// encodeNormalized appends the ids of s, normalized already.
func (t *HF) encodeNormalized(ids []int32, s string) []int32 {
	return t.encodePiece(ids, s, true)
}

// encodePiece appends the ids of normalized s: its pre-tokens merged by
// rank.
func (t *HF) encodePiece(ids []int32, s string, first bool) []int32 {
	if s == "" {
		return ids
	}
	if t.fast != nil {
		t.fast.split(s, func(piece string) {
			ids = t.encodeWord(ids, piece)
		})
		return ids
	}
	pieces := []piece{{s: s, first: first}}
	if t.pre != nil {
		pieces = t.pre.preTokenize(pieces)
	}
	for _, p := range pieces {
		if p.s != "" {
			ids = t.encodeWord(ids, p.s)
		}
	}
	return ids
}

// encodeWord appends the ids of one pre-token, from the cache when it can.
func (t *HF) encodeWord(ids []int32, w string) []int32 {
	if t.model.fastBytes && len(w) == 1 {
		return append(ids, t.model.byteIDs[w[0]])
	}
	if len(w) <= maxCachedLen {
		t.mu.RLock()
		got, ok := t.cache[w]
		t.mu.RUnlock()
		if ok {
			return append(ids, got...)
		}
	}
	start := len(ids)
	ids = t.model.encode(ids, w)
	if len(w) <= maxCachedLen {
		t.mu.Lock()
		if len(t.cache) >= maxCached {
			clear(t.cache)
		}
		t.cache[w] = slices.Clone(ids[start:])
		t.mu.Unlock()
	}
	return ids
}
