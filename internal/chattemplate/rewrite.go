package chattemplate

import (
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// gonja parses Jinja2's conditional expression "A if C else B" only as the
// whole of a {{ }} tag. Chat templates also write it inside parentheses,
// function arguments, lists and {% set %} (Gemma 3:
// `'\n' + (first_user_prefix if loop.first else "")`). rewriteTernaries
// turns every such expression, in the token stream, into
//
//	((C) and [A] or [B])[0]
//
// which gonja parses everywhere. It evaluates as Jinja2 does: `and` and
// `or` short-circuit and return an operand, a one-item list is always true,
// so only the chosen branch is evaluated. "A if C" without else gives
// undefined, as in Jinja2.

// undefinedName is a variable never defined.
const undefinedName = internalPrefix + "undefined"

// rewriteTernaries rewrites the conditional expressions in a template's
// tokens, tag by tag.
func rewriteTernaries(toks []*tokens.Token) []*tokens.Token {
	return rewriteTags(toks, func(block bool, body []*tokens.Token) []*tokens.Token {
		if block && len(body) > 0 && body[0].Type == tokens.Name {
			// The statement keyword stays; in a for statement a top-level
			// "if" filters the loop and is not a conditional expression.
			return append([]*tokens.Token{body[0]}, rewriteRegion(body[1:], body[0].Val != "for")...)
		}
		return rewriteRegion(body, true)
	})
}

// rewriteTags applies fn to the body of every {{ }} and {% %} tag (the
// tokens between its delimiters); block tells which. An unterminated tag
// is left for the parser to report.
func rewriteTags(toks []*tokens.Token, fn func(block bool, body []*tokens.Token) []*tokens.Token) []*tokens.Token {
	out := make([]*tokens.Token, 0, len(toks))
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		var end tokens.Type
		switch t.Type {
		case tokens.VariableBegin:
			end = tokens.VariableEnd
		case tokens.BlockBegin:
			end = tokens.BlockEnd
		default:
			out = append(out, t)
			continue
		}
		j := i + 1
		for j < len(toks) && toks[j].Type != end && toks[j].Type != tokens.EOF && toks[j].Type != tokens.Error {
			j++
		}
		if j >= len(toks) || toks[j].Type != end {
			return append(out, toks[i:]...)
		}
		out = append(out, t)
		out = append(out, fn(t.Type == tokens.BlockBegin, toks[i+1:j])...)
		out = append(out, toks[j])
		i = j
	}
	return out
}

// rewriteRegion rewrites the expressions between two delimiters (a tag's
// or a bracket's). Commas, colons and '=' separate expressions; a bracket
// group is rewritten inside and kept whole.
func rewriteRegion(toks []*tokens.Token, ternaryAtTop bool) []*tokens.Token {
	var out, slot []*tokens.Token
	flush := func() {
		out = append(out, rewriteSlot(slot, ternaryAtTop)...)
		slot = nil
	}
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch t.Type {
		case tokens.LeftParenthesis, tokens.LeftBracket, tokens.LeftBrace:
			j := matchingBracket(toks, i)
			if j < 0 {
				slot = append(slot, toks[i:]...)
				i = len(toks)
				continue
			}
			slot = append(slot, t)
			slot = append(slot, rewriteRegion(toks[i+1:j], true)...)
			slot = append(slot, toks[j])
			i = j
		case tokens.Comma, tokens.Colon, tokens.Assign:
			flush()
			out = append(out, t)
		default:
			slot = append(slot, t)
		}
	}
	flush()
	return out
}

// matchingBracket returns the index of the bracket closing toks[i], or -1.
func matchingBracket(toks []*tokens.Token, i int) int {
	depth := 0
	for j := i; j < len(toks); j++ {
		switch toks[j].Type {
		case tokens.LeftParenthesis, tokens.LeftBracket, tokens.LeftBrace:
			depth++
		case tokens.RightParenthesis, tokens.RightBracket, tokens.RightBrace:
			depth--
			if depth == 0 {
				return j
			}
		}
	}
	return -1
}

// topLevelName returns the index of the first name token val outside
// brackets at or after from, or -1.
func topLevelName(toks []*tokens.Token, from int, val string) int {
	depth := 0
	for j := from; j < len(toks); j++ {
		switch toks[j].Type {
		case tokens.LeftParenthesis, tokens.LeftBracket, tokens.LeftBrace:
			depth++
		case tokens.RightParenthesis, tokens.RightBracket, tokens.RightBrace:
			depth--
		case tokens.Name:
			if depth == 0 && toks[j].Val == val {
				return j
			}
		}
	}
	return -1
}

// rewriteSlot rewrites one expression "A if C else B" (B possibly itself
// conditional); anything else is returned as is.
func rewriteSlot(slot []*tokens.Token, ternary bool) []*tokens.Token {
	if !ternary {
		return slot
	}
	k := topLevelName(slot, 0, "if")
	if k <= 0 || k == len(slot)-1 {
		return slot
	}
	a := slot[:k]
	var c, b []*tokens.Token
	at := slot[k]
	if e := topLevelName(slot, k+1, "else"); e >= 0 {
		c, b = slot[k+1:e], rewriteSlot(slot[e+1:], true)
	} else {
		c, b = slot[k+1:], []*tokens.Token{tok(at, tokens.Name, undefinedName)}
	}
	if len(c) == 0 || len(b) == 0 {
		return slot
	}
	out := []*tokens.Token{
		tok(at, tokens.LeftParenthesis, "("),
		tok(at, tokens.LeftParenthesis, "("),
	}
	out = append(out, c...)
	out = append(out,
		tok(at, tokens.RightParenthesis, ")"),
		tok(at, tokens.And, "and"),
		tok(at, tokens.LeftBracket, "["),
	)
	out = append(out, a...)
	out = append(out,
		tok(at, tokens.RightBracket, "]"),
		tok(at, tokens.Or, "or"),
		tok(at, tokens.LeftBracket, "["),
	)
	out = append(out, b...)
	out = append(out,
		tok(at, tokens.RightBracket, "]"),
		tok(at, tokens.RightParenthesis, ")"),
		tok(at, tokens.LeftBracket, "["),
		tok(at, tokens.Integer, "0"),
		tok(at, tokens.RightBracket, "]"),
	)
	return out
}

// tok makes a synthetic token placed at at, so errors point at the "if".
func tok(at *tokens.Token, typ tokens.Type, val string) *tokens.Token {
	return &tokens.Token{Type: typ, Val: val, Pos: at.Pos, Line: at.Line, Col: at.Col}
}

// inOperandFunc is the function rewriteIn wraps the right operand of `in`
// with: it passes strings, lists, mappings and undefined through and makes
// anything else (None, numbers) the error Jinja2 raises, where gonja
// would answer false.
const inOperandFunc = internalPrefix + "in_operand"

// rewriteIn wraps the right operand of every `in` and `not in` in a call
// to inOperandFunc, tag by tag. The `in` of a for statement is left alone.
func rewriteIn(toks []*tokens.Token) []*tokens.Token {
	return rewriteTags(toks, func(block bool, body []*tokens.Token) []*tokens.Token {
		skip := -1
		if block && len(body) > 0 && body[0].Type == tokens.Name && body[0].Val == "for" {
			skip = topLevelType(body, tokens.In)
		}
		return wrapInOperands(body, skip)
	})
}

// topLevelType returns the index of the first token of type typ outside
// brackets, or -1.
func topLevelType(toks []*tokens.Token, typ tokens.Type) int {
	depth := 0
	for j, t := range toks {
		switch t.Type {
		case tokens.LeftParenthesis, tokens.LeftBracket, tokens.LeftBrace:
			depth++
		case tokens.RightParenthesis, tokens.RightBracket, tokens.RightBrace:
			depth--
		case typ:
			if depth == 0 {
				return j
			}
		}
	}
	return -1
}

func wrapInOperands(toks []*tokens.Token, skip int) []*tokens.Token {
	out := make([]*tokens.Token, 0, len(toks))
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		if t.Type != tokens.In || i == skip {
			out = append(out, t)
			continue
		}
		end := inOperandEnd(toks, i+1)
		if end == i+1 {
			out = append(out, t)
			continue
		}
		out = append(out, t,
			tok(t, tokens.Name, inOperandFunc),
			tok(t, tokens.LeftParenthesis, "("))
		out = append(out, wrapInOperands(toks[i+1:end], -1)...)
		out = append(out, tok(t, tokens.RightParenthesis, ")"))
		i = end - 1
	}
	return out
}

// inOperandEnd returns the end of the operand starting at from: the first
// token outside brackets that binds looser than `in` (a comparison, and,
// or, not, a separator, the conditional's if/else) or closes an enclosing
// bracket.
func inOperandEnd(toks []*tokens.Token, from int) int {
	depth := 0
	for j := from; j < len(toks); j++ {
		t := toks[j]
		switch t.Type {
		case tokens.LeftParenthesis, tokens.LeftBracket, tokens.LeftBrace:
			depth++
		case tokens.RightParenthesis, tokens.RightBracket, tokens.RightBrace:
			if depth == 0 {
				return j
			}
			depth--
		case tokens.And, tokens.Or, tokens.Not, tokens.In, tokens.Equals, tokens.Ne,
			tokens.LowerThan, tokens.LowerThanOrEqual, tokens.GreaterThan, tokens.GreaterThanOrEqual,
			tokens.Comma, tokens.Colon, tokens.Assign:
			if depth == 0 {
				return j
			}
		case tokens.Name:
			if depth == 0 && (t.Val == "if" || t.Val == "else") {
				return j
			}
		}
	}
	return len(toks)
}

// itemFunc is the function rewriteItems turns a subscript into. gonja's
// own subscript misses x[-1] on a one-item list and indexes strings by
// byte; itemFunc follows Python.
const itemFunc = internalPrefix + "item"

// rewriteItems turns every subscript X[i] that is not a slice into
// _chattemplate_item(X, i), tag by tag.
func rewriteItems(toks []*tokens.Token) []*tokens.Token {
	return rewriteTags(toks, func(_ bool, body []*tokens.Token) []*tokens.Token {
		return rewriteSubscripts(body)
	})
}

func rewriteSubscripts(toks []*tokens.Token) []*tokens.Token {
	out := make([]*tokens.Token, 0, len(toks))
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		if t.Type != tokens.LeftBracket {
			out = append(out, t)
			continue
		}
		end := matchingBracket(toks, i)
		if end < 0 {
			return append(out, toks[i:]...)
		}
		inner := rewriteSubscripts(toks[i+1 : end])
		start := postfixStart(out)
		if start < 0 || len(inner) == 0 || topLevelType(inner, tokens.Colon) >= 0 {
			// A list literal, an empty or a slice subscript: keep.
			out = append(out, t)
			out = append(out, inner...)
			out = append(out, toks[end])
			i = end
			continue
		}
		operand := append([]*tokens.Token{}, out[start:]...)
		out = append(out[:start],
			tok(t, tokens.Name, itemFunc),
			tok(t, tokens.LeftParenthesis, "("))
		out = append(out, operand...)
		out = append(out, tok(t, tokens.Comma, ","))
		out = append(out, inner...)
		out = append(out, tok(t, tokens.RightParenthesis, ")"))
		i = end
	}
	return out
}

// postfixStart returns where the operand of a subscript following toks
// begins: a name, literal or bracket group with its chain of attribute
// accesses, calls and subscripts; -1 if toks does not end in one (the
// bracket then opens a list literal).
func postfixStart(toks []*tokens.Token) int {
	j := len(toks) - 1
	start := -1
	for j >= 0 {
		t := toks[j]
		switch t.Type {
		case tokens.RightParenthesis, tokens.RightBracket, tokens.RightBrace:
			o := matchingOpenerBackward(toks, j)
			if o < 0 {
				return start
			}
			start, j = o, o-1
			// A call or subscript continues the chain; a parenthesised
			// expression or a literal starts it.
			if toks[o].Type == tokens.LeftBrace || j < 0 || !endsOperand(toks[j]) {
				return start
			}
		case tokens.Name:
			if t.Val == "if" || t.Val == "else" {
				return start
			}
			fallthrough
		case tokens.String, tokens.Integer, tokens.Float:
			start, j = j, j-1
			if j >= 0 && toks[j].Type == tokens.Dot {
				j--
				continue
			}
			return start
		default:
			return start
		}
	}
	return start
}

// endsOperand reports whether t can end the operand a call or subscript
// applies to.
func endsOperand(t *tokens.Token) bool {
	switch t.Type {
	case tokens.Name:
		return t.Val != "if" && t.Val != "else"
	case tokens.String, tokens.RightParenthesis, tokens.RightBracket:
		return true
	}
	return false
}

// matchingOpenerBackward returns the index of the bracket opening the one
// closing at toks[j], or -1.
func matchingOpenerBackward(toks []*tokens.Token, j int) int {
	depth := 0
	for k := j; k >= 0; k-- {
		switch toks[k].Type {
		case tokens.RightParenthesis, tokens.RightBracket, tokens.RightBrace:
			depth++
		case tokens.LeftParenthesis, tokens.LeftBracket, tokens.LeftBrace:
			depth--
			if depth == 0 {
				return k
			}
		}
	}
	return -1
}

// Names of the functions rewriteArith turns % and ** into.
const (
	modFunc = internalPrefix + "mod"
	powFunc = internalPrefix + "pow"
)

// rewriteArith turns "L % R" and "L ** R" into calls, tag by tag: gonja
// computes % as integer modulo only (Python also formats strings with it,
// and its modulo floors) and ** always as a float. L is the operand
// before the operator (a name, literal or bracket group with its
// attribute, call and subscript chain, and for % a unary minus), R the
// unary operand after it (with ** chains, which group to the right).
func rewriteArith(toks []*tokens.Token) []*tokens.Token {
	return rewriteTags(toks, func(_ bool, body []*tokens.Token) []*tokens.Token {
		return rewriteOperators(body)
	})
}

func rewriteOperators(toks []*tokens.Token) []*tokens.Token {
	out := make([]*tokens.Token, 0, len(toks))
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch t.Type {
		case tokens.LeftParenthesis, tokens.LeftBracket, tokens.LeftBrace:
			end := matchingBracket(toks, i)
			if end < 0 {
				return append(out, toks[i:]...)
			}
			out = append(out, t)
			out = append(out, rewriteOperators(toks[i+1:end])...)
			out = append(out, toks[end])
			i = end
		case tokens.Modulo, tokens.Power:
			start := postfixStart(out)
			// Jinja2 groups ** to the left, below unary minus, and %
			// with * / and //, above + and -.
			end := unaryEnd(toks, i+1, t.Type == tokens.Modulo)
			if start < 0 || end == i+1 {
				out = append(out, t)
				continue
			}
			start = withUnaryMinus(out, start)
			if t.Type == tokens.Modulo {
				for start > 1 && isMulOp(out[start-1]) {
					s := postfixStart(out[:start-1])
					if s < 0 {
						break
					}
					start = withUnaryMinus(out, s)
				}
			}
			fn := modFunc
			if t.Type == tokens.Power {
				fn = powFunc
			}
			left := append([]*tokens.Token{}, out[start:]...)
			out = append(out[:start], tok(t, tokens.Name, fn), tok(t, tokens.LeftParenthesis, "("))
			out = append(out, left...)
			out = append(out, tok(t, tokens.Comma, ","))
			out = append(out, rewriteOperators(toks[i+1:end])...)
			out = append(out, tok(t, tokens.RightParenthesis, ")"))
			i = end - 1
		default:
			out = append(out, t)
		}
	}
	return out
}

// withUnaryMinus extends the operand starting at toks[start] over a unary
// minus or plus before it.
func withUnaryMinus(toks []*tokens.Token, start int) int {
	if start > 0 && (toks[start-1].Type == tokens.Subtraction || toks[start-1].Type == tokens.Addition) &&
		(start == 1 || !isOperandEnd(toks[start-2])) {
		return start - 1
	}
	return start
}

// isOperandEnd reports whether t can end an operand, so that a following
// minus is binary.
func isOperandEnd(t *tokens.Token) bool {
	switch t.Type {
	case tokens.Name:
		return t.Val != "if" && t.Val != "else"
	case tokens.String, tokens.Integer, tokens.Float,
		tokens.RightParenthesis, tokens.RightBracket, tokens.RightBrace:
		return true
	}
	return false
}

func isMulOp(t *tokens.Token) bool {
	switch t.Type {
	case tokens.Multiply, tokens.Division, tokens.FloorDivision:
		return true
	}
	return false
}

// unaryEnd returns the end of the unary operand starting at from: unary
// signs and not, a name, literal or bracket group, then attribute
// accesses, calls, subscripts and filters; with power, following ** and
// their operands too. It returns from if there is none.
func unaryEnd(toks []*tokens.Token, from int, power bool) int {
	j := from
	for j < len(toks) && (toks[j].Type == tokens.Subtraction || toks[j].Type == tokens.Addition || toks[j].Type == tokens.Not) {
		j++
	}
	if j >= len(toks) {
		return from
	}
	switch t := toks[j]; t.Type {
	case tokens.Name:
		if t.Val == "if" || t.Val == "else" {
			return from
		}
		j++
	case tokens.String, tokens.Integer, tokens.Float:
		j++
	case tokens.LeftParenthesis, tokens.LeftBracket, tokens.LeftBrace:
		e := matchingBracket(toks, j)
		if e < 0 {
			return from
		}
		j = e + 1
	default:
		return from
	}
	for j < len(toks) {
		switch toks[j].Type {
		case tokens.Dot:
			if j+1 < len(toks) && (toks[j+1].Type == tokens.Name || toks[j+1].Type == tokens.Integer) {
				j += 2
				continue
			}
		case tokens.LeftParenthesis, tokens.LeftBracket:
			if e := matchingBracket(toks, j); e >= 0 {
				j = e + 1
				continue
			}
		case tokens.Pipe:
			if j+1 < len(toks) && toks[j+1].Type == tokens.Name {
				j += 2
				if j < len(toks) && toks[j].Type == tokens.LeftParenthesis {
					if e := matchingBracket(toks, j); e >= 0 {
						j = e + 1
					}
				}
				continue
			}
		case tokens.Power:
			if power {
				if e := unaryEnd(toks, j+1, true); e > j+1 {
					return e
				}
			}
		}
		break
	}
	return j
}
