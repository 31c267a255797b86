package chattemplate

import (
	"strings"

	"github.com/nikolalohinski/gonja/v2/tokens"
)

// fixLeftStrip undoes gonja's lstrip_blocks where Jinja2's does not apply.
// Jinja2 strips the spaces and tabs before a {% or {# tag only when they
// start a line; gonja also strips them after another tag on the same line
// ("{{ x }} {% if y %}" loses its space). src is the template source and
// toks its tokens as gonja lexed them.
func fixLeftStrip(src string, toks []*tokens.Token) []*tokens.Token {
	norm := tokens.NewLexer(src, jinjaConfig()).Input // positions refer to it
	out := make([]*tokens.Token, 0, len(toks))
	for i, t := range toks {
		if t.Type != tokens.BlockBegin && t.Type != tokens.CommentBegin {
			out = append(out, t)
			continue
		}
		k := i - 1
		data := -1
		if k >= 0 && toks[k].Type == tokens.Data {
			data, k = k, k-1
		}
		if k < 0 {
			out = append(out, t)
			continue
		}
		switch toks[k].Type {
		case tokens.VariableEnd, tokens.BlockEnd, tokens.CommentEnd:
		default:
			out = append(out, t)
			continue
		}
		end := toks[k].Pos + len(toks[k].Val)
		if end < 0 || end > t.Pos || t.Pos > len(norm) {
			out = append(out, t)
			continue
		}
		gap := norm[end:t.Pos]
		if gap == "" || strings.Contains(gap, "\n") {
			out = append(out, t)
			continue
		}
		switch {
		case data >= 0 && toks[data].Val != gap:
			fixed := *toks[data]
			fixed.Val = gap
			out[len(out)-1] = &fixed
		case data < 0:
			out = append(out, &tokens.Token{Type: tokens.Data, Val: gap, Pos: end, Line: t.Line, Col: t.Col})
		}
		out = append(out, t)
	}
	return out
}
