package tokenize

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
)

// qwenWithLlama3Specials is the Qwen tokenizer with Llama 3's special
// tokens added, to run the Llama 3 template on a real BPE vocabulary.
func qwenWithLlama3Specials(t testing.TB) *HF {
	t.Helper()
	tok, err := llama3Once()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

var llama3Once = sync.OnceValues(func() (*HF, error) {
	zr, err := gzip.NewReader(bytes.NewReader(qwen3JSON))
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	added := m["added_tokens"].([]any)
	for i, s := range []string{"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"} {
		added = append(added, map[string]any{"id": 160000 + i, "content": s, "special": true})
	}
	m["added_tokens"] = added
	if data, err = json.Marshal(m); err != nil {
		return nil, err
	}
	return ParseHF(data)
})

func templates(t *testing.T) map[string]ChatTemplate {
	t.Helper()
	q := qwen(t)
	chatml, err := NewChatML(q)
	if err != nil {
		t.Fatal(err)
	}
	llama, err := NewLlama3(qwenWithLlama3Specials(t))
	if err != nil {
		t.Fatal(err)
	}
	return map[string]ChatTemplate{"chatml/qwen": chatml, "llama3": llama, "chatml/bytes": NewByteChatML()}
}

// turn is one message of a scripted conversation; an assistant turn's ids
// are what the server generated (gen), kept as they are.
type turn struct {
	role, content string
	gen           []int32 // assistant turns only; nil: the tokenizer's encoding of content plus the stop token
}

// play appends a conversation turn by turn as the workers do and returns
// its ids, loss mask, the messages as stored, and the ids each generation
// was prompted with.
func play(tmpl ChatTemplate, turns []turn) (ids []int32, mask []int8, msgs []Msg, prompts [][]int32) {
	add := func(x []int32, m int8) {
		ids = append(ids, x...)
		for range x {
			mask = append(mask, m)
		}
	}
	add(tmpl.Begin(), 0)
	for _, tr := range turns {
		if tr.role != "assistant" {
			add(tmpl.Message(tr.role, tr.content), 0)
			msgs = append(msgs, Msg{Role: tr.role, Content: tr.content})
			if tr.role == "user" {
				add(tmpl.GenerationPrompt(), 0)
			}
			continue
		}
		prompts = append(prompts, slices.Clone(ids))
		gen := tr.gen
		if gen == nil {
			gen = append(tmpl.Tokenizer().Encode(tr.content), tmpl.StopTokenIDs()[0])
		}
		add(gen, 1)
		add(tmpl.CloseTurn(gen), 0)
		msgs = append(msgs, Msg{Role: "assistant", Content: tmpl.Tokenizer().Decode(TrimStop(gen, tmpl.StopTokenIDs()))})
	}
	return ids, mask, msgs, prompts
}

var conversation = []turn{
	{role: "system", content: "You are a helpful assistant that can interact with a computer.\n"},
	{role: "user", content: "Please solve this issue: the parser drops the last line.\n\n  Steps:\n1. run `go test`\n"},
	{role: "assistant", content: "THOUGHT: Let me look at the parser first.\n\n```bash\nsed -n '1,40p' parse.go\n```"},
	{role: "user", content: "<returncode>0</returncode>\n<output>\npackage parse\n\n\tfunc Parse(s string) {}  \n</output>\n\n"},
	{role: "assistant", content: "THOUGHT: 修正します — fix it, 3 × 4 = 12.\n\n```bash\necho done\n```\n"},
	{role: "user", content: "   leading spaces, trailing newlines\n\n\n"},
	{role: "assistant", content: "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"},
}

// The invariant: the ids a conversation accumulates turn by turn are the
// ids of rendering and tokenizing it whole, and every generation's prompt
// is the whole rendering of the conversation before it.
func TestDeltasEqualWhole(t *testing.T) {
	for name, tmpl := range templates(t) {
		t.Run(name, func(t *testing.T) {
			tok := tmpl.Tokenizer()
			ids, mask, msgs, prompts := play(tmpl, conversation)
			if whole := tok.Encode(tmpl.Render(msgs, false)); !slices.Equal(ids, whole) {
				t.Fatalf("deltas differ from the whole rendering:\n%q\n%q", tok.Decode(ids), tok.Decode(whole))
			}
			k := 0
			for i, m := range msgs {
				if m.Role != "assistant" {
					continue
				}
				if want := tok.Encode(tmpl.Render(msgs[:i], true)); !slices.Equal(prompts[k], want) {
					t.Fatalf("prompt %d differs from the rendering:\n%q\n%q", k, tok.Decode(prompts[k]), tok.Decode(want))
				}
				k++
			}
			if n := countOnes(mask); n == 0 || len(mask) != len(ids) {
				t.Fatalf("mask: %d generated of %d", n, len(mask))
			}
		})
	}
}

func countOnes(mask []int8) int {
	n := 0
	for _, m := range mask {
		n += int(m)
	}
	return n
}

// Generated ids stay as the server returned them, even when they are not
// the tokenizer's own encoding of their text, and a turn cut at the length
// limit is closed by the template.
func TestGeneratedKeptVerbatim(t *testing.T) {
	for name, tmpl := range templates(t) {
		t.Run(name, func(t *testing.T) {
			tok := tmpl.Tokenizer()
			var odd []int32 // "THOUGHT: ok" one byte at a time: valid, but not how the tokenizer would write it
			for _, c := range []byte("THOUGHT: ok") {
				odd = append(odd, tok.Encode(string(c))...)
			}
			cut := tok.Encode("THOUGHT: this reply is cut at the len") // no stop token
			turns := []turn{conversation[0], conversation[1], {role: "assistant", gen: append(slices.Clone(odd), tmpl.StopTokenIDs()[0])},
				conversation[3], {role: "assistant", gen: cut}, conversation[5]}
			ids, mask, msgs, prompts := play(tmpl, turns)
			var gen []int32
			for i, m := range mask {
				if m == 1 {
					gen = append(gen, ids[i])
				}
			}
			want := slices.Concat(odd, tmpl.StopTokenIDs()[:1], cut)
			if !slices.Equal(gen, want) {
				t.Fatalf("generated ids changed: %v, want %v", gen, want)
			}
			if msgs[2].Content != "THOUGHT: ok" || msgs[4].Content != "THOUGHT: this reply is cut at the len" {
				t.Fatalf("messages %q, %q", msgs[2].Content, msgs[4].Content)
			}
			// Everything but the generated text is the whole rendering's.
			var kept []int32
			for i := 0; i < len(ids); i++ {
				if mask[i] == 1 && !slices.Contains(tmpl.StopTokenIDs(), ids[i]) {
					continue
				}
				kept = append(kept, ids[i])
			}
			blank := slices.Clone(msgs)
			for i := range blank {
				if blank[i].Role == "assistant" {
					blank[i].Content = ""
				}
			}
			if want := tok.Encode(tmpl.Render(blank, true)); !slices.Equal(kept, want) {
				t.Fatalf("ids around the generated ones differ from the rendering:\n%q\n%q", tok.Decode(kept), tok.Decode(want))
			}
			if len(prompts) != 2 || !slices.Equal(prompts[1], ids[:len(prompts[1])]) {
				t.Fatal("a prompt is not a prefix of the trajectory")
			}
		})
	}
}

func TestLlama3Layout(t *testing.T) {
	l, err := NewLlama3(qwenWithLlama3Specials(t))
	if err != nil {
		t.Fatal(err)
	}
	got := l.Render([]Msg{{Role: "system", Content: " sys \n"}, {Role: "user", Content: "hi"}}, true)
	want := "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nsys<|eot_id|>" +
		"<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
	if got != want {
		t.Fatalf("Render = %q", got)
	}
	if c := l.CloseTurn([]int32{1, l.EOT}); len(c) != 0 {
		t.Fatalf("CloseTurn after <|eot_id|> = %v", c)
	}
	if c := l.CloseTurn([]int32{1}); !slices.Equal(c, []int32{l.EOT}) {
		t.Fatalf("CloseTurn of a cut turn = %v", c)
	}
}

func TestOpen(t *testing.T) {
	open := func(tokenizer, template string) (ChatTemplate, error) {
		return Chat{Tokenizer: tokenizer, ChatTemplate: template}.Template()
	}
	tmpl, err := open("qwen", "chatml")
	if err != nil {
		t.Fatal(err)
	}
	if got := tmpl.StopTokenIDs(); !slices.Equal(got, []int32{151645}) {
		t.Fatalf("StopTokenIDs = %v", got)
	}
	for _, name := range []string{"chatml", "qwen3", "qwen3-nothink"} {
		if _, err := open("bytes", name); err != nil {
			t.Fatal(err)
		}
	}
	if tmpl, err := open("qwen", "qwen3"); err != nil {
		t.Fatal(err)
	} else if _, ok := tmpl.(ToolTemplate); !ok {
		t.Fatal("qwen3 is not a ToolTemplate")
	}
	if _, err := open("bytes", "jinja"); !errors.Is(err, ErrUnknownTemplate) {
		t.Fatalf("unknown template: %v", err)
	}
	if _, err := open("bytes", "llama3"); err == nil || !strings.Contains(err.Error(), "<|begin_of_text|>") {
		t.Fatalf("llama3 over bytes: %v", err)
	}
	if _, err := open("testdata/missing.json", "chatml"); err == nil {
		t.Fatal("a missing tokenizer file opened")
	}
	if tmpl, err := open("", ""); err != nil {
		t.Fatal(err)
	} else if _, ok := tmpl.(ChatML); !ok { // the defaults: qwen and chatml
		t.Fatalf("no names: %T", tmpl)
	}
	if _, err := OpenTokenizer(""); err == nil {
		t.Fatal("an empty tokenizer name opened")
	}
	tiny, err := ParseHF(tinyJSON(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewChatML(tiny); err == nil {
		t.Fatal("chatml over a tokenizer without <|im_start|>")
	}
}
