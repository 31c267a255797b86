package agent

import (
	"fmt"
	"strings"
	"sync"

	"github.com/nikolalohinski/gonja/v2"
	"github.com/nikolalohinski/gonja/v2/builtins"
	gonjaconfig "github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"
)

// templateName is the only name the loader knows, so {% include %},
// {% import %} and {% extends %} cannot reach a file.
const templateName = "/template"

// jinjaConfig is Jinja2's Environment() default as mini-swe-agent uses it
// (jinja2.Template(text, undefined=StrictUndefined)): no autoescape, no
// trim_blocks or lstrip_blocks, the template's final newline dropped, and an
// undefined variable or attribute an error.
func jinjaConfig() *gonjaconfig.Config {
	c := gonjaconfig.New()
	c.StrictUndefined = true
	c.KeepTrailingNewline = false
	return c
}

// jinjaEnvironment is gonja's default environment with one test changed:
// none is true for pyNone (a YAML null) as for nil.
var jinjaEnvironment = sync.OnceValue(func() *exec.Environment {
	tests := exec.NewTestSet(map[string]exec.TestFunction{}).Update(builtins.Tests)
	_ = tests.Replace("none", func(_ *exec.Context, in *exec.Value, _ *exec.VarArgs) (bool, error) {
		_, isNone := in.Interface().(pyNone)
		return in.IsNil() || isNone, nil
	})
	env := *gonja.DefaultEnvironment
	env.Tests = tests
	return &env
})

// compile parses text as a Jinja template; errors name the field.
func compile(field, text string) (t *exec.Template, err error) {
	defer func() {
		if r := recover(); r != nil {
			t, err = nil, fmt.Errorf("%s: template engine failed: %v", field, r)
		}
	}()
	loader, err := loaders.NewMemoryLoader(map[string]string{templateName: text})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	t, err = exec.NewTemplate(templateName, jinjaConfig(), loader, jinjaEnvironment())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	return t, nil
}

// render parses and executes text with vars. It parses on every call: a
// step takes seconds, parsing microseconds, and a parsed template is then
// never shared between goroutines. A panic inside the engine becomes an
// error, so a template cannot take a worker down.
func render(field, text string, vars map[string]any) (out string, err error) {
	t, err := compile(field, text)
	if err != nil {
		return "", err
	}
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("%s: template engine failed: %v", field, r)
		}
	}()
	var b strings.Builder
	if err := t.Execute(&b, exec.NewContext(vars)); err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	return b.String(), nil
}
