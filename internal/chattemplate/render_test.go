package chattemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func render(tb testing.TB, src string, in Input) (string, error) {
	tb.Helper()
	return New(src, map[string]string{"eos_token": "</s>"}).Render(in)
}

func TestRenderErrors(t *testing.T) {
	tests := []struct {
		name    string
		src     string
		in      Input
		wantErr error
		raised  string
	}{
		{name: "raise_exception", src: `{{ raise_exception("roles must alternate") }}`, raised: "roles must alternate"},
		{name: "raise inside a loop", src: `{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('no tools: ' ~ loop.index) }}{% endif %}{% endfor %}`,
			in: Input{Messages: []any{msg("user", "a"), msg("tool", "b")}}, raised: "no tools: 2"},
		{name: "include", src: `{% include "x" %}`, wantErr: ErrUnsupported},
		{name: "extends", src: `{% extends "x" %}`, wantErr: ErrUnsupported},
		{name: "import", src: `{% import "x" as y %}`, wantErr: ErrUnsupported},
		{name: "strftime directive", src: `{{ strftime_now("%c") }}`, wantErr: ErrUnsupported},
		{name: "printf conversion", src: `{{ "%q" % 1 }}`, wantErr: ErrUnsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := render(t, tt.src, tt.in)
			if tt.raised != "" {
				var re *RaiseError
				if !errors.As(err, &re) || re.Message != tt.raised {
					t.Fatalf("Render = %q, %v; want raise_exception(%q)", out, err, tt.raised)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Render = %q, %v; want %v", out, err, tt.wantErr)
			}
		})
	}
}

func TestRenderParseErrorIsShort(t *testing.T) {
	src := strings.Repeat("x", 10000) + "{% if %}"
	_, err := render(t, src, Input{})
	if err == nil {
		t.Fatal("no error")
	}
	if len(err.Error()) > 500 {
		t.Errorf("error quotes the template: %d bytes", len(err.Error()))
	}
}

func TestRenderInputs(t *testing.T) {
	tests := []struct {
		name string
		src  string
		in   Input
		want string
	}{
		{
			name: "raw JSON keeps key order",
			src:  `{{ messages[0] | tojson }}`,
			in:   Input{Messages: []any{json.RawMessage(`{"role": "user", "content": "x", "b": 1, "a": 2.0}`)}},
			want: `{"role": "user", "content": "x", "b": 1, "a": 2.0}`,
		},
		{
			name: "Go map keys sorted",
			src:  `{{ messages[0] | tojson }}`,
			in:   Input{Messages: []any{map[string]any{"role": "user", "content": "x", "b": int64(1)}}},
			want: `{"b": 1, "content": "x", "role": "user"}`,
		},
		{
			name: "tools and documents absent are None",
			src:  `{{ tools }} {{ tools is none }} {{ documents is defined }} {{ add_generation_prompt }}`,
			want: `None True True False`,
		},
		{
			name: "kwargs override",
			src:  `{{ eos_token }} {{ enable_thinking }} {{ add_generation_prompt }}`,
			in:   Input{AddGenerationPrompt: true, Kwargs: map[string]any{"eos_token": "<e>", "enable_thinking": false}},
			want: `<e> False True`,
		},
		{
			name: "arguments as object or string",
			src:  `{% for m in messages %}{% for tc in m.tool_calls %}{{ tc.function.arguments is string }}:{{ tc.function.arguments | tojson }};{% endfor %}{% endfor %}`,
			in: Input{Messages: []any{
				json.RawMessage(`{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {"x": [1, "é"]}}}, {"function": {"name": "f", "arguments": "{\"x\": 1}"}}]}`),
			}},
			want: `False:{"x": [1, "é"]};True:"{\"x\": 1}";`,
		},
		{
			name: "null content prints None",
			src:  `[{{ messages[0].content }}][{{ messages[0].missing }}]{{ messages[0].content is none }}`,
			in:   Input{Messages: []any{json.RawMessage(`{"role": "assistant", "content": null}`)}},
			want: `[None][]True`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := render(t, tt.src, tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("Render = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestRenderRejectsInput(t *testing.T) {
	for name, in := range map[string]Input{
		"struct":   {Messages: []any{struct{ A int }{1}}},
		"bad JSON": {Messages: []any{json.RawMessage(`{"role":`)}},
		"func":     {Kwargs: map[string]any{"f": func() {}}},
		"deep":     {Messages: []any{json.RawMessage(strings.Repeat("[", maxDepth+2) + strings.Repeat("]", maxDepth+2))}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := render(t, "x", in); err == nil {
				t.Error("no error")
			}
		})
	}
}

func TestStrftimeNow(t *testing.T) {
	at := time.Date(2024, 7, 5, 14, 3, 9, 0, time.UTC)
	tpl := New(`{{ strftime_now("%d %b %Y|%-d %B|%H:%M:%S %p %I|%a %A|%j %y %m|%%") }}`, nil).WithClock(func() time.Time { return at })
	got, err := tpl.Render(Input{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "05 Jul 2024|5 July|14:03:09 PM 02|Fri Friday|187 24 07|%"; got != want {
		t.Errorf("strftime_now = %q, want %q", got, want)
	}
}

func TestPyFloatRepr(t *testing.T) {
	for f, want := range map[float64]string{
		0: "0.0", 1: "1.0", -2.5: "-2.5", 0.1: "0.1", 1e16: "1e+16", 1e15: "1000000000000000.0",
		1.5e-5: "1.5e-05", 0.0001: "0.0001", 123456789.125: "123456789.125", 1e100: "1e+100",
	} {
		if got := PyFloatRepr(f); got != want {
			t.Errorf("PyFloatRepr(%v) = %q, want %q", f, got, want)
		}
	}
}

// TestRenderConcurrently renders one template from many goroutines; run
// with -race.
func TestRenderConcurrently(t *testing.T) {
	tpl := loadModel(t, "qwen3")
	in := Input{Messages: []any{sysMsg, userMsg1}, AddGenerationPrompt: true}
	want, err := tpl.Render(in)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				got, err := tpl.Render(in)
				if err == nil && got != want {
					err = fmt.Errorf("got %q", got)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// longConversation is a tool-using conversation of n rounds, about 2 KiB
// of text each: 64 rounds is in the range of a 30k-token trajectory.
func longConversation(n int) []any {
	body := strings.Repeat("Línea de salida del comando — 出力 ", 40)
	msgs := []any{sysMsg, msg("user", "Fix the failing test.")}
	for i := range n {
		msgs = append(msgs,
			json.RawMessage(fmt.Sprintf(`{"role": "assistant", "content": "Step %d.", "tool_calls": [{"type": "function", "function": {"name": "bash", "arguments": {"cmd": "go test ./... -run T%d"}}}]}`, i, i)),
			msg("tool", body),
		)
	}
	return msgs
}

// TestLongTrajectory extends a long conversation turn by turn with each
// model and checks that every delta is an append.
func TestLongTrajectory(t *testing.T) {
	tools := []any{raw(`{"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}}`)}
	const rounds = 64
	conv := longConversation(rounds)
	for _, model := range []string{"qwen3", "qwen2_5", "llama3_1", "deepseek_v3"} {
		t.Run(model, func(t *testing.T) {
			tpl := loadModel(t, model)
			full, err := tpl.Render(Input{Messages: conv, Tools: tools})
			if err != nil {
				t.Fatal(err)
			}
			if len(full) < rounds*1500 {
				t.Fatalf("rendering is %d bytes, want a long one", len(full))
			}
			// Deltas of four rounds (eight messages) at a time.
			const step = 8
			text, err := tpl.Render(Input{Messages: conv[:2], Tools: tools})
			if err != nil {
				t.Fatal(err)
			}
			for i := 2; i+step <= len(conv); i += step {
				d, err := tpl.Delta(Input{Messages: conv[:i], Tools: tools}, Input{Messages: conv[:i+step], Tools: tools})
				if err != nil {
					t.Fatalf("messages %d..%d: %v", i, i+step, err)
				}
				text += d
			}
			if text != full {
				t.Errorf("concatenated deltas differ from the full rendering at byte %d", firstDiff(text, full))
			}
		})
	}
}

func BenchmarkRenderLong(b *testing.B) {
	tpl := loadModel(b, "qwen3")
	in := Input{Messages: longConversation(64), AddGenerationPrompt: true}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tpl.Render(in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParse(b *testing.B) {
	src, err := loadModel(b, "qwen3").Source(Input{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parse(src); err != nil {
			b.Fatal(err)
		}
	}
}
