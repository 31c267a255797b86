package chattemplate

import (
	"errors"
	"fmt"

	controlStructures "github.com/nikolalohinski/gonja/v2/builtins/control_structures"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/parser"
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// Limits on one rendering. A chat template is configuration the operator
// chose, but a wrong one should fail rather than hang or exhaust memory.
const (
	// maxRange is Jinja2's sandbox limit on range().
	maxRange = 100_000
	// maxMacroDepth bounds macro recursion, which would otherwise
	// overflow the goroutine's stack.
	maxMacroDepth = 200
	// maxOutputBytes bounds the rendered text: 64 MiB is hundreds of
	// times the longest context windows in tokens.
	maxOutputBytes = 64 << 20
	// maxIterations bounds the loop bodies one rendering runs, nested
	// loops included: real templates run thousands (messages, tools times
	// parameters), a million is about a second.
	maxIterations = 1_000_000
)

// errOutputTooLong is returned when a rendering passes maxOutputBytes.
var errOutputTooLong = fmt.Errorf("rendering is over %d bytes", maxOutputBytes)

// stateName is the context variable holding a rendering's renderState.
const stateName = internalPrefix + "state"

// renderState is per-rendering bookkeeping the bridged functions share.
type renderState struct {
	macroDepth int
	iterations int
	// failure keeps the error a global function returned: gonja flattens
	// errors from calls to text, so *RaiseError and ErrUnsupported would
	// not survive its wrapping.
	failure error
}

// rangeFunction is Python's range as a list, refusing more than maxRange
// items as Jinja2's sandbox does. (gonja's feeds a channel from a goroutine
// that leaks when the range is not iterated to the end.)
func rangeFunction(_ *exec.Evaluator, params *exec.VarArgs) *exec.Value {
	start, stop, step := 0, 0, 1
	for _, a := range params.Args {
		if !a.IsInteger() {
			return exec.AsValue(errors.New("range: arguments must be integers"))
		}
	}
	switch len(params.Args) {
	case 1:
		stop = params.Args[0].Integer()
	case 2:
		start, stop = params.Args[0].Integer(), params.Args[1].Integer()
	case 3:
		start, stop, step = params.Args[0].Integer(), params.Args[1].Integer(), params.Args[2].Integer()
	default:
		return exec.AsValue(errors.New("range expected 1 to 3 integer arguments"))
	}
	if step == 0 {
		return exec.AsValue(errors.New("range() arg 3 must not be zero"))
	}
	n := 0
	if step > 0 && stop > start {
		n = (stop - start + step - 1) / step
	} else if step < 0 && start > stop {
		n = (start - stop - step - 1) / -step
	}
	if n > maxRange {
		return exec.AsValue(fmt.Errorf("range of %d items is over the limit of %d", n, maxRange))
	}
	out := make([]any, n)
	for i := range out {
		out[i] = start + i*step
	}
	return exec.AsValue(out)
}

// guardedMacro defines a macro whose calls count their depth.
type guardedMacro struct {
	*controlStructures.MacroControlStructure
}

func (g guardedMacro) Execute(r *exec.Renderer, tag *nodes.ControlStructureBlock) error {
	if err := g.MacroControlStructure.Execute(r, tag); err != nil {
		return err
	}
	fn, ok := r.Environment.Context.Get(g.Name)
	macro, isMacro := fn.(exec.Macro)
	st, hasState := stateOf(r.Environment.Context)
	if !ok || !isMacro || !hasState {
		return nil
	}
	name := g.Name
	r.Environment.Context.Set(name, exec.Macro(func(params *exec.VarArgs) *exec.Value {
		if st.macroDepth >= maxMacroDepth {
			return exec.AsValue(fmt.Errorf("macro %s: recursion deeper than %d", name, maxMacroDepth))
		}
		st.macroDepth++
		defer func() { st.macroDepth-- }()
		return macro(params)
	}))
	return nil
}

func stateOf(ctx *exec.Context) (*renderState, bool) {
	v, ok := ctx.Get(stateName)
	if !ok {
		return nil, false
	}
	st, ok := v.(*renderState)
	return st, ok
}

// guardedMacroParser parses {% macro %} as gonja does and guards it.
func guardedMacroParser(inner parser.ControlStructureParser) parser.ControlStructureParser {
	return func(p *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
		cs, err := inner(p, args)
		if err != nil {
			return nil, err
		}
		m, ok := cs.(*controlStructures.MacroControlStructure)
		if !ok {
			return cs, nil
		}
		return guardedMacro{m}, nil
	}
}

// limitedWriter fails once more than max bytes are written, and records
// the failure in st.
type limitedWriter struct {
	w   interface{ WriteString(string) (int, error) }
	n   int
	max int
	st  *renderState
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	return l.WriteString(string(p))
}

func (l *limitedWriter) WriteString(s string) (int, error) {
	if l.n+len(s) > l.max {
		l.st.failure = errOutputTooLong
		return 0, errOutputTooLong
	}
	l.n += len(s)
	return l.w.WriteString(s)
}

// iterationCounter is a node guardedForParser puts first in every loop
// body: it counts the body's runs against maxIterations.
type iterationCounter struct {
	location *tokens.Token
}

func (c iterationCounter) Position() *tokens.Token { return c.location }

func (c iterationCounter) String() string { return "IterationCounter" }

func (c iterationCounter) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) error {
	st, ok := stateOf(r.Environment.Context)
	if !ok {
		return nil
	}
	st.iterations++
	if st.iterations > maxIterations {
		err := fmt.Errorf("loops ran over %d times", maxIterations)
		if st.failure == nil {
			st.failure = err
		}
		return err
	}
	return nil
}

// guardedForParser parses {% for %} as gonja does and counts its runs.
func guardedForParser(inner parser.ControlStructureParser) parser.ControlStructureParser {
	return func(p *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
		cs, err := inner(p, args)
		if err != nil {
			return nil, err
		}
		f, ok := cs.(*controlStructures.ForControlStructure)
		if !ok || f.BodyWrapper == nil {
			return cs, nil
		}
		counter := &nodes.ControlStructureBlock{
			Location:         f.BodyWrapper.Location,
			Name:             "iteration counter",
			ControlStructure: iterationCounter{location: f.BodyWrapper.Location},
		}
		f.BodyWrapper.Nodes = append([]nodes.Node{counter}, f.BodyWrapper.Nodes...)
		return f, nil
	}
}
