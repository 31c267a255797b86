package sim

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/actloop/actloop/internal/tokenize"
)

// A Directive in a task's text fixes the unscripted trajectory the
// simulator plays for it: how many tokens each turn's reply has and how
// long each turn's command runs in a simulated sandbox. Benchmark workloads
// use it to give every trajectory the lengths their distributions drew,
// while the data still flows through every real path (the sandbox runs the
// command the model wrote: "sleep <seconds>").
//
// Written into the task as
//
//	[actloop-sim tokens=120,340,80 exec=0.3,12.5]
//
// with one token count per turn (each reply's ids, without the
// <|im_end|> that closes it) and one run time in seconds per turn but the
// last, whose command is the submission.
type Directive struct {
	Tokens []int
	Exec   []float64
}

const directiveOpen = "[actloop-sim "

// maxDirectiveTurns bounds the turns a directive may ask for.
const maxDirectiveTurns = 10000

// String renders d as it is written into a task.
func (d Directive) String() string {
	var b strings.Builder
	b.WriteString(directiveOpen)
	b.WriteString("tokens=")
	for i, n := range d.Tokens {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(n))
	}
	b.WriteString(" exec=")
	for i, x := range d.Exec {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatFloat(x, 'f', 3, 64))
	}
	b.WriteByte(']')
	return b.String()
}

// Validate reports what is wrong with d.
func (d Directive) Validate() error {
	if len(d.Tokens) < 1 || len(d.Tokens) > maxDirectiveTurns {
		return fmt.Errorf("sim directive: %d turns (want 1..%d)", len(d.Tokens), maxDirectiveTurns)
	}
	if len(d.Exec) != len(d.Tokens)-1 {
		return fmt.Errorf("sim directive: %d run times for %d turns (want one per turn but the last)", len(d.Exec), len(d.Tokens))
	}
	for i, n := range d.Tokens {
		if n < 1 || n > 1<<20 {
			return fmt.Errorf("sim directive: turn %d has %d tokens (want 1..%d)", i+1, n, 1<<20)
		}
	}
	for i, x := range d.Exec {
		if x < 0 || x > 1e6 || math.IsNaN(x) {
			return fmt.Errorf("sim directive: turn %d runs %v s (want 0..1e6)", i+1, x)
		}
	}
	return nil
}

// ParseDirective finds the directive in text. It reports false when there
// is none, and an error when there is one it cannot read.
func ParseDirective(text string) (Directive, bool, error) {
	i := strings.Index(text, directiveOpen)
	if i < 0 {
		return Directive{}, false, nil
	}
	rest := text[i+len(directiveOpen):]
	end := strings.IndexByte(rest, ']')
	if end < 0 {
		return Directive{}, true, errors.New("sim directive: no closing ]")
	}
	var d Directive
	seen := map[string]bool{}
	for _, field := range strings.Fields(rest[:end]) {
		key, val, ok := strings.Cut(field, "=")
		if !ok || seen[key] {
			return Directive{}, true, fmt.Errorf("sim directive: bad field %q", field)
		}
		seen[key] = true
		var parts []string
		if val != "" {
			parts = strings.Split(val, ",")
		}
		if len(parts) > maxDirectiveTurns {
			return Directive{}, true, fmt.Errorf("sim directive: %s has more than %d values", key, maxDirectiveTurns)
		}
		switch key {
		case "tokens":
			for _, p := range parts {
				n, err := strconv.Atoi(p)
				if err != nil {
					return Directive{}, true, fmt.Errorf("sim directive: tokens: %q is not a number", p)
				}
				d.Tokens = append(d.Tokens, n)
			}
		case "exec":
			for _, p := range parts {
				x, err := strconv.ParseFloat(p, 64)
				if err != nil {
					return Directive{}, true, fmt.Errorf("sim directive: exec: %q is not a number", p)
				}
				d.Exec = append(d.Exec, x)
			}
		default:
			return Directive{}, true, fmt.Errorf("sim directive: unknown field %q", key)
		}
	}
	if err := d.Validate(); err != nil {
		return Directive{}, true, err
	}
	return d, true, nil
}

// replyOf is turn k's reply (1-based) under d: exactly d.Tokens[k-1] tokens
// of tok, or the bare command when that is longer; a thought of words
// drawn from r, cut at a token boundary, then the command: "sleep <exec>"
// or, on the last turn, the submission. The thought and the command meet at
// a pre-token boundary ("\n\n"), so their token counts add up.
func (d Directive) replyOf(r *rng, k int, tok tokenize.Tokenizer) string {
	cmd := "\n\n```bash\n" + Submission + "\n```"
	if k < len(d.Tokens) {
		cmd = "\n\n```bash\nsleep " + strconv.FormatFloat(d.Exec[k-1], 'f', 3, 64) + "\n```"
	}
	want := d.Tokens[k-1] - len(tok.Encode(cmd))
	var b strings.Builder
	b.WriteString("THOUGHT:")
	minIDs := len(tok.Encode(b.String()))
	// Every token is at least a byte: draw words until the text has want
	// bytes, then more while it has fewer than want tokens.
	thought, ids := b.String(), []int32(nil)
	for target := want; ; target += 4 * (want - len(ids)) {
		for b.Len() < target {
			b.WriteByte(' ')
			b.WriteString(words[r.intn(len(words))])
		}
		thought = b.String()
		if ids = tok.Encode(thought); len(ids) >= want {
			break
		}
	}
	if len(ids) > want {
		thought = tok.Decode(ids[:max(want, minIDs)])
	}
	return thought + cmd
}
