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
	"unicode"
	"unicode/utf8"
)

// HF is a byte-level BPE tokenizer read from a Hugging Face tokenizer.json,
// the kind Qwen2/Qwen2.5/Qwen3 and Llama 3 ship. Encode follows the
// tokenizers library (huggingface/tokenizers, tokenizers/src/tokenizer/
// added_vocabulary.rs, normalizers, pre_tokenizers/split.rs and byte_level.rs,
// models/bpe/word.rs): added tokens are cut out first (leftmost, longest),
// the rest is normalized (NFC exactly as the library's, see nfc), split
// into pre-tokens, mapped byte to unicode and merged by rank. It adds no
// special tokens of its own (as encode(add_special_tokens=False)); a
// ChatTemplate writes them.
//
// Added tokens are matched on the text as given, before normalization; the
// library matches those marked "normalized": true on the normalized text,
// which differs only for added tokens whose content NFC changes (none in
// the Qwen and Llama 3 files).
//
// An HF is safe for concurrent use.
type HF struct {
	vocab        map[string]int32
	pieces       [][]byte // id → the bytes it decodes to
	special      []bool   // id → a special added token
	added        []addedToken
	addedByFirst [256][]int // first byte of content → indices into added, longest first
	merges       map[uint64]merge
	byteIDs      [256]int32
	split        splitter
	nfc          bool
	ignoreMerges bool

	mu    sync.RWMutex
	cache map[string][]int32
}

var _ Tokenizer = (*HF)(nil)

type addedToken struct {
	content       string
	id            int32
	lstrip        bool
	rstrip        bool
	singleWord    bool
	special       bool
	contentLength int
}

type merge struct {
	rank int32
	id   int32
}

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
		Special    bool   `json:"special"`
	} `json:"added_tokens"`
	Normalizer   json.RawMessage `json:"normalizer"`
	PreTokenizer json.RawMessage `json:"pre_tokenizer"`
	Decoder      json.RawMessage `json:"decoder"`
	Model        hfModel         `json:"model"`
}

type hfModel struct {
	Type                    string           `json:"type"`
	Dropout                 *float64         `json:"dropout"`
	ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
	ByteFallback            bool             `json:"byte_fallback"`
	IgnoreMerges            bool             `json:"ignore_merges"`
	Vocab                   map[string]int32 `json:"vocab"`
	Merges                  json.RawMessage  `json:"merges"`
}

type hfComponent struct {
	Type          string            `json:"type"`
	Normalizers   []json.RawMessage `json:"normalizers"`
	Pretokenizers []json.RawMessage `json:"pretokenizers"`
	Pattern       struct {
		Regex *string `json:"Regex"`
	} `json:"pattern"`
	Behavior       string `json:"behavior"`
	Invert         bool   `json:"invert"`
	AddPrefixSpace bool   `json:"add_prefix_space"`
	UseRegex       *bool  `json:"use_regex"`
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
	if t.nfc, err = parseNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if t.split, err = parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if err := parseDecoder(f.Decoder); err != nil {
		return nil, err
	}
	if err := t.parseModel(f.Model); err != nil {
		return nil, err
	}
	for _, a := range f.AddedTokens {
		if a.Content == "" || a.ID < 0 {
			return nil, fmt.Errorf("tokenizer.json: added token %d %q: empty content or negative id", a.ID, a.Content)
		}
		t.added = append(t.added, addedToken{content: a.Content, id: a.ID, lstrip: a.LStrip, rstrip: a.RStrip,
			singleWord: a.SingleWord, special: a.Special, contentLength: len(a.Content)})
	}
	t.index()
	return t, nil
}

func unsupported(what string, v any) error {
	return fmt.Errorf("tokenizer.json: %s %v: %w", what, v, ErrUnsupported)
}

func isNull(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }

// parseNormalizer accepts none, NFC, or a Sequence of those.
func parseNormalizer(raw json.RawMessage) (nfc bool, err error) {
	if isNull(raw) {
		return false, nil
	}
	var c hfComponent
	if err := json.Unmarshal(raw, &c); err != nil {
		return false, fmt.Errorf("tokenizer.json: normalizer: %w", err)
	}
	switch c.Type {
	case "NFC":
		return true, nil
	case "Sequence":
		for _, n := range c.Normalizers {
			x, err := parseNormalizer(n)
			if err != nil {
				return false, err
			}
			nfc = nfc || x
		}
		return nfc, nil
	}
	return false, unsupported("normalizer", c.Type)
}

// parsePreTokenizer accepts the Sequence of a Split on the Qwen2 or Llama 3
// pattern and a ByteLevel without its own regex.
func parsePreTokenizer(raw json.RawMessage) (splitter, error) {
	var c hfComponent
	if err := json.Unmarshal(raw, &c); err != nil || c.Type != "Sequence" || len(c.Pretokenizers) != 2 {
		return splitter{}, unsupported("pre_tokenizer", string(raw))
	}
	var sp, bl hfComponent
	if json.Unmarshal(c.Pretokenizers[0], &sp) != nil || json.Unmarshal(c.Pretokenizers[1], &bl) != nil {
		return splitter{}, unsupported("pre_tokenizer", string(raw))
	}
	if bl.Type != "ByteLevel" || bl.AddPrefixSpace || bl.UseRegex == nil || *bl.UseRegex {
		return splitter{}, unsupported("pre_tokenizer ByteLevel", string(c.Pretokenizers[1]))
	}
	if sp.Type != "Split" || sp.Behavior != "Isolated" || sp.Invert || sp.Pattern.Regex == nil {
		return splitter{}, unsupported("pre_tokenizer Split", string(c.Pretokenizers[0]))
	}
	switch *sp.Pattern.Regex {
	case patternQwen2:
		return splitter{maxDigits: 1}, nil
	case patternLlama3:
		return splitter{maxDigits: 3}, nil
	}
	return splitter{}, unsupported("pre_tokenizer pattern", *sp.Pattern.Regex)
}

func parseDecoder(raw json.RawMessage) error {
	var c hfComponent
	if err := json.Unmarshal(raw, &c); err != nil || c.Type != "ByteLevel" {
		return unsupported("decoder", string(raw))
	}
	return nil
}

func (t *HF) parseModel(m hfModel) error {
	if m.Type != "BPE" || m.Dropout != nil || m.ByteFallback ||
		(m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "") ||
		(m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "") {
		return unsupported("model", fmt.Sprintf("type=%s dropout=%v byte_fallback=%v", m.Type, m.Dropout, m.ByteFallback))
	}
	if len(m.Vocab) == 0 {
		return errors.New("tokenizer.json: model.vocab is empty")
	}
	t.ignoreMerges = m.IgnoreMerges
	t.vocab = m.Vocab
	for b := range 256 {
		id, ok := t.vocab[string(byteToRune[b])]
		if !ok {
			return fmt.Errorf("tokenizer.json: model.vocab lacks byte %#x: %w", b, ErrUnsupported)
		}
		t.byteIDs[b] = id
	}
	merges, err := parseMerges(m.Merges)
	if err != nil {
		return err
	}
	t.merges = make(map[uint64]merge, len(merges))
	for rank, mg := range merges {
		a, b := mg[0], mg[1]
		ia, oka := t.vocab[a]
		ib, okb := t.vocab[b]
		id, okm := t.vocab[a+b]
		if !oka || !okb || !okm {
			return fmt.Errorf("tokenizer.json: merge %d (%q %q): token not in vocab", rank, a, b)
		}
		key := pairKey(ia, ib)
		if _, dup := t.merges[key]; !dup { // the first (lowest) rank wins
			t.merges[key] = merge{rank: int32(rank), id: id}
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
			return nil, fmt.Errorf("tokenizer.json: merge %d: %q is not two tokens", i, s)
		}
		pairs[i] = [2]string{a, b}
	}
	return pairs, nil
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// index builds the id tables and the added-token lookup.
func (t *HF) index() {
	n := 0
	for _, id := range t.vocab {
		n = max(n, int(id)+1)
	}
	for _, a := range t.added {
		n = max(n, int(a.id)+1)
	}
	t.pieces = make([][]byte, n)
	t.special = make([]bool, n)
	for tok, id := range t.vocab {
		if id >= 0 {
			t.pieces[id] = fromByteLevel(tok)
		}
	}
	for i, a := range t.added {
		t.pieces[a.id] = []byte(a.content)
		t.special[a.id] = a.special
		t.addedByFirst[a.content[0]] = append(t.addedByFirst[a.content[0]], i)
	}
	for b := range t.addedByFirst {
		slices.SortStableFunc(t.addedByFirst[b], func(i, j int) int {
			return len(t.added[j].content) - len(t.added[i].content)
		})
	}
}

// VocabSize is one more than the largest id.
func (t *HF) VocabSize() int { return len(t.pieces) }

// TokenID returns the id of an added token (e.g. "<|im_end|>") or of a
// vocabulary entry written in its byte-level form.
func (t *HF) TokenID(content string) (int32, bool) {
	for _, a := range t.added {
		if a.content == content {
			return a.id, true
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

// Decode implements Tokenizer. It returns the bytes the ids stand for, so
// decoding a sequence in parts and joining the parts equals decoding it
// whole, even where a part ends inside a UTF-8 sequence. Unknown ids decode
// to U+FFFD.
func (t *HF) Decode(ids []int32) string {
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

// Encode implements Tokenizer.
func (t *HF) Encode(s string) []int32 {
	ids := make([]int32, 0, len(s)/3+1)
	for len(s) > 0 {
		start, end, a := t.findAdded(s)
		if a == nil {
			ids = t.encodeText(ids, s)
			break
		}
		ids = t.encodeText(ids, s[:start])
		ids = append(ids, a.id)
		s = s[end:]
	}
	return ids
}

// findAdded returns the leftmost added token in s (the longest of those
// starting there) and the span it covers, its stripped white space included.
func (t *HF) findAdded(s string) (start, end int, a *addedToken) {
	for i := 0; i < len(s); i++ {
		cands := t.addedByFirst[s[i]]
		for _, k := range cands {
			c := &t.added[k]
			if !strings.HasPrefix(s[i:], c.content) {
				continue
			}
			start, end = i, i+len(c.content)
			if c.singleWord && (wordBefore(s[:start]) || wordAfter(s[end:])) {
				continue
			}
			if c.lstrip {
				start = len(strings.TrimRightFunc(s[:start], unicode.IsSpace))
			}
			if c.rstrip {
				end = len(s) - len(strings.TrimLeftFunc(s[end:], unicode.IsSpace))
			}
			return start, end, c
		}
	}
	return 0, 0, nil
}

func isWordRune(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) }

func wordBefore(s string) bool {
	r, n := utf8.DecodeLastRuneInString(s)
	return n > 0 && isWordRune(r)
}

func wordAfter(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return n > 0 && isWordRune(r)
}

// encodeText appends the ids of s, which holds no added token.
func (t *HF) encodeText(ids []int32, s string) []int32 {
	if t.nfc {
		s = nfc(s)
	}
	return t.encodeNormalized(ids, s)
}

// encodeNormalized appends the ids of s, normalized already: its
// pre-tokens merged by rank.
func (t *HF) encodeNormalized(ids []int32, s string) []int32 {
	if s == "" {
		return ids
	}
	t.split.split(s, func(piece string) {
		ids = t.encodeWord(ids, piece)
	})
	return ids
}

// encodeWord appends the ids of one pre-token, from the cache when it can.
func (t *HF) encodeWord(ids []int32, w string) []int32 {
	if len(w) == 1 {
		return append(ids, t.byteIDs[w[0]])
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
	ids = t.bpe(ids, w)
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
