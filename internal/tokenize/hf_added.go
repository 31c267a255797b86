package tokenize

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedToken is one of tokenizer.json's added_tokens.
type addedToken struct {
	content    string
	id         int32
	lstrip     bool
	rstrip     bool
	singleWord bool
	special    bool
}

// addedSet finds added tokens in text: a byte trie over their contents, so
// a file with thousands of them (Gemma 3 has 6,415, most starting with
// "<") costs one walk per candidate position.
type addedSet struct {
	tokens []addedToken
	first  [256]bool // a token starts with this byte
	nodes  []trieNode
}

type trieNode struct {
	next map[byte]int32
	tok  int32 // index into tokens of the token ending here, -1 for none
}

func newAddedSet(tokens []addedToken) addedSet {
	a := addedSet{tokens: tokens, nodes: []trieNode{{tok: -1}}}
	for i, t := range tokens {
		a.first[t.content[0]] = true
		n := int32(0)
		for k := 0; k < len(t.content); k++ {
			c := t.content[k]
			nx, ok := a.nodes[n].next[c]
			if !ok {
				if a.nodes[n].next == nil {
					a.nodes[n].next = map[byte]int32{}
				}
				nx = int32(len(a.nodes))
				a.nodes[n].next[c] = nx
				a.nodes = append(a.nodes, trieNode{tok: -1})
			}
			n = nx
		}
		if a.nodes[n].tok < 0 { // the first of equal contents wins
			a.nodes[n].tok = int32(i)
		}
	}
	return a
}

// find returns the leftmost added token in s, the longest of those starting
// there, and the span it covers, its stripped white space included. As in
// the library (leftmost-longest matching, then the single_word check), a
// single_word token that touches a word is passed over with the text it
// covers.
func (a *addedSet) find(s string) (start, end int, tok *addedToken) {
	if len(a.tokens) == 0 {
		return 0, 0, nil
	}
	for i := 0; i < len(s); i++ {
		if !a.first[s[i]] {
			continue
		}
		longest := int32(-1)
		for n, k := int32(0), i; k < len(s); k++ {
			nx, ok := a.nodes[n].next[s[k]]
			if !ok {
				break
			}
			n = nx
			if a.nodes[n].tok >= 0 {
				longest = a.nodes[n].tok
			}
		}
		if longest < 0 {
			continue
		}
		c := &a.tokens[longest]
		start, end = i, i+len(c.content)
		if c.singleWord && (wordBefore(s[:start]) || wordAfter(s[end:])) {
			i = end - 1
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
