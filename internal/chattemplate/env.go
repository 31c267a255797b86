package chattemplate

import (
	"fmt"
	"sync"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/parser"
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// allowedTags are the Jinja2 statements a chat template may use. Jinja2's
// sandbox as transformers configures it has no loader, so include, import,
// from and extends fail there too; block and trans are refused rather than
// rendered differently.
var allowedTags = []string{
	"if", "for", "set", "macro", "call", "filter", "raw", "with", "do",
	"break", "continue",
}

// refusedTags are Jinja2 statements refused with ErrUnsupported.
var refusedTags = []string{"include", "import", "from", "extends", "block", "trans", "autoescape"}

// environment is gonja's, bridged to Jinja2 as transformers configures it.
// Per-render globals (raise_exception, strftime_now) are added by Render.
var environment = sync.OnceValue(func() *exec.Environment {
	cs := map[string]parser.ControlStructureParser{}
	for _, name := range allowedTags {
		p, ok := builtins.ControlStructures.Get(name)
		if !ok {
			panic("chattemplate: gonja lacks the " + name + " statement")
		}
		cs[name] = p
	}
	cs["macro"] = guardedMacroParser(cs["macro"])
	cs["for"] = guardedForParser(cs["for"])
	for _, name := range refusedTags {
		cs[name] = refusedParser(name)
	}
	cs["generation"] = generationParser

	filters := exec.NewFilterSet(map[string]exec.FilterFunction{}).Update(builtins.Filters)
	gonjaLength, _ := builtins.Filters.Get("length")
	for name, fn := range map[string]exec.FilterFunction{
		"length":   filterLength(gonjaLength),
		"count":    filterLength(gonjaLength),
		"tojson":   filterToJSON,
		"items":    filterItems,
		"trim":     filterTrim,
		"string":   filterString,
		"dictsort": filterDictSort,
	} {
		if err := filters.Replace(name, fn); err != nil {
			panic("chattemplate: " + err.Error())
		}
	}

	tests := exec.NewTestSet(map[string]exec.TestFunction{}).Update(builtins.Tests)
	for name, fn := range map[string]exec.TestFunction{
		"sequence": testSequence,
		"iterable": testIterable,
		"none":     testNone,
		"false":    testFalse,
		"true":     testTrue,
	} {
		if err := tests.Replace(name, fn); err != nil {
			panic("chattemplate: " + err.Error())
		}
	}

	return &exec.Environment{
		Context: exec.EmptyContext().Update(builtins.GlobalFunctions).Update(exec.NewContext(map[string]any{
			"none": pyNone, "true": true, "false": false,
			inOperandFunc: inOperand,
			"range":       rangeFunction,
			itemFunc:      itemFunction,
			modFunc:       modFunction,
			powFunc:       powFunction,
		})),
		Filters:           filters,
		Tests:             tests,
		ControlStructures: exec.NewControlStructureSet(cs),
		Methods:           methods(),
	}
})

// refusedParser makes a statement a parse error naming it.
func refusedParser(name string) parser.ControlStructureParser {
	return func(p *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
		return nil, fmt.Errorf("{%% %s %%}: %w", name, ErrUnsupported)
	}
}

// generationControlStructure is transformers' {% generation %} block
// (AssistantTracker): it marks assistant text for return_assistant_tokens_mask
// and renders its body unchanged.
type generationControlStructure struct {
	location *tokens.Token
	wrapper  *nodes.Wrapper
}

func (g *generationControlStructure) Position() *tokens.Token { return g.location }

func (g *generationControlStructure) String() string {
	return fmt.Sprintf("GenerationControlStructure(Line=%d Col=%d)", g.location.Line, g.location.Col)
}

func (g *generationControlStructure) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) error {
	return r.ExecuteWrapper(g.wrapper)
}

func generationParser(p *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
	g := &generationControlStructure{location: p.Current()}
	if !args.End() {
		return nil, args.Error("generation takes no arguments", args.Current())
	}
	wrapper, endArgs, err := p.WrapUntil("endgeneration")
	if err != nil {
		return nil, err
	}
	if !endArgs.End() {
		return nil, endArgs.Error("endgeneration takes no arguments", endArgs.Current())
	}
	g.wrapper = wrapper
	return g, nil
}

// testSequence is Jinja2's sequence: anything with a length and items
// (strings, lists, mappings).
func testSequence(_ *exec.Context, in *exec.Value, _ *exec.VarArgs) (bool, error) {
	return !isNone(in) && (in.IsString() || in.IsList() || in.IsDict()), nil
}

// testIterable is Jinja2's iterable; None is not.
func testIterable(_ *exec.Context, in *exec.Value, _ *exec.VarArgs) (bool, error) {
	return !isNone(in) && (in.IsString() || in.IsList() || in.IsDict()), nil
}

// testNone is Jinja2's none: true for None only, not for an undefined value.
func testNone(_ *exec.Context, in *exec.Value, _ *exec.VarArgs) (bool, error) {
	return isNone(in), nil
}

// testFalse and testTrue are Jinja2's: the value is the boolean itself, not
// merely falsy or truthy.
func testFalse(_ *exec.Context, in *exec.Value, _ *exec.VarArgs) (bool, error) {
	return in.IsBool() && !in.Bool(), nil
}

func testTrue(_ *exec.Context, in *exec.Value, _ *exec.VarArgs) (bool, error) {
	return in.IsBool() && in.Bool(), nil
}
