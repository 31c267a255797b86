package genworker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/pkg/llm"
)

// The tokenizer check. A gen-worker sends the server token ids, never text,
// so a tokenizer or chat template that is not the served model's goes
// unnoticed: the model reads ids that mean something else and the trainer
// learns from them. So before it takes a gen step, the worker renders a
// probe conversation with its chat template, has the server tokenize the
// rendered text (POST /tokenize, llm.Tokenizer, without special tokens
// added: the rendering holds them) and compares the ids with its own. On a
// mismatch it refuses to run: Run returns a *TokenizerMismatchError, and
// the service exits naming both tokenizers, the first differing position
// and the ids around it. A server that cannot tell (no /tokenize: a 404,
// or an answer that is not a transient failure) is said once in the log
// and the worker goes on. While the server is unreachable the worker waits
// (not ready, as for the context length) and tries again; when the server
// comes back after being down (it may have restarted with another model)
// it checks again.

// tokenCheck is the state of the tokenizer check.
type tokenCheck struct {
	done atomic.Bool // the first check passed, or the server cannot tell
}

// ready reports whether the first check is done: the worker pulls no gen
// step before.
func (c *tokenCheck) ready() bool { return c.done.Load() }

// tokenCheckTimeout bounds one check.
const tokenCheckTimeout = 30 * time.Second

// probeMessages is the probe conversation: text a tokenizer of another
// model splits differently (digit runs, code and its indentation, runs of
// spaces and newlines, accents, CJK, emoji, a template's special-token
// look-alikes in plain text).
var probeMessages = []tokenize.Msg{
	{Role: "system", Content: "You are a helpful assistant that can interact with a computer shell.\n" +
		"Reply with exactly one ```bash``` block."},
	{Role: "user", Content: "Fix the failing test in `src/parser.py` (line 1234, 98.6% of 2048 cases):\n\n" +
		"```python\ndef parse(s: str) -> dict[str, int]:\n\treturn {k: int(v) for k, v in (p.split('=') for p in s.split(';'))}\n```\n" +
		"    indented   with  spaces  \n\n\nCafé naïve résumé — 数字是 12345，日本語も。 🙂🚀 <think> </s> [INST] \\n\r\n"},
}

// TokenizerMismatchError is a gen-worker's refusal to run with a server
// that tokenizes the probe conversation differently.
type TokenizerMismatchError struct {
	// URL is the server's address; Model its model, as it names it ("":
	// it does not).
	URL, Model string
	// Settings are the worker's tokenizer settings, as chatSettings
	// writes them.
	Settings string
	// Pos is the first position where the ids differ.
	Pos int
	// Ours are the worker's ids of the probe, Server the server's.
	Ours, Server []int32
	// OursText is the text of the worker's id at Pos, as its tokenizer
	// decodes it.
	OursText string
}

// Error names both tokenizers, the first differing position and both ids
// there, and the ids around it.
func (e *TokenizerMismatchError) Error() string {
	model := e.Model
	if model == "" {
		model = "(unnamed)"
	}
	return fmt.Sprintf("the inference server at %s (model %s) tokenizes differently from %s: "+
		"the probe conversation's ids differ first at position %d of %d (ours) / %d (server's): "+
		"ours %s %q, the server's %s; around it ours %s, the server's %s; point ACTLOOP_MODEL_DIR "+
		"(or ACTLOOP_TOKENIZER and ACTLOOP_CHAT_TEMPLATE) at the served model's",
		e.URL, model, e.Settings, e.Pos, len(e.Ours), len(e.Server),
		idAt(e.Ours, e.Pos), e.OursText, idAt(e.Server, e.Pos), window(e.Ours, e.Pos), window(e.Server, e.Pos))
}

// chatSettings names the tokenizer settings c holds, the defaults
// included.
func chatSettings(c tokenize.Chat) string {
	var parts []string
	if c.ModelDir != "" {
		parts = append(parts, "ACTLOOP_MODEL_DIR="+c.ModelDir)
	}
	if c.Tokenizer != "" || c.ModelDir == "" {
		parts = append(parts, "ACTLOOP_TOKENIZER="+cmp.Or(c.Tokenizer, tokenize.DefaultTokenizer))
	}
	if c.ChatTemplate != "" || c.ModelDir == "" {
		parts = append(parts, "ACTLOOP_CHAT_TEMPLATE="+cmp.Or(c.ChatTemplate, tokenize.DefaultTemplate))
	}
	return strings.Join(parts, " ")
}

// idAt is ids[i], or "(end)" past the end.
func idAt(ids []int32, i int) string {
	if i >= len(ids) {
		return "(end)"
	}
	return strconv.Itoa(int(ids[i]))
}

// windowSize is how many ids either side of the difference an error shows.
const windowSize = 5

// window formats the ids around i, the one at i in brackets.
func window(ids []int32, i int) string {
	var b strings.Builder
	b.WriteString("[")
	if i-windowSize > 0 {
		b.WriteString("… ")
	}
	for j := max(0, i-windowSize); j < min(len(ids), i+windowSize+1); j++ {
		if j > max(0, i-windowSize) {
			b.WriteString(" ")
		}
		if j == i {
			fmt.Fprintf(&b, "<%d>", ids[j])
		} else {
			b.WriteString(strconv.Itoa(int(ids[j])))
		}
	}
	if i >= len(ids) {
		b.WriteString(" <end>")
	}
	if i+windowSize+1 < len(ids) {
		b.WriteString(" …")
	}
	b.WriteString("]")
	return b.String()
}

// firstDifference is the first position where a and b differ (the shorter
// one's length when one is a prefix of the other); -1 when they are equal.
func firstDifference(a, b []int32) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) == len(b) {
		return -1
	}
	return min(len(a), len(b))
}

// probe returns the probe conversation's text, as the template renders it
// with a generation prompt, and its ids as the worker builds a
// generation's prompt: message by message.
func probe(tmpl tokenize.ChatTemplate) (string, []int32) {
	ids := slices.Clone(tmpl.Begin())
	for _, m := range probeMessages {
		ids = append(ids, tmpl.Message(m.Role, m.Content)...)
	}
	ids = append(ids, tmpl.GenerationPrompt()...)
	return tmpl.Render(probeMessages, true), ids
}

// errCannotTell marks a check the server cannot answer.
var errCannotTell = errors.New("the server cannot tell")

// checkTokenizer runs the check once: nil when the ids agree, a
// *TokenizerMismatchError when they differ, an error matching errCannotTell
// when the server cannot tell, and a transient error otherwise.
func (w *Worker) checkTokenizer(ctx context.Context, tz llm.Tokenizer) error {
	text, ours := probe(w.tmpl)
	theirs, err := tz.Tokenize(ctx, text, false)
	switch {
	case err == nil:
	case errors.Is(err, llm.ErrNoTokenize) || (!llm.Temporary(err) && ctx.Err() == nil):
		return fmt.Errorf("%w: %w", errCannotTell, err)
	default:
		return err
	}
	pos := firstDifference(ours, theirs)
	if pos < 0 {
		return nil
	}
	e := &TokenizerMismatchError{URL: w.cfg.LLMURL, Settings: chatSettings(w.cfg.Chat), Pos: pos, Ours: ours, Server: theirs}
	if pos < len(ours) {
		e.OursText = w.tok.Decode(ours[pos : pos+1])
	}
	if n, ok := w.gen.(llm.ModelNamer); ok {
		if m, err := n.ModelName(ctx); err == nil {
			e.Model = m
		}
	}
	return e
}

// tokenCheckLoop checks the tokenizer at start, again after a transient
// failure (every ACTLOOP_LLM_HEALTH_INTERVAL) and whenever the server comes
// back after being down, until ctx ends. It returns the mismatch, which
// stops the worker.
func (w *Worker) tokenCheckLoop(ctx context.Context) error {
	tz, ok := w.gen.(llm.Tokenizer)
	if !ok {
		w.tokCheck.done.Store(true)
		w.d.Log.Info("the inference client cannot tokenize on its server: the tokenizer is not checked against it",
			"replica", w.cfg.Replica)
		return nil
	}
	var failed, toldCannot bool
	for {
		cctx, cancel := context.WithTimeout(ctx, tokenCheckTimeout)
		err := w.checkTokenizer(cctx, tz)
		cancel()
		var mismatch *TokenizerMismatchError
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.As(err, &mismatch):
			return mismatch
		case errors.Is(err, errCannotTell):
			if !toldCannot {
				w.d.Log.Warn("the inference server cannot tokenize the probe conversation: actloop's tokenizer "+
					"is not checked against the served model's", "replica", w.cfg.Replica, "error", err)
			}
			toldCannot, failed = true, false
			w.tokCheck.done.Store(true)
		case err != nil:
			if !failed {
				w.d.Log.Warn("check the tokenizer against the inference server's (trying again; no gen step is "+
					"taken before it is checked)", "replica", w.cfg.Replica, "error", err)
			}
			failed = true
		default:
			if failed || !w.tokCheck.done.Load() {
				w.d.Log.Info("the inference server tokenizes the probe conversation as actloop does",
					"replica", w.cfg.Replica, "tokenizer", chatSettings(w.cfg.Chat))
			}
			failed = false
			w.tokCheck.done.Store(true)
		}
		if !w.waitAgain(ctx, failed, w.health.tokUp) {
			return nil
		}
	}
}
