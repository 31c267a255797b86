package chattemplate

import (
	"strings"
	"unicode/utf8"
)

// excerptBytes is how much of each side a PrefixError shows around the
// divergence.
const excerptBytes = 48

// Delta returns the text the rendering of next appends to the rendering of
// prev: Render(next) minus Render(prev). next is prev's conversation with
// messages added (and, typically, the same tools, documents and kwargs).
// If Render(prev) is not a prefix of Render(next) it returns a *PrefixError.
func (t *Template) Delta(prev, next Input) (string, error) {
	return t.Extend(prev, "", next)
}

// Extend returns the text to append to a trajectory after the model's
// completion: Render(next) minus (Render(prev) + completion).
//
// prev is the conversation the model was prompted with (normally with
// AddGenerationPrompt), completion the text it generated, including the
// end-of-turn token it stopped on (<|im_end|>, <|eot_id|>,
// <end_of_turn>...), and next the conversation with the completion as an
// assistant message followed by the new messages (tool results, the next
// user turn), normally with AddGenerationPrompt again. If the trajectory so
// far is not a prefix of Render(next) it returns a *PrefixError.
func (t *Template) Extend(prev Input, completion string, next Input) (string, error) {
	have, err := t.Render(prev)
	if err != nil {
		return "", err
	}
	full, err := t.Render(next)
	if err != nil {
		return "", err
	}
	return Suffix(have+completion, full)
}

// Suffix returns full without its prefix have, or a *PrefixError if have
// is not a prefix of full.
func Suffix(have, full string) (string, error) {
	if strings.HasPrefix(full, have) {
		return full[len(have):], nil
	}
	off := commonPrefix(have, full)
	return "", &PrefixError{Offset: off, Prev: excerpt(have, off), Next: excerpt(full, off)}
}

// commonPrefix returns the length in bytes of the longest common prefix
// of a and b that ends on a character boundary.
func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	for i > 0 && i < len(a) && !utf8.RuneStart(a[i]) {
		i--
	}
	return i
}

// excerpt returns s from a little before off to a little after, cut on
// character boundaries, with "…" where it is cut.
func excerpt(s string, off int) string {
	start := max(0, off-excerptBytes/2)
	for start > 0 && !utf8.RuneStart(s[start]) {
		start--
	}
	end := min(len(s), off+excerptBytes)
	for end < len(s) && !utf8.RuneStart(s[end]) {
		end++
	}
	out := s[start:end]
	if start > 0 {
		out = "…" + out
	}
	if end < len(s) {
		out += "…"
	}
	return out
}
