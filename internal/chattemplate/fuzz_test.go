package chattemplate

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/nikolalohinski/gonja/v2/tokens"
)

// fuzzSeeds are the committed models' templates and a few constructs.
func fuzzSeeds(tb testing.TB) []string {
	tb.Helper()
	seeds := []string{
		`{{ (a if b else c) ~ d[0] }}{% set x = 1 if y in z else 2 %}{% for m in ms if m in n %}{{ m }}{% endfor %}`,
		`{{ messages | tojson(indent=2) }}{{ "a".split() }}{{ x.strip("\n") }}`,
		`{% if %}`, `{{`, `{% for %}`, `{{ a if }}`, `{{ ( }}`, `{{ 'x' in }}`,
	}
	for _, m := range goldenModels {
		data, err := os.ReadFile(filepath.Join("testdata", "models", m, ConfigFile))
		if err != nil {
			tb.Fatal(err)
		}
		var c struct {
			ChatTemplate string `json:"chat_template"`
		}
		if err := json.Unmarshal(data, &c); err != nil {
			tb.Fatal(err)
		}
		seeds = append(seeds, c.ChatTemplate)
	}
	return seeds
}

// FuzzRender renders arbitrary template text over arbitrary messages: it
// renders or errors, never panics, and a rewritten token stream keeps every
// original token but the conditional expressions' if and else.
func FuzzRender(f *testing.F) {
	msgs := `[{"role": "system", "content": "s"}, {"role": "user", "content": "u <|im_end|> 日本"}, {"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]}, {"role": "tool", "content": "r"}]`
	for _, s := range fuzzSeeds(f) {
		f.Add(s, msgs, true)
	}
	f.Fuzz(func(t *testing.T, src, messages string, gen bool) {
		var list []json.RawMessage
		in := Input{AddGenerationPrompt: gen, Kwargs: map[string]any{"enable_thinking": gen}}
		if json.Unmarshal([]byte(messages), &list) == nil {
			for _, m := range list {
				in.Messages = append(in.Messages, m)
			}
		}
		_, _ = New(src, map[string]string{"bos_token": "<s>", "eos_token": "</s>"}).Render(in)

		toks := lexAll(src)
		out := rewriteIn(rewriteTernaries(toks))
		kept := map[*tokens.Token]bool{}
		for _, tk := range out {
			kept[tk] = true
		}
		for _, tk := range toks {
			if tk.Type == tokens.Name && (tk.Val == "if" || tk.Val == "else") {
				continue
			}
			if !kept[tk] {
				t.Fatalf("rewrite dropped %v", tk)
			}
		}
	})
}

func lexAll(src string) []*tokens.Token {
	s := tokens.LexAll(src, jinjaConfig())
	var toks []*tokens.Token
	for {
		toks = append(toks, s.Current())
		if s.End() {
			return toks
		}
		s.Next()
	}
}

// FuzzParseConfig loads arbitrary tokenizer_config.json contents: it
// returns a template or an error, and a template renders or errors.
func FuzzParseConfig(f *testing.F) {
	for _, m := range goldenModels {
		data, err := os.ReadFile(filepath.Join("testdata", "models", m, ConfigFile))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, "")
	}
	f.Add([]byte(namedConfig), "tool_use")
	f.Add([]byte(`{"chat_template": [{"name": "default", "template": null}]}`), "")
	f.Add([]byte(`{"chat_template": "x", "bos_token": {"content": 1}}`), "default")
	f.Fuzz(func(t *testing.T, data []byte, name string) {
		tpl, err := ParseConfig(data, name)
		if err != nil {
			return
		}
		_ = tpl.Names()
		_ = tpl.SpecialTokens()
		_, _ = tpl.Render(Input{Messages: []any{msg("user", "hi")}, Tools: []any{map[string]any{"type": "function"}}})
	})
}

// FuzzJSONRoundTrip decodes JSON keeping key order and encodes it as
// Python's json.dumps does: the result means the same as the input.
func FuzzJSONRoundTrip(f *testing.F) {
	for _, s := range []string{
		`{"b": 1, "a": [1, 2.5, -0.0, 1e300, null, true, "é\u0001\"\\"]}`,
		`"\ud83d\udc4b"`, `12345678901234567890`, `[]`, `{}`, `{"a": {"a": {"a": []}}}`, `{"a": 1, "a": 2}`,
	} {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, data []byte, ascii bool) {
		v, err := decodeOrdered(data)
		if err != nil {
			return
		}
		out, err := pyJSON(v, jsonOptions{itemSep: ", ", keySep: ": ", ensureASCII: ascii})
		if err != nil {
			t.Fatalf("pyJSON: %v", err)
		}
		var want, got any
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("decodeOrdered accepted what encoding/json rejects: %v", err)
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			if strings.Contains(out, "Infinity") || strings.Contains(out, "NaN") {
				return // json.dumps writes out-of-range floats so
			}
			t.Fatalf("pyJSON wrote invalid JSON %q: %v", out, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("round trip of %q gave %q", data, out)
		}
	})
}
