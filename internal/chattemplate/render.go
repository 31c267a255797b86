package chattemplate

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	gonjaconfig "github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/parser"
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// internalPrefix starts the names of the variables and functions the
// rewritten templates call.
const internalPrefix = "_chattemplate_"

// templateName is the only name the loader knows, so a template cannot
// reach a file.
const templateName = "/chat_template"

// Input is what apply_chat_template receives.
//
// Messages, Tools and Documents hold JSON-like values: each element a
// json.RawMessage (decoded keeping key order, which tojson then keeps, as
// Python does) or a map[string]any (a Go map has no order, so its keys are
// sorted), with nested []any, string, bool, numbers and nil. Messages are
// in the OpenAI chat format: role, content, and for the assistant tool_calls
// whose function.arguments is an object or a JSON string, passed to the
// template as given, as transformers does.
type Input struct {
	Messages  []any
	Tools     []any
	Documents []any
	// AddGenerationPrompt ends the text with the header of an assistant
	// turn, for generation.
	AddGenerationPrompt bool
	// Kwargs are extra template variables (enable_thinking, date_string,
	// ...). They override the special tokens and the variables above,
	// as keyword arguments to apply_chat_template do.
	Kwargs map[string]any
}

// WithClock returns a copy of t whose strftime_now reads now.
func (t *Template) WithClock(now func() time.Time) *Template {
	c := *t
	c.now = now
	return &c
}

// jinjaConfig is the environment transformers renders chat templates in:
// trim_blocks and lstrip_blocks on, no autoescape, undefined values
// rendering as empty, and the template's final newline dropped
// (keep_trailing_newline is off).
func jinjaConfig() *gonjaconfig.Config {
	c := gonjaconfig.New()
	c.TrimBlocks = true
	c.LeftStripBlocks = true
	c.KeepTrailingNewline = false
	c.StrictUndefined = false
	c.AutoEscape = false
	return c
}

// Render renders the conversation in in with the model's template, as
// transformers' apply_chat_template(..., tokenize=False) does. A template's
// raise_exception returns a *RaiseError; a construct this package cannot
// render as Jinja2 would returns an error wrapping ErrUnsupported.
func (t *Template) Render(in Input) (string, error) {
	src, err := t.Source(in)
	if err != nil {
		return "", err
	}
	vars, err := t.variables(in)
	if err != nil {
		return "", err
	}
	return renderSource(src, vars, t.now)
}

// variables builds the template's context: messages, tools, documents,
// add_generation_prompt, the special tokens, then the keyword arguments.
func (t *Template) variables(in Input) (map[string]any, error) {
	vars := map[string]any{}
	for k, v := range t.special {
		vars[k] = v
	}
	msgs, err := toTemplateValue(in.Messages)
	if err != nil {
		return nil, fmt.Errorf("messages: %w", err)
	}
	if msgs == nil {
		msgs = []any{}
	}
	vars["messages"] = msgs
	vars["add_generation_prompt"] = in.AddGenerationPrompt
	vars["tools"] = pyNone
	if in.Tools != nil {
		if vars["tools"], err = toTemplateValue(in.Tools); err != nil {
			return nil, fmt.Errorf("tools: %w", err)
		}
	}
	vars["documents"] = pyNone
	if in.Documents != nil {
		if vars["documents"], err = toTemplateValue(in.Documents); err != nil {
			return nil, fmt.Errorf("documents: %w", err)
		}
	}
	for k, v := range in.Kwargs {
		if strings.HasPrefix(k, internalPrefix) {
			return nil, fmt.Errorf("kwarg %s: the prefix %s is reserved", k, internalPrefix)
		}
		c, err := toTemplateValue(v)
		if err != nil {
			return nil, fmt.Errorf("kwarg %s: %w", k, err)
		}
		vars[k] = c
	}
	return vars, nil
}

// renderSource parses and executes src. It parses on every call: parsing
// takes microseconds and a parsed gonja template is then never shared
// between goroutines. A panic inside the engine becomes an error.
func renderSource(src string, vars map[string]any, now func() time.Time) (out string, err error) {
	if now == nil {
		now = time.Now
	}
	st := &renderState{}
	vars[stateName] = st
	vars["raise_exception"] = func(_ *exec.Evaluator, args *exec.VarArgs) *exec.Value {
		msg := ""
		if len(args.Args) > 0 {
			msg = pyStr(args.Args[0])
		}
		st.failure = &RaiseError{Message: msg}
		return exec.AsValue(st.failure)
	}
	vars["strftime_now"] = func(_ *exec.Evaluator, args *exec.VarArgs) *exec.Value {
		if len(args.Args) != 1 || !args.Args[0].IsString() {
			return exec.AsValue(errors.New("strftime_now takes one format string"))
		}
		s, err := strftime(now(), args.Args[0].String())
		if err != nil {
			st.failure = err
			return exec.AsValue(err)
		}
		return exec.AsValue(s)
	}
	defer func() {
		if r := recover(); r != nil {
			out, err = "", enginePanic(r)
		}
	}()
	root, err := parse(src)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	err = execute(root, vars, &limitedWriter{w: &b, max: maxOutputBytes, st: st})
	switch {
	case st.failure != nil:
		// raise_exception aborts in Jinja2 even where gonja would carry
		// on past an error value.
		return "", st.failure
	case err != nil:
		return "", fmt.Errorf("render: %w", err)
	}
	return b.String(), nil
}

// enginePanic turns a panic inside gonja into an error.
func enginePanic(r any) error {
	return fmt.Errorf("template engine failed: %v", r)
}

// parse lexes src, rewrites in the token stream what gonja parses or
// evaluates differently from Jinja2 (lstrip_blocks, conditional
// expressions, subscripts, % and **, in; see rewrite.go) and parses the
// result.
func parse(src string) (*nodes.Template, error) {
	cfg := jinjaConfig()
	stream := tokens.LexAll(src, cfg)
	var toks []*tokens.Token
	for {
		toks = append(toks, stream.Current())
		if stream.End() {
			break
		}
		stream.Next()
	}
	if last := toks[len(toks)-1]; last.Type == tokens.Error {
		return nil, fmt.Errorf("parse template: line %d col %d: %s", last.Line, last.Col, last.Val)
	}
	toks = fixLeftStrip(src, toks)
	toks = rewriteTernaries(toks)
	toks = rewriteItems(toks)
	toks = rewriteArith(toks)
	toks = rewriteIn(toks)
	p := parser.NewParser(templateName, tokens.NewStream(toks), cfg, emptyLoader(), environment().ControlStructures)
	root, err := p.Parse()
	if err != nil {
		return nil, parseError(err)
	}
	return root, nil
}

// execute renders root with vars into w. gonja's renderer needs a parsed
// *exec.Template only for its loader, so an empty one stands in.
func execute(root *nodes.Template, vars map[string]any, w io.Writer) error {
	env := environment()
	cfg := jinjaConfig()
	loader := emptyLoader()
	host, err := exec.NewTemplate(templateName, cfg, loader, env)
	if err != nil {
		return err
	}
	r := &exec.Renderer{
		Config: cfg,
		Environment: &exec.Environment{
			Context:           env.Context.Inherit().Update(exec.NewContext(vars)),
			Filters:           env.Filters,
			Tests:             env.Tests,
			ControlStructures: env.ControlStructures,
			Methods:           env.Methods,
		},
		Loader:   loader,
		Template: host,
		RootNode: root,
		Output:   w,
	}
	return r.Execute()
}

// emptyLoader knows one empty template, so {% include %} and the like
// cannot reach a file.
func emptyLoader() loaders.Loader {
	l, err := loaders.NewMemoryLoader(map[string]string{templateName: ""})
	if err != nil {
		panic("chattemplate: " + err.Error())
	}
	return l
}

// parseError keeps ErrUnsupported matchable through gonja's wrapping, which
// formats errors with %s in places.
func parseError(err error) error {
	if errors.Is(err, ErrUnsupported) {
		return err
	}
	if strings.Contains(err.Error(), ErrUnsupported.Error()) {
		return fmt.Errorf("parse template: %s: %w", trimSource(err.Error()), ErrUnsupported)
	}
	return fmt.Errorf("parse template: %s", trimSource(err.Error()))
}

// trimSource drops the template source gonja quotes whole in its parse
// errors ("failed to parse template '<source>': ...").
func trimSource(msg string) string {
	const prefix = "failed to parse template '"
	if !strings.HasPrefix(msg, prefix) {
		return msg
	}
	if i := strings.LastIndex(msg, "': "); i >= 0 {
		return msg[i+3:]
	}
	return msg
}
