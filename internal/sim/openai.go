package sim

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/pkg/llm"
)

// The simulator's OpenAI-compatible side, in vLLM's dialect
// (vllm/entrypoints/openai/protocol.py, serving_completion.py,
// serving_tokenization.py): POST /v1/completions (streamed or not) runs the
// same scheduler, cost model and replies as /generate; POST /tokenize and
// POST /detokenize (and SGLang's /v1/tokenize and /v1/detokenize) use the
// configured tokenizer. The request id is the
// X-Request-Id header, else request_id, else a random one; /abort_request
// aborts by it as for /generate. A client that disconnects aborts its request.
// A streamed answer carries the tokens generated so far every
// streamInterval; a request aborted on the server ends its stream with an
// error event, as vLLM does.

// streamInterval is how often a streamed completion sends what was generated.
const streamInterval = 5 * time.Millisecond

// defaultMaxTokens is CompletionRequest.max_tokens's default in vLLM.
const defaultMaxTokens = 16

// registerOpenAI adds the OpenAI-compatible routes to s.mux.
func (s *Server) registerOpenAI() {
	s.mux.HandleFunc("POST /v1/completions", s.handleCompletions)
	// SGLang serves both paths (http_server.py, openai_v1_tokenize and
	// openai_v1_detokenize), vLLM the unversioned ones (api_server.py).
	s.mux.HandleFunc("POST /tokenize", s.handleTokenize)
	s.mux.HandleFunc("POST /v1/tokenize", s.handleTokenize)
	s.mux.HandleFunc("POST /detokenize", s.handleDetokenize)
	s.mux.HandleFunc("POST /v1/detokenize", s.handleDetokenize)
	s.mux.HandleFunc("GET /v1/models", s.handleModels)
}

// completionInput is the JSON of POST /v1/completions: vLLM's
// CompletionRequest, the fields the simulator reads. Unknown fields are
// ignored, as vLLM does (with a warning).
type completionInput struct {
	Prompt                 json.RawMessage `json:"prompt"`
	MaxTokens              *int            `json:"max_tokens"`
	Temperature            *float64        `json:"temperature"`
	TopP                   *float64        `json:"top_p"`
	TopK                   *int            `json:"top_k"`
	MinP                   *float64        `json:"min_p"`
	Stop                   stopStrings     `json:"stop"`
	StopTokenIDs           []*int32        `json:"stop_token_ids"`
	SkipSpecialTokens      *bool           `json:"skip_special_tokens"`
	IncludeStopStrInOutput *bool           `json:"include_stop_str_in_output"`
	Logprobs               *int            `json:"logprobs"`
	ReturnTokensAsTokenIDs *bool           `json:"return_tokens_as_token_ids"`
	Stream                 *bool           `json:"stream"`
	StreamOptions          *struct {
		IncludeUsage *bool `json:"include_usage"`
	} `json:"stream_options"`
	N         *int                       `json:"n"`
	Echo      *bool                      `json:"echo"`
	RequestID *string                    `json:"request_id"`
	VLLMXArgs map[string]json.RawMessage `json:"vllm_xargs"`
}

// completionOpts are the parts of a completion request that shape the answer.
type completionOpts struct {
	stream, usage, tokenIDs bool
	logprobs                *int
}

// decodeCompletionRequest parses and validates a /v1/completions body as
// CompletionRequest's validators do, for a model whose context length
// (max_model_len) is contextLen.
func decodeCompletionRequest(b []byte, headerRID string, contextLen int) (*genRequest, completionOpts, error) {
	var in completionInput
	var o completionOpts
	if err := decodeJSON(b, &in); err != nil {
		return nil, o, err
	}
	req := &genRequest{RID: headerRID, SkipSpecial: true, MaxNewTokens: defaultMaxTokens}
	if req.RID == "" && in.RequestID != nil {
		req.RID = *in.RequestID
	}
	if req.RID == "" {
		req.RID = newRID()
	}
	switch {
	case len(in.Prompt) == 0 || isNull(in.Prompt):
		return nil, o, errField("prompt", "At least one of `prompt` or `prompt_embeds` must be set.")
	case in.Prompt[0] == '"':
		var text string
		if err := json.Unmarshal(in.Prompt, &text); err != nil {
			return nil, o, errField("prompt", "malformed string")
		}
		req.text = &text // the server encodes it with its tokenizer
		req.InputIDs = tokenize.Bytes{}.Encode(text)
		if len(req.InputIDs) == 0 {
			return nil, o, errField("prompt", "cannot be empty")
		}
	default:
		ids, err := llm.ParseTokenIDs(in.Prompt)
		if err != nil {
			return nil, o, errField("prompt", "must be a string or a list of token ids (the simulator takes one prompt)")
		}
		v, err := inputIDs(ids)
		if err != nil {
			return nil, o, errField("prompt", "%v", err)
		}
		req.InputIDs = v
	}
	if in.N != nil && *in.N != 1 {
		return nil, o, errField("n", "the simulator supports n = 1 only, got %d", *in.N)
	}
	if in.Echo != nil && *in.Echo {
		return nil, o, errField("echo", "not supported by the simulator")
	}
	if v := in.MaxTokens; v != nil {
		if *v < 1 {
			return nil, o, errField("max_tokens", "must be at least 1, got %d", *v)
		}
		req.MaxNewTokens = *v
	}
	if v := in.Temperature; v != nil && (*v < 0 || math.IsInf(*v, 0) || math.IsNaN(*v)) {
		return nil, o, errField("temperature", "must be a non-negative finite number, got %v", *v)
	}
	if v := in.TopP; v != nil && !(*v > 0 && *v <= 1) {
		return nil, o, errField("top_p", "must be in (0, 1], got %v", *v)
	}
	if v := in.MinP; v != nil && !(*v >= 0 && *v <= 1) {
		return nil, o, errField("min_p", "must be in [0, 1], got %v", *v)
	}
	if v := in.TopK; v != nil && *v < -1 {
		return nil, o, errField("top_k", "must be -1 or 0 (disable) or at least 1, got %d", *v)
	}
	if v := in.Logprobs; v != nil && *v < 0 {
		return nil, o, errField("logprobs", "`logprobs` must be a positive value.")
	}
	for i, id := range in.StopTokenIDs {
		if id == nil {
			return nil, o, errField(fmt.Sprintf("stop_token_ids[%d]", i), "null token id")
		}
		if *id < 0 {
			return nil, o, errField(fmt.Sprintf("stop_token_ids[%d]", i), "negative token id %d", *id)
		}
		req.StopTokenIDs = append(req.StopTokenIDs, *id)
	}
	req.Stop = in.Stop
	if in.SkipSpecialTokens != nil {
		req.SkipSpecial = *in.SkipSpecialTokens
	}
	if in.IncludeStopStrInOutput != nil {
		req.NoStopTrim = *in.IncludeStopStrInOutput
	}
	if raw, ok := in.VLLMXArgs[replyParam]; ok && !isNull(raw) {
		var reply string
		if err := json.Unmarshal(raw, &reply); err != nil {
			return nil, o, errField("vllm_xargs."+replyParam, "must be a string")
		}
		req.Reply = &reply
	}
	// vLLM's words for a prompt that fills the context and for one whose
	// max_tokens does not fit beside it.
	switch in := len(req.InputIDs); {
	case in >= contextLen:
		return nil, o, errField("prompt", "This model's maximum context length is %d tokens. However, your request has "+
			"%d input tokens. Please reduce the length of the input messages.", contextLen, in)
	case in+req.MaxNewTokens > contextLen:
		return nil, o, errField("max_tokens", "'max_tokens' or 'max_completion_tokens' is too large: %d. This model's "+
			"maximum context length is %d tokens and your request has %d input tokens (%d > %d - %d).",
			req.MaxNewTokens, contextLen, in, req.MaxNewTokens, contextLen, in)
	}
	o.logprobs = in.Logprobs
	req.ReturnLogprob = in.Logprobs != nil
	o.stream = in.Stream != nil && *in.Stream
	if in.StreamOptions != nil {
		if !o.stream {
			return nil, o, errField("stream_options", "Stream options can only be defined when `stream=True`.")
		}
		o.usage = in.StreamOptions.IncludeUsage != nil && *in.StreamOptions.IncludeUsage
	}
	o.tokenIDs = in.ReturnTokensAsTokenIDs != nil && *in.ReturnTokensAsTokenIDs
	return req, o, nil
}

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	req, o, err := decodeCompletionRequest(body, r.Header.Get("X-Request-Id"), s.cfg.ContextLength)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	j, err := s.accept(req)
	if err != nil {
		// vLLM's OutputProcessor.add_request raises a ValueError that
		// serving_completion.py answers as an error: a 400, or an error
		// event when streaming.
		dup := errField("", "Request id cmpl-%s-0 already running.", req.RID)
		if !o.stream {
			writeError(w, http.StatusBadRequest, dup)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": dup.Error(), "type": "BadRequestError", "param": nil, "code": 400}})
		_, _ = fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", b)
		return
	}

	cw := completionWriter{id: "cmpl-" + req.RID, created: time.Now().Unix(), o: o, req: req, plan: &j.plan, voc: s.voc}
	if !o.stream {
		out := s.end(j, s.run(r.Context(), j))
		if out == nil {
			return // the client went away
		}
		if msg, aborted := abortMessage(out); aborted {
			// serving_completion.py answers an aborted request with an error.
			writeError(w, http.StatusBadRequest, errField("", "%s", msg))
			return
		}
		gen := out.MetaInfo.CompletionTokens
		ch := cw.choice(0, gen, out)
		writeJSON(w, http.StatusOK, map[string]any{
			"id": cw.id, "object": "text_completion", "created": cw.created, "model": modelName,
			"choices": []any{ch}, "usage": cw.usage(out),
		})
		return
	}

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	send := func(v any) {
		b, err := json.Marshal(v)
		if err != nil {
			return
		}
		_, _ = fmt.Fprintf(w, "data: %s\n\n", b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	// The job runs on its own goroutine so this one can stream its
	// progress; the handler returns only after it has ended.
	done := make(chan *generateOutput, 1)
	go func() { done <- s.end(j, s.run(r.Context(), j)) }()
	tick := time.NewTicker(streamInterval)
	defer tick.Stop()
	sent := 0
	for {
		select {
		case <-tick.C:
			s.mu.Lock()
			n := s.infoLocked(j).Generated
			s.mu.Unlock()
			n = min(n, len(j.plan.ids))
			if n > sent {
				send(cw.chunk(cw.choice(sent, n, nil)))
				sent = n
			}
		case out := <-done:
			if out == nil {
				return // the client went away
			}
			gen := max(out.MetaInfo.CompletionTokens, sent)
			if msg, aborted := abortMessage(out); aborted {
				if gen > sent {
					send(cw.chunk(cw.choice(sent, gen, nil)))
				}
				send(map[string]any{"error": map[string]any{"message": msg, "type": "BadRequestError", "param": nil, "code": 400}})
			} else {
				send(cw.chunk(cw.choice(sent, gen, out)))
				if o.usage {
					send(map[string]any{"id": cw.id, "object": "text_completion", "created": cw.created, "model": modelName,
						"choices": []any{}, "usage": cw.usage(out)})
				}
			}
			_, _ = fmt.Fprint(w, "data: [DONE]\n\n")
			if flusher != nil {
				flusher.Flush()
			}
			return
		}
	}
}

// abortMessage reports whether out is an abort, and its message.
func abortMessage(out *generateOutput) (string, bool) {
	if out.MetaInfo.FinishReason["type"] != "abort" {
		return "", false
	}
	msg, _ := out.MetaInfo.FinishReason["message"].(string)
	return msg, true
}

// completionWriter shapes completion answers (CompletionResponse,
// CompletionStreamResponse, CompletionLogProbs in protocol.py).
type completionWriter struct {
	id      string
	created int64
	o       completionOpts
	req     *genRequest
	plan    *plan
	voc     *vocab
}

func (cw *completionWriter) chunk(choice map[string]any) map[string]any {
	return map[string]any{"id": cw.id, "object": "text_completion", "created": cw.created, "model": modelName,
		"choices": []any{choice}}
}

// choice is the choice for output tokens [from, to); out, when set, ends it
// with finish_reason and stop_reason.
func (cw *completionWriter) choice(from, to int, out *generateOutput) map[string]any {
	ids := cw.plan.ids[from:to]
	text := outputText(cw.voc, cw.req, cw.plan, ids, false)
	ch := map[string]any{"index": 0, "text": text, "logprobs": nil, "finish_reason": nil, "stop_reason": nil}
	if out != nil {
		ch["text"] = outputText(cw.voc, cw.req, cw.plan, ids, true)
		fr := out.MetaInfo.FinishReason
		switch fr["type"] {
		case "stop":
			ch["finish_reason"], ch["stop_reason"] = "stop", fr["matched"]
		default:
			ch["finish_reason"] = "length"
		}
	}
	if cw.o.logprobs != nil {
		tokens := make([]string, len(ids))
		lps := make([]json.Number, len(ids))
		offsets := make([]int, len(ids))
		tops := make([]map[string]json.Number, len(ids))
		off := 0
		for i, id := range ids {
			tok := cw.voc.tok.Decode([]int32{id})
			if cw.o.tokenIDs {
				tok = "token_id:" + strconv.Itoa(int(id))
			}
			lp := json.Number(strconv.FormatFloat(float64(cw.plan.lps[from+i]), 'g', -1, 32))
			tokens[i], lps[i], offsets[i] = tok, lp, off
			tops[i] = map[string]json.Number{tok: lp}
			off += len(tok)
		}
		ch["logprobs"] = map[string]any{"text_offset": offsets, "token_logprobs": lps, "tokens": tokens, "top_logprobs": tops}
	}
	return ch
}

// usage is UsageInfo; the simulator reports cached tokens as vLLM does with
// --enable-prompt-tokens-details.
func (cw *completionWriter) usage(out *generateOutput) map[string]any {
	prompt := len(cw.req.InputIDs)
	gen := out.MetaInfo.CompletionTokens
	u := map[string]any{"prompt_tokens": prompt, "completion_tokens": gen, "total_tokens": prompt + gen}
	if c := out.MetaInfo.CachedTokens; c != nil {
		u["prompt_tokens_details"] = map[string]any{"cached_tokens": *c}
	}
	return u
}

// tokenizeInput is vLLM's TokenizeCompletionRequest and SGLang's
// TokenizeRequest: model, prompt, add_special_tokens. The simulator serves
// one model under any name, and its tokenizers add no special tokens to a
// prompt, so only prompt matters.
type tokenizeInput struct {
	Model            *string `json:"model"`
	Prompt           *string `json:"prompt"`
	AddSpecialTokens *bool   `json:"add_special_tokens"`
}

func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	var in tokenizeInput
	if !decodeBody(w, r, &in) {
		return
	}
	if in.Prompt == nil {
		writeError(w, http.StatusBadRequest, errField("prompt", "field required"))
		return
	}
	tok := s.cfg.Tokenizer // even one /generate cannot use (no ChatML tokens)
	if tok == nil {
		tok = s.voc.tok
	}
	ids := tok.Encode(*in.Prompt)
	if ids == nil {
		ids = []int32{} // "tokens": [], never null
	}
	writeJSON(w, http.StatusOK, map[string]any{"tokens": ids, "count": len(ids), "max_model_len": s.cfg.ContextLength})
}

// detokenizeInput is vLLM's DetokenizeRequest (tokens) and SGLang's
// (tokens, skip_special_tokens: default true in SGLang; vLLM has none and
// keeps special tokens, which the simulator does when it is absent).
type detokenizeInput struct {
	Tokens            []*int32 `json:"tokens"`
	SkipSpecialTokens *bool    `json:"skip_special_tokens"`
}

func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	var in detokenizeInput
	if !decodeBody(w, r, &in) {
		return
	}
	if in.Tokens == nil {
		writeError(w, http.StatusBadRequest, errField("tokens", "field required"))
		return
	}
	ids := make([]int32, 0, len(in.Tokens))
	for i, id := range in.Tokens {
		if id == nil || *id < 0 || *id >= s.voc.size {
			writeError(w, http.StatusBadRequest, errField(fmt.Sprintf("tokens[%d]", i), "not a token id of the vocabulary"))
			return
		}
		if in.SkipSpecialTokens != nil && *in.SkipSpecialTokens && s.voc.special(*id) {
			continue
		}
		ids = append(ids, *id)
	}
	text := s.voc.tok.Decode(ids)
	// "prompt" is vLLM's DetokenizeResponse, "text" SGLang's.
	writeJSON(w, http.StatusOK, map[string]any{"prompt": text, "text": text})
}

func (s *Server) handleModels(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{
		map[string]any{"id": modelName, "object": "model", "owned_by": "actloop", "max_model_len": s.cfg.ContextLength},
	}})
}
