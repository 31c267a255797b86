package llm

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Request side. Field names are vLLM's (vllm/entrypoints/openai/protocol.py).

// completionRequest is the subset of vLLM's CompletionRequest that actloop
// sends to POST /v1/completions (vllm/entrypoints/openai/protocol.py, class
// CompletionRequest: the OpenAI fields, then the completion-sampling-params
// block top_k, min_p, stop_token_ids, include_stop_str_in_output,
// skip_special_tokens, then the completion-extra-params block request_id,
// return_tokens_as_token_ids, vllm_xargs). prompt is a list of token ids;
// logprobs 0 returns the sampled token's log-prob only;
// return_tokens_as_token_ids makes each logprobs.tokens entry
// "token_id:<id>" (OpenAIServing._get_decoded_token in
// vllm/entrypoints/openai/serving_engine.py).
type completionRequest struct {
	Model                  string            `json:"model,omitempty"`
	Prompt                 []int32           `json:"prompt"`
	MaxTokens              int               `json:"max_tokens"`
	Temperature            float64           `json:"temperature"`
	TopP                   float64           `json:"top_p"`
	TopK                   int               `json:"top_k"`
	MinP                   float64           `json:"min_p"`
	Stop                   []string          `json:"stop,omitempty"`
	StopTokenIDs           []int32           `json:"stop_token_ids,omitempty"`
	SkipSpecialTokens      *bool             `json:"skip_special_tokens,omitempty"`
	IncludeStopStrInOutput bool              `json:"include_stop_str_in_output"`
	Logprobs               int               `json:"logprobs"`
	ReturnTokensAsTokenIDs bool              `json:"return_tokens_as_token_ids"`
	Stream                 bool              `json:"stream"`
	StreamOptions          streamOptions     `json:"stream_options"`
	RequestID              string            `json:"request_id"`
	VLLMXArgs              map[string]string `json:"vllm_xargs,omitempty"`
}

// streamOptions is vLLM's StreamOptions (protocol.py): include_usage adds a
// last event with the usage and no choices.
type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

func encodeCompletionRequest(req Request, model string) ([]byte, error) {
	sp := req.Sampling
	w := completionRequest{
		Model:                  model,
		Prompt:                 req.InputIDs,
		MaxTokens:              sp.MaxNewTokens,
		Temperature:            sp.Temperature,
		TopP:                   sp.TopP,
		TopK:                   sp.TopK,
		MinP:                   sp.MinP,
		Stop:                   sp.Stop,
		StopTokenIDs:           sp.StopTokenIDs,
		SkipSpecialTokens:      sp.SkipSpecialTokens,
		IncludeStopStrInOutput: sp.NoStopTrim,
		Logprobs:               0,
		ReturnTokensAsTokenIDs: true,
		Stream:                 true,
		StreamOptions:          streamOptions{IncludeUsage: true},
		RequestID:              req.RID,
	}
	if w.TopP == 0 {
		w.TopP = 1
	}
	if w.TopK == 0 {
		w.TopK = -1 // every vLLM version reads -1 as "whole vocabulary"; older ones reject 0
	}
	if req.Reply != "" {
		w.VLLMXArgs = map[string]string{replyParam: req.Reply}
	}
	return json.Marshal(w)
}

// Response side: vLLM's CompletionStreamResponse, one per server-sent event
// (completion_stream_generator in vllm/entrypoints/openai/serving_completion.py);
// a non-streamed CompletionResponse has the same choices.

// completionChunk is one event, or an error event: vLLM's
// create_streaming_error_response sends {"error": {"message", "type",
// "param", "code"}} (older versions the flat {"object": "error", "message",
// "code"}).
type completionChunk struct {
	Choices []completionChoice `json:"choices"`
	Usage   *usageInfo         `json:"usage"`
	Error   *errorInfo         `json:"error"`
	Object  *string            `json:"object"`
	Message *string            `json:"message"`
	Code    json.RawMessage    `json:"code"`
}

// errorInfo is vLLM's ErrorInfo (protocol.py).
type errorInfo struct {
	Message *string         `json:"message"`
	Code    json.RawMessage `json:"code"`
}

// completionChoice is CompletionResponseStreamChoice (protocol.py):
// stop_reason is the stop token id (int) or stop string that ended a "stop",
// null for the model's EOS or any other finish; token_ids is set only with
// return_token_ids (newer vLLM), which actloop does not ask for but checks
// when present.
type completionChoice struct {
	Index        *int                `json:"index"`
	Logprobs     *completionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
	StopReason   json.RawMessage     `json:"stop_reason"`
	TokenIDs     []int32             `json:"token_ids"`
}

// completionLogprobs is CompletionLogProbs (protocol.py): parallel lists, one
// entry per generated token.
type completionLogprobs struct {
	Tokens        []string   `json:"tokens"`
	TokenLogprobs []*float64 `json:"token_logprobs"`
}

// usageInfo is UsageInfo (protocol.py); prompt_tokens_details.cached_tokens
// is there only when the server runs with --enable-prompt-tokens-details.
type usageInfo struct {
	PromptTokens        *int `json:"prompt_tokens"`
	CompletionTokens    *int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens *int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// delta is what one event adds to a completion.
type delta struct {
	ids    []int32
	lps    []float32
	finish *Finish // set by the event that carries finish_reason
	usage  *usageInfo
}

// tokenIDPrefix starts each logprobs.tokens entry under
// return_tokens_as_token_ids.
const tokenIDPrefix = "token_id:"

// parseTokenID reads "token_id:<id>" as vLLM formats it (f"token_id:{id}"):
// decimal digits, no sign, no leading zeros, within int32.
func parseTokenID(s string) (int32, error) {
	digits, ok := bytes.CutPrefix([]byte(s), []byte(tokenIDPrefix))
	if !ok {
		return 0, fmt.Errorf("%q does not start with %q (was return_tokens_as_token_ids honoured?)", s, tokenIDPrefix)
	}
	if len(digits) == 0 || len(digits) > 10 || (digits[0] == '0' && len(digits) > 1) {
		return 0, fmt.Errorf("%q is not a token id", s)
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%q is not a token id", s)
		}
	}
	id, err := strconv.ParseInt(string(digits), 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%q is not a 32-bit token id", s)
	}
	return int32(id), nil
}

// decodeCompletionChunk decodes one event of a streamed completion (or a
// whole non-streamed answer). An error event is returned as an *HTTPError
// with the event's code (500 when it has none).
func decodeCompletionChunk(b []byte) (delta, error) {
	var w completionChunk
	if err := unmarshalField(b, &w, ""); err != nil {
		return delta{}, err
	}
	if w.Error != nil || (w.Object != nil && *w.Object == "error") {
		msg, code := w.Message, w.Code
		if w.Error != nil {
			msg, code = w.Error.Message, w.Error.Code
		}
		he := &HTTPError{Status: 500}
		if msg != nil {
			he.Body = *msg
		}
		var status int
		if len(code) > 0 && json.Unmarshal(code, &status) == nil && status >= 400 && status <= 599 {
			he.Status = status
		}
		return delta{}, he
	}
	d := delta{usage: w.Usage}
	if u := w.Usage; u != nil {
		for name, v := range map[string]*int{"prompt_tokens": u.PromptTokens, "completion_tokens": u.CompletionTokens} {
			if v != nil && *v < 0 {
				return delta{}, badResponse("usage.%s: negative (%d)", name, *v)
			}
		}
		if det := u.PromptTokensDetails; det != nil && det.CachedTokens != nil && *det.CachedTokens < 0 {
			return delta{}, badResponse("usage.prompt_tokens_details.cached_tokens: negative (%d)", *det.CachedTokens)
		}
	}
	switch len(w.Choices) {
	case 0:
		return d, nil
	case 1:
	default:
		return delta{}, badResponse("choices: %d entries, want 1 (n is 1)", len(w.Choices))
	}
	ch := w.Choices[0]
	if ch.Index != nil && *ch.Index != 0 {
		return delta{}, badResponse("choices[0].index: %d, want 0", *ch.Index)
	}
	if lp := ch.Logprobs; lp != nil {
		if len(lp.Tokens) != len(lp.TokenLogprobs) {
			return delta{}, badResponse("choices[0].logprobs: %d tokens but %d token_logprobs", len(lp.Tokens), len(lp.TokenLogprobs))
		}
		d.ids = make([]int32, len(lp.Tokens))
		d.lps = make([]float32, len(lp.Tokens))
		for i, tok := range lp.Tokens {
			id, err := parseTokenID(tok)
			if err != nil {
				return delta{}, badResponse("choices[0].logprobs.tokens[%d]: %v", i, err)
			}
			if lp.TokenLogprobs[i] == nil {
				return delta{}, badResponse("choices[0].logprobs.token_logprobs[%d]: null", i)
			}
			d.ids[i], d.lps[i] = id, float32(*lp.TokenLogprobs[i])
		}
	}
	if ch.TokenIDs != nil {
		if !equalIDs(ch.TokenIDs, d.ids) {
			return delta{}, badResponse("choices[0].token_ids: %v, but logprobs.tokens name %v", ch.TokenIDs, d.ids)
		}
	} else if ch.Logprobs == nil && ch.FinishReason == nil {
		return delta{}, badResponse("choices[0].logprobs: missing (was logprobs sent?)")
	}
	if ch.FinishReason != nil {
		f, err := decodeOpenAIFinish(*ch.FinishReason, ch.StopReason)
		if err != nil {
			return delta{}, err
		}
		d.finish = &f
	}
	return d, nil
}

func equalIDs(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// decodeOpenAIFinish maps finish_reason and stop_reason: "stop" with the
// stop token id or stop string (null for the model's own EOS), "length",
// and "abort" (vLLM's FinishReason.ABORT, which the servers that pass it on
// send with the reason in stop_reason).
func decodeOpenAIFinish(reason string, stop json.RawMessage) (Finish, error) {
	const field = "choices[0].stop_reason"
	f := Finish{Matched: -1}
	switch reason {
	case "stop":
		f.Type = FinishStop
		if len(stop) == 0 || isNull(stop) {
			return f, nil
		}
		if stop[0] == '"' {
			return f, unmarshalField(stop, &f.MatchedText, field)
		}
		return f, unmarshalField(stop, &f.Matched, field)
	case "length":
		f.Type = FinishLength
		f.Length = -1 // the output's length, filled in at the end
	case "abort":
		f.Type = FinishAbort
		if len(stop) > 0 && stop[0] == '"' {
			_ = json.Unmarshal(stop, &f.Message)
		}
	default:
		return Finish{}, badResponse("choices[0].finish_reason: unknown %q", reason)
	}
	return f, nil
}

// errDone ends readSSE at the "[DONE]" event.
var errDone = errors.New("[DONE]")

// maxEvent bounds one server-sent event.
const maxEvent = 16 << 20

// readSSE reads server-sent events (the text/event-stream format vLLM's
// StreamingResponse writes: "data: <json>\n\n", last "data: [DONE]\n\n")
// and calls fn with each event's data, its data lines joined by "\n".
// Comment lines (":") and other fields (event, id, retry) are skipped. It
// returns nil after [DONE], io.ErrUnexpectedEOF if the stream ends before
// it, or fn's error.
func readSSE(r io.Reader, fn func(data []byte) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var data []byte
	pending := false
	for {
		line, err := readLine(br)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		if len(line) == 0 { // end of an event
			if pending {
				if bytes.Equal(data, []byte("[DONE]")) {
					return nil
				}
				if err := fn(data); err != nil {
					return err
				}
			}
			data, pending = data[:0], false
			continue
		}
		field, value, found := bytes.Cut(line, []byte(":"))
		if !found {
			field, value = line, nil
		}
		value = bytes.TrimPrefix(value, []byte(" "))
		if string(field) != "data" {
			continue // a comment (empty field) or a field actloop does not use
		}
		if pending {
			data = append(data, '\n')
		}
		if len(data)+len(value) > maxEvent {
			return badResponse("event stream: an event exceeds %d bytes", maxEvent)
		}
		data = append(data, value...)
		pending = true
	}
}

// readLine reads one line without its "\n", "\r\n" or "\r" ending; a line
// longer than maxEvent is an error.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		line = append(line, frag...)
		if len(line) > maxEvent+16 {
			return nil, badResponse("event stream: a line exceeds %d bytes", maxEvent)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if len(line) > 0 && errors.Is(err, io.EOF) {
				return nil, io.ErrUnexpectedEOF // a last line without its end
			}
			return nil, err
		}
		line = bytes.TrimSuffix(line[:len(line)-1], []byte("\r"))
		return line, nil
	}
}

// Tokenizer endpoints.

// tokenizeRequest is POST /tokenize's body: vLLM's TokenizeCompletionRequest
// (vllm/entrypoints/openai/protocol.py, now
// vllm/entrypoints/serve/tokenize/protocol.py: model, prompt,
// add_special_tokens, return_token_strs) and SGLang's TokenizeRequest
// (python/sglang/srt/entrypoints/openai/protocol.py: model, prompt,
// add_special_tokens) agree. add_special_tokens defaults to true in both,
// which would add a BOS token; it is always sent. model is sent only when
// the client names one: both default it to the served model.
type tokenizeRequest struct {
	Model            string `json:"model,omitempty"`
	Prompt           string `json:"prompt"`
	AddSpecialTokens bool   `json:"add_special_tokens"`
}

// tokenizeResponse is TokenizeResponse in both: tokens, count, max_model_len
// (and vLLM's token_strs when asked for); only tokens is read.
type tokenizeResponse struct {
	Tokens []int32 `json:"tokens"`
}

// detokenizeRequest is POST /detokenize's body: vLLM's DetokenizeRequest
// (tokens) and SGLang's DetokenizeRequest (tokens, skip_special_tokens,
// default true: sent false so special tokens decode to their text, as
// tokenize.Tokenizer's Decode does; vLLM ignores the field).
type detokenizeRequest struct {
	Tokens            []int32 `json:"tokens"`
	SkipSpecialTokens *bool   `json:"skip_special_tokens,omitempty"`
}

// detokenizeResponse is vLLM's DetokenizeResponse {"prompt"} or SGLang's
// {"text"}.
type detokenizeResponse struct {
	Prompt *string `json:"prompt"`
	Text   *string `json:"text"`
}
