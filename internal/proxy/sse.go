package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/actloop/actloop/pkg/schema"
)

// Streaming writes a whole response as the server-sent events of a
// streamed one (stream: true), since a generation step yields its reply
// whole. The events are those OpenAI's clients accumulate, in vLLM's order
// (serving_chat.py, chat_completion_stream_generator): a first
// chat.completion.chunk whose delta is {"role": "assistant", "content": ""},
// then the reasoning_content, the content and each tool call (index, id,
// type, name and all its arguments in one delta), then a chunk with an
// empty delta and the finish_reason (and the logprobs), then, with
// stream_options.include_usage, a chunk with no choices and the usage (as
// OpenAI's API reference describes include_usage: every other chunk then
// carries "usage": null), then "data: [DONE]". Each event is one
// "data: <json>\n\n"; the HTTP layer sets text/event-stream and flushes.

// chatChunk is a chat.completion.chunk (vLLM's ChatCompletionStreamResponse).
type chatChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []chatChunkChoice `json:"choices"`
	Usage   json.RawMessage   `json:"usage,omitempty"` // "null", a Usage, or left out
}

type chatChunkChoice struct {
	Index        int           `json:"index"`
	Delta        chatDelta     `json:"delta"`
	Logprobs     *ChatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
}

// chatDelta is vLLM's DeltaMessage.
type chatDelta struct {
	Role             string          `json:"role,omitempty"`
	Content          *string         `json:"content,omitempty"`
	ReasoningContent *string         `json:"reasoning_content,omitempty"`
	ToolCalls        []deltaToolCall `json:"tool_calls,omitempty"`
}

// deltaToolCall is vLLM's DeltaToolCall, whole.
type deltaToolCall struct {
	Index    int                 `json:"index"`
	ID       string              `json:"id"`
	Type     string              `json:"type"`
	Function schema.FunctionCall `json:"function"`
}

// WriteChatStream writes resp as a streamed chat completion to w; usage
// is stream_options.include_usage.
func WriteChatStream(w io.Writer, resp ChatCompletion, usage bool) error {
	if len(resp.Choices) != 1 {
		return fmt.Errorf("stream a chat completion: %d choices, want 1", len(resp.Choices))
	}
	ch := resp.Choices[0]
	nullUsage := json.RawMessage(nil)
	if usage {
		nullUsage = json.RawMessage("null")
	}
	chunk := func(d chatDelta, lp *ChatLogprobs, finish *string) chatChunk {
		return chatChunk{ID: resp.ID, Object: "chat.completion.chunk", Created: resp.Created, Model: resp.Model,
			Choices: []chatChunkChoice{{Index: ch.Index, Delta: d, Logprobs: lp, FinishReason: finish}}, Usage: nullUsage}
	}
	empty := ""
	events := []any{chunk(chatDelta{Role: ch.Message.Role, Content: &empty}, nil, nil)}
	if r := ch.Message.ReasoningContent; r != nil && *r != "" {
		events = append(events, chunk(chatDelta{ReasoningContent: r}, nil, nil))
	}
	if c := ch.Message.Content; c != nil && *c != "" {
		events = append(events, chunk(chatDelta{Content: c}, nil, nil))
	}
	for i, tc := range ch.Message.ToolCalls {
		events = append(events, chunk(chatDelta{ToolCalls: []deltaToolCall{{Index: i, ID: tc.ID, Type: tc.Type, Function: tc.Function}}}, nil, nil))
	}
	finish := ch.FinishReason
	events = append(events, chunk(chatDelta{}, ch.Logprobs, &finish))
	if usage {
		u, err := json.Marshal(resp.Usage)
		if err != nil {
			return err
		}
		events = append(events, chatChunk{ID: resp.ID, Object: "chat.completion.chunk", Created: resp.Created, Model: resp.Model,
			Choices: []chatChunkChoice{}, Usage: u})
	}
	return writeEvents(w, events)
}

// completionChunk is a streamed text_completion (vLLM's
// CompletionStreamResponse).
type completionChunk struct {
	ID      string                  `json:"id"`
	Object  string                  `json:"object"`
	Created int64                   `json:"created"`
	Model   string                  `json:"model"`
	Choices []completionChunkChoice `json:"choices"`
	Usage   json.RawMessage         `json:"usage,omitempty"`
}

type completionChunkChoice struct {
	Index        int                 `json:"index"`
	Text         string              `json:"text"`
	Logprobs     *CompletionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
}

// WriteCompletionStream writes resp as a streamed text completion to w:
// a chunk with the text (and logprobs), a chunk with an empty text and the
// finish_reason, the usage chunk when usage is set, and "data: [DONE]".
func WriteCompletionStream(w io.Writer, resp Completion, usage bool) error {
	if len(resp.Choices) != 1 {
		return fmt.Errorf("stream a text completion: %d choices, want 1", len(resp.Choices))
	}
	ch := resp.Choices[0]
	nullUsage := json.RawMessage(nil)
	if usage {
		nullUsage = json.RawMessage("null")
	}
	chunk := func(c completionChunkChoice) completionChunk {
		return completionChunk{ID: resp.ID, Object: "text_completion", Created: resp.Created, Model: resp.Model,
			Choices: []completionChunkChoice{c}, Usage: nullUsage}
	}
	finish := ch.FinishReason
	events := []any{
		chunk(completionChunkChoice{Index: ch.Index, Text: ch.Text, Logprobs: ch.Logprobs}),
		chunk(completionChunkChoice{Index: ch.Index, FinishReason: &finish}),
	}
	if usage {
		u, err := json.Marshal(resp.Usage)
		if err != nil {
			return err
		}
		events = append(events, completionChunk{ID: resp.ID, Object: "text_completion", Created: resp.Created, Model: resp.Model,
			Choices: []completionChunkChoice{}, Usage: u})
	}
	return writeEvents(w, events)
}

// WriteErrorStream writes an error to a stream whose answer has started
// (its status can no longer say it), as vLLM's servers do: an event
// holding the error body, then "data: [DONE]".
func WriteErrorStream(w io.Writer, body ErrorBody) error { return writeEvents(w, []any{body}) }

// writeEvents writes each event as "data: <json>\n\n", then "data: [DONE]".
func writeEvents(w io.Writer, events []any) error {
	var b bytes.Buffer
	for _, e := range events {
		b.Reset()
		b.WriteString("data: ")
		if err := WriteJSON(&b, e); err != nil {
			return err
		}
		b.WriteString("\n") // WriteJSON ended the line; an empty line ends the event
		if _, err := w.Write(b.Bytes()); err != nil {
			return err
		}
	}
	_, err := io.WriteString(w, "data: [DONE]\n\n")
	return err
}

// WriteJSON writes v as one line of JSON to w, with <, > and & as they
// are (encoding/json's HTML escaping would write them as \u003c…, which
// clients read alike, but which makes a reply's <tool_call> unreadable in
// logs): the encoding of a whole response as of a streamed one.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("encode %T: %w", v, err)
	}
	return nil
}
