package tokenize

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
)

// piece is a pre-token. first says it starts the text given to Encode,
// which Metaspace's prepend_scheme "first" asks.
type piece struct {
	s     string
	first bool
}

// preTokenizer cuts pieces into smaller ones, as one of the tokenizers
// library's pre-tokenizers (tokenizers/src/pre_tokenizers) does.
type preTokenizer interface {
	preTokenize(ps []piece) []piece
}

type hfPreTokenizer struct {
	Type           string            `json:"type"`
	Pretokenizers  []json.RawMessage `json:"pretokenizers"`
	Pattern        hfPattern         `json:"pattern"`
	Behavior       string            `json:"behavior"`
	Invert         bool              `json:"invert"`
	AddPrefixSpace *bool             `json:"add_prefix_space"`
	UseRegex       *bool             `json:"use_regex"`
	Replacement    *string           `json:"replacement"`
	PrependScheme  *string           `json:"prepend_scheme"`
	Split          *bool             `json:"split"`
	Individual     bool              `json:"individual_digits"`
}

const supportedPreTokenizers = "Split, Metaspace, ByteLevel, Digits, WhitespaceSplit, Sequence"

// gpt2Pattern is the regex ByteLevel splits on when use_regex is true.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// parsePreTokenizer reads the pre-tokenizer at path; nil means none.
// byteLevel reports that it ends in ByteLevel, which hands the model bytes
// (a ByteLevel elsewhere is refused). last says the component is the last
// one run.
func parsePreTokenizer(raw json.RawMessage, path string, last bool) (p preTokenizer, byteLevel bool, err error) {
	if isNull(raw) {
		return nil, false, nil
	}
	var c hfPreTokenizer
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, false, fmt.Errorf("tokenizer.json: %s: %w", path, err)
	}
	switch c.Type {
	case "Sequence":
		var seq sequencePT
		for i, r := range c.Pretokenizers {
			isLast := last && i == len(c.Pretokenizers)-1
			sub, bl, err := parsePreTokenizer(r, fmt.Sprintf("%s.pretokenizers[%d]", path, i), isLast)
			if err != nil {
				return nil, false, err
			}
			byteLevel = byteLevel || bl
			if sub != nil {
				seq = append(seq, sub)
			}
		}
		if len(seq) == 1 {
			return seq[0], byteLevel, nil
		}
		return seq, byteLevel, nil
	case "Split":
		m, err := parseMatcher(c.Pattern, path)
		if err != nil {
			return nil, false, err
		}
		b, err := parseBehavior(c.Behavior, path)
		if err != nil {
			return nil, false, err
		}
		return splitPT{m: m, behavior: b, invert: c.Invert}, false, nil
	case "ByteLevel":
		if !last {
			return nil, false, fmt.Errorf("tokenizer.json: %s: a ByteLevel pre-tokenizer before another one is not supported: %w", path, ErrUnsupported)
		}
		bl := byteLevelPT{addPrefixSpace: c.AddPrefixSpace == nil || *c.AddPrefixSpace}
		if c.UseRegex == nil || *c.UseRegex {
			m, err := newRegexMatcher(gpt2Pattern)
			if err != nil {
				return nil, false, err
			}
			bl.split = &splitPT{m: m, behavior: isolated}
		}
		return bl, true, nil
	case "Metaspace":
		ms := metaspacePT{repl: "▁", scheme: "always", split: c.Split == nil || *c.Split}
		if c.Replacement != nil {
			ms.repl = *c.Replacement
		}
		if c.PrependScheme != nil {
			ms.scheme = *c.PrependScheme
		} else if c.AddPrefixSpace != nil && !*c.AddPrefixSpace {
			ms.scheme = "never"
		}
		switch ms.scheme {
		case "always", "first", "never":
		default:
			return nil, false, fmt.Errorf("tokenizer.json: %s.prepend_scheme %q is not supported (supported: always, first, never): %w", path, ms.scheme, ErrUnsupported)
		}
		if ms.repl == "" {
			return nil, false, fmt.Errorf("tokenizer.json: %s.replacement is empty", path)
		}
		return ms, false, nil
	case "Digits":
		pat := `\p{N}+`
		if c.Individual {
			pat = `\p{N}`
		}
		m, err := newRegexMatcher(pat)
		if err != nil {
			return nil, false, err
		}
		return splitPT{m: m, behavior: isolated}, false, nil
	case "WhitespaceSplit":
		return whitespaceSplitPT{}, false, nil
	}
	return nil, false, unsupported(path, c.Type, supportedPreTokenizers)
}

// fastSplit returns the hand-written splitter when p is a Split on the
// Qwen2 or Llama 3 pattern followed by a plain ByteLevel, the pre-tokenizer
// of those models, which then needs no pieces allocated.
func fastSplit(p preTokenizer) *splitter {
	seq, ok := p.(sequencePT)
	if !ok || len(seq) != 2 {
		return nil
	}
	sp, ok1 := seq[0].(splitPT)
	bl, ok2 := seq[1].(byteLevelPT)
	if !ok1 || !ok2 || bl.addPrefixSpace || bl.split != nil || sp.behavior != isolated || sp.invert {
		return nil
	}
	hm, ok := sp.m.(handMatcher)
	if !ok {
		return nil
	}
	return &hm.s
}

type sequencePT []preTokenizer

func (s sequencePT) preTokenize(ps []piece) []piece {
	for _, p := range s {
		ps = p.preTokenize(ps)
	}
	return ps
}

// behavior is a Split's SplitDelimiterBehavior.
type behavior int

const (
	isolated behavior = iota + 1
	removed
	mergedWithPrevious
	mergedWithNext
	contiguous
)

func parseBehavior(s, path string) (behavior, error) {
	switch s {
	case "Isolated":
		return isolated, nil
	case "Removed":
		return removed, nil
	case "MergedWithPrevious":
		return mergedWithPrevious, nil
	case "MergedWithNext":
		return mergedWithNext, nil
	case "Contiguous":
		return contiguous, nil
	}
	return 0, fmt.Errorf("tokenizer.json: %s.behavior %q is not supported (supported: Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous): %w", path, s, ErrUnsupported)
}

// matcher finds a Split's pattern in a piece: non-empty, non-overlapping
// spans in order.
type matcher interface {
	matches(s string) [][2]int
}

func parseMatcher(p hfPattern, path string) (matcher, error) {
	switch {
	case p.String != nil:
		return literalMatcher(*p.String), nil
	case p.Regex != nil:
		switch *p.Regex {
		case patternQwen2:
			return handMatcher{splitter{maxDigits: 1}}, nil
		case patternLlama3:
			return handMatcher{splitter{maxDigits: 3}}, nil
		}
		m, err := newRegexMatcher(*p.Regex)
		if err != nil {
			return nil, fmt.Errorf("tokenizer.json: %s.pattern.Regex: %w", path, err)
		}
		return m, nil
	}
	return nil, fmt.Errorf("tokenizer.json: %s.pattern: want String or Regex", path)
}

type literalMatcher string

func (l literalMatcher) matches(s string) [][2]int {
	if l == "" {
		return nil
	}
	var out [][2]int
	for i := 0; ; {
		k := strings.Index(s[i:], string(l))
		if k < 0 {
			return out
		}
		out = append(out, [2]int{i + k, i + k + len(l)})
		i += k + len(l)
	}
}

// handMatcher is a Qwen2 or Llama 3 pattern, whose matches cover the text.
type handMatcher struct{ s splitter }

func (h handMatcher) matches(s string) [][2]int {
	var out [][2]int
	i := 0
	h.s.split(s, func(p string) {
		out = append(out, [2]int{i, i + len(p)})
		i += len(p)
	})
	return out
}

// splitPT is the Split pre-tokenizer (pre_tokenizers/split.rs, and
// NormalizedString::split in tokenizer/normalizer.rs).
type splitPT struct {
	m        matcher
	behavior behavior
	invert   bool
}

type cutSpan struct {
	start, end int
	match      bool
}

func (p splitPT) preTokenize(ps []piece) []piece {
	out := ps[:0:0]
	for _, pc := range ps {
		out = p.splitOne(out, pc)
	}
	return out
}

func (p splitPT) splitOne(out []piece, pc piece) []piece {
	s := pc.s
	// The pattern's matches and the gaps between them cover s.
	var spans []cutSpan
	prev := 0
	for _, m := range p.m.matches(s) {
		if m[0] > prev {
			spans = append(spans, cutSpan{prev, m[0], false})
		}
		spans = append(spans, cutSpan{m[0], m[1], true})
		prev = m[1]
	}
	if prev < len(s) {
		spans = append(spans, cutSpan{prev, len(s), false})
	}
	if p.invert {
		for i := range spans {
			spans[i].match = !spans[i].match
		}
	}
	var cut []cutSpan // match now means "remove"
	switch p.behavior {
	case isolated:
		cut = spans
		for i := range cut {
			cut[i].match = false
		}
	case removed:
		cut = spans
	case contiguous:
		prevMatch := false
		for _, sp := range spans {
			if sp.match == prevMatch && len(cut) > 0 {
				cut[len(cut)-1].end = sp.end
			} else {
				cut = append(cut, cutSpan{sp.start, sp.end, false})
			}
			prevMatch = sp.match
		}
	case mergedWithPrevious:
		prevMatch := false
		for _, sp := range spans {
			if sp.match && !prevMatch && len(cut) > 0 {
				cut[len(cut)-1].end = sp.end
			} else {
				cut = append(cut, cutSpan{sp.start, sp.end, false})
			}
			prevMatch = sp.match
		}
	case mergedWithNext:
		prevMatch := false
		for i := len(spans) - 1; i >= 0; i-- {
			sp := spans[i]
			if sp.match && !prevMatch && len(cut) > 0 {
				cut[len(cut)-1].start = sp.start
			} else {
				cut = append(cut, cutSpan{sp.start, sp.end, false})
			}
			prevMatch = sp.match
		}
		for i, j := 0, len(cut)-1; i < j; i, j = i+1, j-1 {
			cut[i], cut[j] = cut[j], cut[i]
		}
	}
	for _, c := range cut {
		if !c.match && c.end > c.start {
			out = append(out, piece{s: s[c.start:c.end], first: pc.first && c.start == 0})
		}
	}
	return out
}

// byteLevelPT is ByteLevel (pre_tokenizers/byte_level.rs): a space before
// each piece that lacks one when add_prefix_space, then GPT-2's split when
// use_regex. Mapping bytes to characters is the model's (bpeModel.byteLevel).
type byteLevelPT struct {
	addPrefixSpace bool
	split          *splitPT
}

func (b byteLevelPT) preTokenize(ps []piece) []piece {
	if b.addPrefixSpace {
		for i := range ps {
			if !strings.HasPrefix(ps[i].s, " ") {
				ps[i].s = " " + ps[i].s
			}
		}
	}
	if b.split != nil {
		ps = b.split.preTokenize(ps)
	}
	return ps
}

// metaspacePT is Metaspace (pre_tokenizers/metaspace.rs): spaces become
// the replacement, which is prepended to each piece (always), to the
// text's first piece (first) or never, and starts each pre-token (split).
type metaspacePT struct {
	repl   string
	scheme string
	split  bool
}

func (m metaspacePT) preTokenize(ps []piece) []piece {
	out := ps[:0:0]
	for _, pc := range ps {
		s := strings.ReplaceAll(pc.s, " ", m.repl)
		if !strings.HasPrefix(s, m.repl) && (m.scheme == "always" || (m.scheme == "first" && pc.first)) {
			s = m.repl + s
		}
		if !m.split {
			out = append(out, piece{s: s, first: pc.first})
			continue
		}
		out = splitPT{m: literalMatcher(m.repl), behavior: mergedWithNext}.splitOne(out, piece{s: s, first: pc.first})
	}
	return out
}

// whitespaceSplitPT is WhitespaceSplit: white space separates pre-tokens
// and is dropped.
type whitespaceSplitPT struct{}

func (whitespaceSplitPT) preTokenize(ps []piece) []piece {
	out := ps[:0:0]
	for _, pc := range ps {
		for i, f := range strings.FieldsFunc(pc.s, unicode.IsSpace) {
			out = append(out, piece{s: f, first: pc.first && i == 0 && !startsWithSpace(pc.s)})
		}
	}
	return out
}

func startsWithSpace(s string) bool {
	return len(strings.TrimLeftFunc(s, unicode.IsSpace)) != len(s)
}
