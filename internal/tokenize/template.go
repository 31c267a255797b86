package tokenize

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Msg is one chat message, for Render.
type Msg struct {
	Role, Content string
	// ToolCalls are an assistant message's function calls, which a
	// ToolTemplate renders after its content; other templates ignore them.
	ToolCalls []ToolCall
}

// ChatTemplate renders chat messages as token ids, turn by turn, so a
// trajectory grows by appending deltas and never re-tokenizes what it holds.
//
// Every template here starts and ends each message with special tokens, and
// the tokenizer cuts its input at special tokens before any merge, so BPE
// never joins text across a message boundary: for ChatML and Llama 3 the
// deltas of a conversation are exactly the ids of its whole rendering.
// (Qwen3's template rewrites earlier assistant turns when it renders a
// whole conversation, which a trajectory does not; see Qwen3.) The one
// boundary inside a turn is where the generation prompt ends and the
// generated ids begin; those ids are the server's and are kept as they are,
// never re-tokenized (they equal the whole rendering's ids when they are
// the tokenizer's own encoding of a reply that starts with a non-space
// character).
type ChatTemplate interface {
	// Tokenizer is the tokenizer the template encodes with.
	Tokenizer() Tokenizer
	// Begin returns the ids that open a conversation, before its first
	// message (Llama 3's <|begin_of_text|>; nothing for ChatML).
	Begin() []int32
	// Message returns the ids of one whole message with its delimiters.
	Message(role, content string) []int32
	// GenerationPrompt returns the ids that open an assistant turn; they end
	// the prompt of every generation.
	GenerationPrompt() []int32
	// CloseTurn returns the ids to append after an assistant turn's generated
	// ids so the transcript is well formed (for example the end-of-turn token
	// when generation stopped at the length limit).
	CloseTurn(generated []int32) []int32
	// StopTokenIDs are the ids that end an assistant turn.
	StopTokenIDs() []int32
	// Render returns the text of a whole conversation (as a model's
	// apply_chat_template(tokenize=False) would), with the generation prompt
	// at the end when generationPrompt is set.
	Render(msgs []Msg, generationPrompt bool) string
}

// Names of the chat templates NewTemplate knows.
const (
	TemplateChatML       = "chatml"        // Qwen2.5; plain ChatML
	TemplateLlama3       = "llama3"        // Llama 3 / 3.1 / 3.2 / 3.3
	TemplateQwen3        = "qwen3"         // Qwen3's own template, thinking mode (its default)
	TemplateQwen3NoThink = "qwen3-nothink" // Qwen3's own template with enable_thinking=false
)

// TemplateNames are the names NewTemplate knows.
var TemplateNames = []string{TemplateChatML, TemplateLlama3, TemplateQwen3, TemplateQwen3NoThink}

// Names of the built-in tokenizers OpenTokenizer knows; anything else is a path.
const (
	TokenizerBytes = "bytes"
	TokenizerQwen  = "qwen"
)

// ErrUnknownTemplate reports a chat template name NewTemplate does not know.
var ErrUnknownTemplate = errors.New("unknown chat template (want chatml, llama3, qwen3 or qwen3-nothink)")

// OpenTokenizer returns the tokenizer named name: "bytes", "qwen" (the
// embedded Qwen3 tokenizer) or the path of a tokenizer.json (gzipped when
// it ends in .gz).
func OpenTokenizer(name string) (Tokenizer, error) {
	switch name {
	case "":
		return nil, errors.New("no tokenizer named (want bytes, qwen or the path of a tokenizer.json)")
	case TokenizerBytes:
		return Bytes{}, nil
	case TokenizerQwen:
		return Qwen()
	}
	return LoadHF(name)
}

// NewTemplate returns the chat template named name over tok.
func NewTemplate(name string, tok Tokenizer) (ChatTemplate, error) {
	switch name {
	case TemplateChatML:
		return NewChatML(tok)
	case TemplateLlama3:
		return NewLlama3(tok)
	case TemplateQwen3, TemplateQwen3NoThink:
		return NewQwen3(tok, name == TemplateQwen3)
	}
	return nil, fmt.Errorf("%q: %w", name, ErrUnknownTemplate)
}

// specialID returns the id of special-token text that tok encodes as one
// token.
func specialID(tok Tokenizer, text, template string) (int32, error) {
	ids := tok.Encode(text)
	if len(ids) != 1 {
		return 0, fmt.Errorf("chat template %s: the tokenizer has no %s token", template, text)
	}
	return ids[0], nil
}

// ChatML is the ChatML template of the Qwen families:
// "<|im_start|>{role}\n{content}<|im_end|>\n", with "<|im_start|>assistant\n"
// as the generation prompt. It is Qwen2.5's template for conversations
// without tools; Qwen3's own template, with its think blocks and tools, is
// Qwen3.
type ChatML struct {
	Tok   Tokenizer
	ImEnd int32 // id of <|im_end|>
}

var _ ChatTemplate = ChatML{}

// NewByteChatML returns the ChatML template over the Bytes tokenizer.
func NewByteChatML() ChatML { return ChatML{Tok: Bytes{}, ImEnd: ImEnd} }

// NewChatML returns the ChatML template over tok, which must have the
// <|im_start|> and <|im_end|> tokens.
func NewChatML(tok Tokenizer) (ChatML, error) { return newChatML(tok, TemplateChatML) }

// newChatML is NewChatML for the template named name, which errors name.
func newChatML(tok Tokenizer, name string) (ChatML, error) {
	if _, err := specialID(tok, "<|im_start|>", name); err != nil {
		return ChatML{}, err
	}
	end, err := specialID(tok, "<|im_end|>", name)
	if err != nil {
		return ChatML{}, err
	}
	return ChatML{Tok: tok, ImEnd: end}, nil
}

// Tokenizer implements ChatTemplate.
func (c ChatML) Tokenizer() Tokenizer { return c.Tok }

// Begin implements ChatTemplate.
func (c ChatML) Begin() []int32 { return nil }

// Message implements ChatTemplate.
func (c ChatML) Message(role, content string) []int32 {
	return c.Tok.Encode(c.message(role, content))
}

func (ChatML) message(role, content string) string {
	return "<|im_start|>" + role + "\n" + content + "<|im_end|>\n"
}

// GenerationPrompt implements ChatTemplate.
func (c ChatML) GenerationPrompt() []int32 { return c.Tok.Encode("<|im_start|>assistant\n") }

// CloseTurn implements ChatTemplate.
func (c ChatML) CloseTurn(generated []int32) []int32 {
	if n := len(generated); n > 0 && generated[n-1] == c.ImEnd {
		return c.Tok.Encode("\n")
	}
	return c.Tok.Encode("<|im_end|>\n")
}

// StopTokenIDs implements ChatTemplate.
func (c ChatML) StopTokenIDs() []int32 { return []int32{c.ImEnd} }

// Render implements ChatTemplate.
func (c ChatML) Render(msgs []Msg, generationPrompt bool) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString(c.message(m.Role, m.Content))
	}
	if generationPrompt {
		b.WriteString("<|im_start|>assistant\n")
	}
	return b.String()
}

// Llama3 is the Llama 3 template: "<|begin_of_text|>" once, then
// "<|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>" per
// message, and "<|start_header_id|>assistant<|end_header_id|>\n\n" as the
// generation prompt. The content of the messages actloop writes is trimmed
// of surrounding white space, as Meta's template does; an assistant
// message's content is the generated text as it is, since its ids are the
// server's.
type Llama3 struct {
	Tok Tokenizer
	EOT int32 // id of <|eot_id|>
}

var _ ChatTemplate = Llama3{}

// NewLlama3 returns the Llama 3 template over tok, which must have the
// <|begin_of_text|>, <|start_header_id|>, <|end_header_id|> and <|eot_id|>
// tokens.
func NewLlama3(tok Tokenizer) (Llama3, error) {
	for _, s := range []string{"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>"} {
		if _, err := specialID(tok, s, TemplateLlama3); err != nil {
			return Llama3{}, err
		}
	}
	eot, err := specialID(tok, "<|eot_id|>", TemplateLlama3)
	if err != nil {
		return Llama3{}, err
	}
	return Llama3{Tok: tok, EOT: eot}, nil
}

// Tokenizer implements ChatTemplate.
func (l Llama3) Tokenizer() Tokenizer { return l.Tok }

// Begin implements ChatTemplate.
func (l Llama3) Begin() []int32 { return l.Tok.Encode("<|begin_of_text|>") }

func (Llama3) message(role, content string) string {
	if role != "assistant" {
		content = strings.TrimSpace(content)
	}
	return "<|start_header_id|>" + role + "<|end_header_id|>\n\n" + content + "<|eot_id|>"
}

// Message implements ChatTemplate.
func (l Llama3) Message(role, content string) []int32 { return l.Tok.Encode(l.message(role, content)) }

// GenerationPrompt implements ChatTemplate.
func (l Llama3) GenerationPrompt() []int32 {
	return l.Tok.Encode("<|start_header_id|>assistant<|end_header_id|>\n\n")
}

// CloseTurn implements ChatTemplate.
func (l Llama3) CloseTurn(generated []int32) []int32 {
	if n := len(generated); n > 0 && generated[n-1] == l.EOT {
		return nil
	}
	return []int32{l.EOT}
}

// StopTokenIDs implements ChatTemplate.
func (l Llama3) StopTokenIDs() []int32 { return []int32{l.EOT} }

// Render implements ChatTemplate.
func (l Llama3) Render(msgs []Msg, generationPrompt bool) string {
	var b strings.Builder
	b.WriteString("<|begin_of_text|>")
	for _, m := range msgs {
		b.WriteString(l.message(m.Role, m.Content))
	}
	if generationPrompt {
		b.WriteString("<|start_header_id|>assistant<|end_header_id|>\n\n")
	}
	return b.String()
}

// TrimStop returns generated without its trailing stop token, if any.
func TrimStop(generated, stops []int32) []int32 {
	if n := len(generated); n > 0 && slices.Contains(stops, generated[n-1]) {
		return generated[:n-1]
	}
	return generated
}
