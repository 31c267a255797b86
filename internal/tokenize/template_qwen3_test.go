package tokenize

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/actloop/actloop/internal/chattemplate"
)

// qwen3Golden is one conversation of testdata/qwen3/golden.json, rendered
// by Qwen3's chat template with Jinja2 (see gen.py there).
type qwen3Golden struct {
	Name     string   `json:"name"`
	Tools    []string `json:"tools"` // JSON objects, as written
	Messages []struct {
		Role      string `json:"role"`
		Content   string `json:"content"`
		Generated string `json:"generated"` // assistant: the text the model wrote
		ToolCalls []struct {
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	Append  []string `json:"append"` // modes whose turn-by-turn ids equal the rendering
	Renders []struct {
		Thinking         bool   `json:"thinking"`
		GenerationPrompt bool   `json:"generation_prompt"`
		Text             string `json:"text"`
	} `json:"renders"`
	Prompts []struct {
		Thinking bool   `json:"thinking"`
		Index    int    `json:"index"`
		Text     string `json:"text"`
	} `json:"prompts"`
}

func qwen3Goldens(t testing.TB) []qwen3Golden {
	t.Helper()
	data, err := os.ReadFile("testdata/qwen3/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var gs []qwen3Golden
	if err := json.Unmarshal(data, &gs); err != nil {
		t.Fatal(err)
	}
	if len(gs) < 30 {
		t.Fatalf("only %d conversations", len(gs))
	}
	return gs
}

func (g qwen3Golden) msgs() []Msg {
	msgs := make([]Msg, len(g.Messages))
	for i, m := range g.Messages {
		msgs[i] = Msg{Role: m.Role, Content: m.Content}
		for _, c := range m.ToolCalls {
			msgs[i].ToolCalls = append(msgs[i].ToolCalls, ToolCall{Name: c.Function.Name, Arguments: c.Function.Arguments})
		}
	}
	return msgs
}

func (g qwen3Golden) tools() []json.RawMessage {
	var tools []json.RawMessage
	for _, t := range g.Tools {
		tools = append(tools, json.RawMessage(t))
	}
	return tools
}

func qwen3Modes(t testing.TB) map[bool]Qwen3 {
	t.Helper()
	modes := map[bool]Qwen3{}
	for _, thinking := range []bool{true, false} {
		q, err := NewQwen3(qwen(t), thinking)
		if err != nil {
			t.Fatal(err)
		}
		modes[thinking] = q
	}
	return modes
}

func modeName(thinking bool) string {
	if thinking {
		return "thinking"
	}
	return "nothink"
}

// Render and RenderTools are the Jinja2 rendering of Qwen3's template,
// character for character.
func TestQwen3RendersAsJinja(t *testing.T) {
	modes := qwen3Modes(t)
	for _, g := range qwen3Goldens(t) {
		for _, r := range g.Renders {
			q := modes[r.Thinking]
			got, err := q.RenderTools(g.msgs(), g.tools(), r.GenerationPrompt)
			if err != nil {
				t.Fatalf("%s: %v", g.Name, err)
			}
			if got != r.Text {
				t.Errorf("%s (%s, generation prompt %v): %s", g.Name, modeName(r.Thinking), r.GenerationPrompt, firstDiff(got, r.Text))
			}
			if len(g.Tools) == 0 {
				if got := q.Render(g.msgs(), r.GenerationPrompt); got != r.Text {
					t.Errorf("%s: Render differs from RenderTools without tools", g.Name)
				}
			}
		}
	}
}

// play appends g turn by turn as a worker does: the system message (with
// the tools), each user message, each run of tool results as one turn,
// and for each assistant message the generation prompt, the ids of the
// text the model wrote with the stop token, and the end of the turn. It
// returns the ids and, by message index, the prompt of each assistant turn.
func (g qwen3Golden) play(t testing.TB, q Qwen3, generationPrompt bool) ([]int32, map[int][]int32) {
	t.Helper()
	ids := q.Begin()
	msgs := g.Messages
	first := 0
	if len(g.Tools) > 0 {
		var system string
		if len(msgs) > 0 && msgs[0].Role == "system" {
			system, first = msgs[0].Content, 1
		}
		x, err := q.SystemTools(system, g.tools())
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, x...)
	}
	prompts := map[int][]int32{}
	for i := first; i < len(msgs); i++ {
		switch m := msgs[i]; m.Role {
		case "assistant":
			ids = append(ids, q.GenerationPrompt()...)
			prompts[i] = slices.Clone(ids)
			gen := append(q.Tok.Encode(m.Generated), q.ImEnd)
			ids = append(ids, gen...)
			ids = append(ids, q.CloseTurn(gen)...)
		case "tool":
			results := []string{m.Content}
			for i+1 < len(msgs) && msgs[i+1].Role == "tool" {
				i++
				results = append(results, msgs[i].Content)
			}
			ids = append(ids, q.ToolResults(results...)...)
		default:
			ids = append(ids, q.Message(m.Role, m.Content)...)
		}
	}
	if generationPrompt {
		ids = append(ids, q.GenerationPrompt()...)
	}
	return ids, prompts
}

// Where the template renders every assistant turn as it was generated (the
// conversations' "append" modes: openings, one reply, Qwen3's tool loop in
// thinking mode), the ids appended turn by turn are the whole Jinja2
// rendering tokenized, and each turn's prompt is the rendering of the
// conversation before it; elsewhere they differ, as Qwen3's doc says.
func TestQwen3DeltasEqualJinja(t *testing.T) {
	modes := qwen3Modes(t)
	tok := qwen(t)
	equalWithTools := 0
	for _, g := range qwen3Goldens(t) {
		for thinking, q := range modes {
			name := g.Name + "/" + modeName(thinking)
			gp := g.Messages[len(g.Messages)-1].Role != "assistant"
			var text string
			for _, r := range g.Renders {
				if r.Thinking == thinking && r.GenerationPrompt == gp {
					text = r.Text
				}
			}
			ids, prompts := g.play(t, q, gp)
			want := tok.Encode(text)
			if !slices.Contains(g.Append, modeName(thinking)) {
				if slices.Equal(ids, want) {
					t.Errorf("%s: the turns appended equal the rendering; add the mode to its append list", name)
				}
				continue
			}
			if !slices.Equal(ids, want) {
				t.Errorf("%s: turns appended differ from the rendering: %s", name, firstDiff(tok.Decode(ids), text))
				continue
			}
			for _, p := range g.Prompts {
				if p.Thinking != thinking {
					continue
				}
				if got := prompts[p.Index]; !slices.Equal(got, tok.Encode(p.Text)) {
					t.Errorf("%s: prompt of message %d: %s", name, p.Index, firstDiff(tok.Decode(got), p.Text))
				}
			}
			if len(g.Tools) > 0 && len(prompts) > 1 {
				equalWithTools++
			}
		}
	}
	if equalWithTools < 3 {
		t.Fatalf("only %d multi-turn tool conversations checked turn by turn", equalWithTools)
	}
}

// What a trajectory holds where Qwen3's template re-renders differently:
// every turn as it was generated, think blocks and the empty block of a
// non-thinking prompt included.
func TestQwen3TrajectoryKeepsTurns(t *testing.T) {
	modes := qwen3Modes(t)
	tests := []struct {
		name       string
		thinking   bool
		reply      string // the first turn as generated
		trajectory string
		render     string
	}{
		{"thinking turn before a user message", true, "<think>\nA\n</think>\n\nx",
			"<|im_start|>user\ntask<|im_end|>\n<|im_start|>assistant\n<think>\nA\n</think>\n\nx<|im_end|>\n" +
				"<|im_start|>user\nobs<|im_end|>\n<|im_start|>assistant\n",
			"<|im_start|>user\ntask<|im_end|>\n<|im_start|>assistant\nx<|im_end|>\n" +
				"<|im_start|>user\nobs<|im_end|>\n<|im_start|>assistant\n"},
		{"non-thinking turn", false, "x",
			"<|im_start|>user\ntask<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nx<|im_end|>\n" +
				"<|im_start|>user\nobs<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
			"<|im_start|>user\ntask<|im_end|>\n<|im_start|>assistant\nx<|im_end|>\n" +
				"<|im_start|>user\nobs<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := modes[tt.thinking]
			ids := slices.Concat(q.Message("user", "task"), q.GenerationPrompt())
			gen := append(q.Tok.Encode(tt.reply), q.ImEnd)
			ids = slices.Concat(ids, gen, q.CloseTurn(gen), q.Message("user", "obs"), q.GenerationPrompt())
			if got := q.Tok.Decode(ids); got != tt.trajectory {
				t.Errorf("trajectory %q", got)
			}
			msgs := []Msg{{Role: "user", Content: "task"}, {Role: "assistant", Content: tt.reply}, {Role: "user", Content: "obs"}}
			if got := q.Render(msgs, true); got != tt.render {
				t.Errorf("Render = %q", got)
			}
		})
	}
}

// A trajectory at the sizes agents reach (a hundred tool turns, ~100k
// tokens of observations) still appends to exactly its rendering.
func TestQwen3ToolLoopAtSize(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	q := qwen3Modes(t)[true]
	tok := q.Tok
	tools := []json.RawMessage{json.RawMessage(`{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}`)}
	msgs := []Msg{{Role: "system", Content: "You are an agent."}, {Role: "user", Content: "Fix the bug."}}
	ids, err := q.SystemTools("You are an agent.", tools)
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, q.Message("user", "Fix the bug.")...)
	for turn := range 100 {
		args := fmt.Sprintf(`{"command": "sed -n '%d,%dp' parse.go"}`, turn*40, turn*40+40)
		content := fmt.Sprintf("<think>\nTurn %d: read the next part.\n</think>\n\nReading.", turn)
		gen := append(tok.Encode(content+"\n<tool_call>\n{\"name\": \"bash\", \"arguments\": "+args+"}\n</tool_call>"), q.ImEnd)
		ids = slices.Concat(ids, q.GenerationPrompt(), gen, q.CloseTurn(gen))
		var out strings.Builder
		for line := range 120 {
			fmt.Fprintf(&out, "%5d\tfunc f%d_%d(s string) (int, error) { return strconv.Atoi(s[%d:]) }\n", turn*120+line, turn, line, line%7)
		}
		ids = append(ids, q.ToolResults(out.String())...)
		msgs = append(msgs, Msg{Role: "assistant", Content: content, ToolCalls: []ToolCall{{Name: "bash", Arguments: args}}},
			Msg{Role: "tool", Content: out.String()})
	}
	ids = append(ids, q.GenerationPrompt()...)
	text, err := q.RenderTools(msgs, tools, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := tok.Encode(text); !slices.Equal(ids, want) {
		t.Fatalf("%d ids appended, %d in the rendering; they differ", len(ids), len(want))
	}
	if len(ids) < 100_000 {
		t.Fatalf("only %d tokens", len(ids))
	}
}

func TestQwen3ToolErrors(t *testing.T) {
	q := qwen3Modes(t)[true]
	for _, bad := range []string{`{`, `{"a": 1, "a": 2}`, `{} {}`, ``} {
		if _, err := q.SystemTools("s", []json.RawMessage{json.RawMessage(bad)}); err == nil {
			t.Errorf("SystemTools accepted tool %q", bad)
		}
		if _, err := q.RenderTools(nil, []json.RawMessage{json.RawMessage(bad)}, true); err == nil {
			t.Errorf("RenderTools accepted tool %q", bad)
		}
	}
	// No tools: the system message alone, or nothing.
	if got, want := q.Tok.Decode(mustIDs(q.SystemTools("s", nil))), "<|im_start|>system\ns<|im_end|>\n"; got != want {
		t.Errorf("SystemTools(s, nil) = %q", got)
	}
	if got := mustIDs(q.SystemTools("", nil)); len(got) != 0 {
		t.Errorf("SystemTools(\"\", nil) = %v", got)
	}
}

// firstDiff shows where got and want part.
func firstDiff(got, want string) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	from := max(0, i-40)
	return fmt.Sprintf("at byte %d:\n got …%q\nwant …%q", i, got[from:min(len(got), i+40)], want[from:min(len(want), i+40)])
}

func mustIDs(ids []int32, err error) []int32 {
	if err != nil {
		panic(err)
	}
	return ids
}

func TestPyJSON(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"b":1,"a":[true,false,null,"x"]}`, `{"b": 1, "a": [true, false, null, "x"]}`},
		{`{"s":"\u00e9\n\t\"\\\/\u0000\u001f\u007f\u2028<>&"}`, "{\"s\": \"é\\n\\t\\\"\\\\/\\u0000\\u001f\u007f\u2028<>&\"}"},
		{`[1.0, 1e2, 1E-5, 0.0001, 1e16, 1e15, -0, -0.0, 12345678901234567890, 1e400, -1e400, 5e-324]`,
			`[1.0, 100.0, 1e-05, 0.0001, 1e+16, 1000000000000000.0, 0, -0.0, 12345678901234567890, Infinity, -Infinity, 5e-324]`},
		{" {\n} ", `{}`},
		{`[[],{}]`, `[[], {}]`},
	}
	for _, tt := range tests {
		if got, err := chattemplate.PyDumps([]byte(tt.in)); err != nil || got != tt.want {
			t.Errorf("chattemplate.PyDumps(%s) = %s, %v; want %s", tt.in, got, err, tt.want)
		}
	}
}

// FuzzPyJSON checks that any JSON value without repeated keys is written
// as JSON of the same value, and that writing it again changes nothing.
func FuzzPyJSON(f *testing.F) {
	for _, g := range qwen3Goldens(f) {
		for _, tool := range g.Tools {
			f.Add([]byte(tool))
		}
	}
	f.Add([]byte(`{"a": [1, -0.0, 1e-7, "\u2028"]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var in any
		if json.Unmarshal(data, &in) != nil {
			return
		}
		out, err := chattemplate.PyDumps(data)
		if err != nil {
			if strings.Contains(err.Error(), "repeated") {
				return
			}
			t.Fatalf("chattemplate.PyDumps(%q): %v", data, err)
		}
		var back any
		if err := json.Unmarshal([]byte(out), &back); err != nil {
			t.Fatalf("chattemplate.PyDumps(%q) = %q, not JSON: %v", data, out, err)
		}
		if !reflect.DeepEqual(back, in) { // numbers compare with ==: -0 is 0, as Python reads it
			t.Fatalf("chattemplate.PyDumps(%q) = %q: value changed", data, out)
		}
		if again, err := chattemplate.PyDumps([]byte(out)); err != nil || again != out {
			t.Fatalf("chattemplate.PyDumps(%q) = %q, then %q, %v", data, out, again, err)
		}
	})
}
