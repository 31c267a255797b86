package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// replyParam is the custom_params key that scripts the simulator's reply.
const replyParam = "actloop_reply"

// generateRequest is the subset of SGLang's GenerateReqInput that actloop
// sends to POST /generate (python/sglang/srt/managers/io_struct.py,
// class GenerateReqInput).
type generateRequest struct {
	RID string `json:"rid"`
	// InputIDs is sent as "input_ids", spliced in by encodeGenerateRequest
	// without encoding/json: a long context's ids cost more to encode by
	// reflection than the rest of a step.
	InputIDs       []int32        `json:"-"`
	SamplingParams samplingParams `json:"sampling_params"`
	ReturnLogprob  bool           `json:"return_logprob"`
	Stream         bool           `json:"stream"`
}

// samplingParams is the subset of SGLang's SamplingParams that actloop sends
// (python/sglang/srt/sampling/sampling_params.py, class SamplingParams;
// custom_params is its Optional[Dict[str, CustomParamValue]] field).
type samplingParams struct {
	MaxNewTokens      int               `json:"max_new_tokens"`
	Temperature       float64           `json:"temperature"`
	TopP              float64           `json:"top_p"`
	TopK              int               `json:"top_k"`
	MinP              float64           `json:"min_p"`
	Stop              []string          `json:"stop,omitempty"`
	StopTokenIDs      []int32           `json:"stop_token_ids,omitempty"`
	SkipSpecialTokens *bool             `json:"skip_special_tokens,omitempty"`
	NoStopTrim        bool              `json:"no_stop_trim"`
	CustomParams      map[string]string `json:"custom_params,omitempty"`
}

// updateWeightVersionRequest is SGLang's UpdateWeightVersionReqInput as
// POST /update_weight_version reads it (python/sglang/srt/managers/io_struct.py):
// abort_all_requests defaults to true there, so it is always sent.
type updateWeightVersionRequest struct {
	NewVersion       string `json:"new_version"`
	AbortAllRequests bool   `json:"abort_all_requests"`
}

// pauseGenerationRequest is SGLang's PauseGenerationReqInput as POST
// /pause_generation reads it (python/sglang/srt/managers/io_struct.py,
// class PauseGenerationReqInput: mode, default "abort").
type pauseGenerationRequest struct {
	Mode string `json:"mode"`
}

// abortRequest is SGLang's AbortReq as POST /abort_request reads it
// (python/sglang/srt/managers/io_struct.py, class AbortReq: rid, abort_all).
type abortRequest struct {
	RID string `json:"rid"`
}

func encodeGenerateRequest(req Request) ([]byte, error) {
	sp := req.Sampling
	w := generateRequest{
		RID:      req.RID,
		InputIDs: req.InputIDs,
		SamplingParams: samplingParams{
			MaxNewTokens:      sp.MaxNewTokens,
			Temperature:       sp.Temperature,
			TopP:              sp.TopP,
			TopK:              sp.TopK,
			MinP:              sp.MinP,
			Stop:              sp.Stop,
			StopTokenIDs:      sp.StopTokenIDs,
			SkipSpecialTokens: sp.SkipSpecialTokens,
			NoStopTrim:        sp.NoStopTrim,
		},
		ReturnLogprob: true,
		Stream:        false,
	}
	if w.SamplingParams.TopP == 0 {
		w.SamplingParams.TopP = 1
	}
	if w.SamplingParams.TopK == 0 {
		w.SamplingParams.TopK = -1
	}
	if req.Reply != "" {
		w.SamplingParams.CustomParams = map[string]string{replyParam: req.Reply}
	}
	rest, err := json.Marshal(w)
	if err != nil {
		return nil, err
	}
	body := make([]byte, 0, len(rest)+len(`{"input_ids":,`)+2+7*len(w.InputIDs))
	body = AppendTokenIDs(append(body, `{"input_ids":`...), w.InputIDs)
	return append(append(body, ','), rest[1:]...), nil
}

// generateResponse is what POST /generate answers for one non-streamed
// request. The finished path builds it in TokenizerManager._handle_batch_output
// (python/sglang/srt/managers/tokenizer_manager.py: "output_ids", "meta_info");
// an abort in the waiting queue in TokenizerManager._handle_abort_req (no
// prompt_tokens or cached_tokens); an "Abort before prefill" carries neither
// output_ids nor output_token_logprobs.
type generateResponse struct {
	OutputIDs TokenIDs  `json:"output_ids"`
	MetaInfo  *metaInfo `json:"meta_info"`
}

// metaInfo is the response's meta_info (tokenizer_manager.py,
// _handle_batch_output; weight_version is server_args.weight_version;
// output_token_logprobs entries are [logprob, token_id, text-or-null] as built
// by detokenize_logprob_tokens).
type metaInfo struct {
	ID                  *string         `json:"id"`
	FinishReason        json.RawMessage `json:"finish_reason"`
	PromptTokens        *int            `json:"prompt_tokens"`
	CompletionTokens    *int            `json:"completion_tokens"`
	CachedTokens        *int            `json:"cached_tokens"`
	WeightVersion       *string         `json:"weight_version"`
	OutputTokenLogprobs *logprobEntries `json:"output_token_logprobs"`
}

// finishReason is BaseFinishReason.to_json()
// (python/sglang/srt/managers/schedule_batch.py): FINISH_MATCHED_TOKEN and
// FINISH_MATCHED_STR give {"type": "stop", "matched": int|[int]|str},
// FINISH_LENGTH {"type": "length", "length": n}, FINISH_ABORT
// {"type": "abort", "message", "status_code", "err_type"}.
type finishReason struct {
	Type    *string         `json:"type"`
	Matched json.RawMessage `json:"matched"`
	Length  *int            `json:"length"`
	Message *string         `json:"message"`
}

// decodeGenerateResponse decodes a /generate answer into a Result.
func decodeGenerateResponse(b []byte) (Result, error) {
	res, _, err := decodeGenerate(b)
	return res, err
}

// decodeGenerate also returns meta_info.id ("" when absent).
func decodeGenerate(b []byte) (Result, string, error) {
	var w generateResponse
	if err := unmarshalField(b, &w, ""); err != nil {
		return Result{}, "", err
	}
	mi := w.MetaInfo
	if mi == nil {
		return Result{}, "", badResponse("meta_info: missing")
	}
	var res Result
	finish, err := decodeFinish(mi.FinishReason)
	if err != nil {
		return Result{}, "", err
	}
	res.Finish = finish

	ids := w.OutputIDs
	if mi.OutputTokenLogprobs == nil || mi.OutputTokenLogprobs.null {
		if len(ids) > 0 {
			return Result{}, "", badResponse("meta_info.output_token_logprobs: missing for %d output_ids", len(ids))
		}
	} else {
		if ids == nil && finish.Type != FinishAbort {
			return Result{}, "", badResponse("output_ids: missing")
		}
		e := mi.OutputTokenLogprobs
		if err := e.slowPath(); err != nil {
			return Result{}, "", err
		}
		if ids != nil && len(ids) != len(e.ids) {
			return Result{}, "", badResponse("meta_info.output_token_logprobs: %d entries for %d output_ids",
				len(e.ids), len(ids))
		}
		lps, lpIDs := e.lps, e.ids
		for i, id := range lpIDs {
			if ids != nil && id != ids[i] {
				return Result{}, "", badResponse("meta_info.output_token_logprobs[%d]: token id %d, but output_ids[%d] is %d",
					i, id, i, ids[i])
			}
		}
		if ids == nil { // an abort that sent log-probs but no output_ids
			ids = lpIDs
		}
		res.Logprobs = lps
	}
	res.OutputIDs = ids

	counts := []struct {
		name string
		v    *int
		dst  *int
	}{
		{"prompt_tokens", mi.PromptTokens, &res.PromptTokens},
		{"completion_tokens", mi.CompletionTokens, &res.CompletionTokens},
		{"cached_tokens", mi.CachedTokens, &res.CachedTokens},
	}
	for _, c := range counts {
		if c.v == nil {
			continue
		}
		if *c.v < 0 {
			return Result{}, "", badResponse("meta_info.%s: negative (%d)", c.name, *c.v)
		}
		*c.dst = *c.v
	}
	if mi.CompletionTokens == nil {
		res.CompletionTokens = len(res.OutputIDs)
	}
	if mi.WeightVersion != nil {
		res.WeightVersion = *mi.WeightVersion
	}
	if res.Finish.Type == FinishLength && res.Finish.Length == -1 {
		res.Finish.Length = len(res.OutputIDs)
	}
	id := ""
	if mi.ID != nil {
		id = *mi.ID
	}
	return res, id, nil
}

func decodeFinish(raw json.RawMessage) (Finish, error) {
	if len(raw) == 0 {
		return Finish{}, badResponse("meta_info.finish_reason: missing")
	}
	if isNull(raw) {
		return Finish{}, badResponse("meta_info.finish_reason: null (the request is not finished)")
	}
	var fr finishReason
	if err := unmarshalField(raw, &fr, "meta_info.finish_reason"); err != nil {
		return Finish{}, err
	}
	if fr.Type == nil {
		return Finish{}, badResponse("meta_info.finish_reason.type: missing")
	}
	f := Finish{Matched: -1}
	switch *fr.Type {
	case "stop":
		f.Type = FinishStop
		if err := decodeMatched(fr.Matched, &f); err != nil {
			return Finish{}, err
		}
	case "length":
		f.Type = FinishLength
		f.Length = -1 // filled from the output when absent
		if fr.Length != nil {
			if *fr.Length < 0 {
				return Finish{}, badResponse("meta_info.finish_reason.length: negative (%d)", *fr.Length)
			}
			f.Length = *fr.Length
		}
	case "abort":
		f.Type = FinishAbort
		if fr.Message != nil {
			f.Message = *fr.Message
		}
	default:
		return Finish{}, badResponse("meta_info.finish_reason.type: unknown %q", *fr.Type)
	}
	return f, nil
}

// decodeMatched reads finish_reason.matched: a token id, a list of token ids
// (FINISH_MATCHED_TOKEN is typed Union[int, List[int]]; the last one ended
// generation), a stop string, or null.
func decodeMatched(raw json.RawMessage, f *Finish) error {
	const field = "meta_info.finish_reason.matched"
	if len(raw) == 0 || isNull(raw) {
		return nil
	}
	switch raw[0] {
	case '"':
		return unmarshalField(raw, &f.MatchedText, field)
	case '[':
		var ids []int32
		if err := unmarshalField(raw, &ids, field); err != nil {
			return err
		}
		if len(ids) > 0 {
			f.Matched = ids[len(ids)-1]
		}
		return nil
	default:
		return unmarshalField(raw, &f.Matched, field)
	}
}

// decodeLogprobEntry reads one [logprob, token_id, text-or-null] entry.
// logprobEntries is output_token_logprobs. Its entries are parsed without
// reflection when each is [number, integer, string or null], which is what
// SGLang sends; anything else is kept raw for decodeLogprobEntry, which
// says exactly what is wrong.
type logprobEntries struct {
	null bool // the list was JSON null
	lps  []float32
	ids  []int32
	raw  []json.RawMessage // set when the fast parse declined
}

func (e *logprobEntries) UnmarshalJSON(b []byte) error {
	if isNull(b) {
		e.null = true
		return nil
	}
	if lps, ids, ok := parseLogprobs(b); ok {
		e.lps, e.ids = lps, ids
		return nil
	}
	return json.Unmarshal(b, &e.raw)
}

// slowPath decodes the raw entries, if the fast parse declined them.
func (e *logprobEntries) slowPath() error {
	if e.raw == nil {
		return nil
	}
	e.lps, e.ids = make([]float32, len(e.raw)), make([]int32, len(e.raw))
	for i, raw := range e.raw {
		lp, id, err := decodeLogprobEntry(raw, i)
		if err != nil {
			return err
		}
		e.lps[i], e.ids[i] = lp, id
	}
	e.raw = nil
	return nil
}

// parseLogprobs parses [[logprob, token_id, text|null], ...]; ok is false
// on anything else, including valid JSON of another shape.
func parseLogprobs(b []byte) (lps []float32, ids []int32, ok bool) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '[' {
		return nil, nil, false
	}
	lps, ids = make([]float32, 0, len(b)/16), make([]int32, 0, len(b)/16)
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == ']' {
		return lps, ids, skipWS(b, i+1) == len(b)
	}
	for {
		if i = skipWS(b, i); i >= len(b) || b[i] != '[' {
			return nil, nil, false
		}
		i = skipWS(b, i+1)
		j := numberEnd(b, i)
		if j == i {
			return nil, nil, false
		}
		lp, err := strconv.ParseFloat(string(b[i:j]), 64)
		if err != nil {
			return nil, nil, false
		}
		if i = skipWS(b, j); i >= len(b) || b[i] != ',' {
			return nil, nil, false
		}
		i = skipWS(b, i+1)
		j = numberEnd(b, i)
		id, err := strconv.ParseInt(string(b[i:j]), 10, 32)
		if j == i || err != nil {
			return nil, nil, false
		}
		if i = skipWS(b, j); i < len(b) && b[i] == ',' {
			i = skipWS(b, i+1)
			switch {
			case i+4 <= len(b) && string(b[i:i+4]) == "null":
				i += 4
			case i < len(b) && b[i] == '"':
				if i = stringEnd(b, i); i < 0 {
					return nil, nil, false
				}
			default:
				return nil, nil, false
			}
			i = skipWS(b, i)
		}
		if i >= len(b) || b[i] != ']' {
			return nil, nil, false
		}
		lps, ids = append(lps, float32(lp)), append(ids, int32(id))
		if i = skipWS(b, i+1); i >= len(b) {
			return nil, nil, false
		}
		switch b[i] {
		case ',':
			i++
		case ']':
			return lps, ids, skipWS(b, i+1) == len(b)
		default:
			return nil, nil, false
		}
	}
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// numberEnd returns the end of the JSON number starting at i (i itself if
// none does): -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func numberEnd(b []byte, i int) int {
	start := i
	digits := func(i int) int {
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(i)
	default:
		return start
	}
	if i < len(b) && b[i] == '.' {
		j := digits(i + 1)
		if j == i+1 {
			return start
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(i)
		if j == i {
			return start
		}
		i = j
	}
	return i
}

// stringEnd returns the index after the JSON string starting at b[i] ('"'),
// or -1 if it is not one (escapes are checked for shape; control characters
// are refused).
func stringEnd(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c < 0x20:
			return -1
		case c == '\\':
			i++
			if i >= len(b) {
				return -1
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(b) {
					return -1
				}
				for _, h := range b[i+1 : i+5] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return -1
					}
				}
				i += 4
			default:
				return -1
			}
		}
	}
	return -1
}

func decodeLogprobEntry(raw json.RawMessage, i int) (float32, int32, error) {
	field := fmt.Sprintf("meta_info.output_token_logprobs[%d]", i)
	var parts []json.RawMessage
	if err := unmarshalField(raw, &parts, field); err != nil {
		return 0, 0, err
	}
	if len(parts) < 2 {
		return 0, 0, badResponse("%s: %d elements, want [logprob, token_id, text]", field, len(parts))
	}
	var lp *float64
	if err := unmarshalField(parts[0], &lp, field+"[0]"); err != nil {
		return 0, 0, err
	}
	if lp == nil {
		return 0, 0, badResponse("%s[0]: null logprob", field)
	}
	var id *int32
	if err := unmarshalField(parts[1], &id, field+"[1]"); err != nil {
		return 0, 0, err
	}
	if id == nil {
		return 0, 0, badResponse("%s[1]: null token id", field)
	}
	return float32(*lp), *id, nil
}

// unmarshalField decodes b into v, turning decode errors into ErrBadResponse
// errors that name the field (prefix is where b sits in the response).
func unmarshalField(b []byte, v any, prefix string) error {
	err := json.Unmarshal(b, v)
	if err == nil {
		return nil
	}
	var ee *TokenIDError
	if errors.As(err, &ee) { // output_ids is the only id list in a response
		return badResponse("output_ids[%d]: %s", ee.Index, ee.Reason)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		name := te.Field
		switch {
		case prefix != "" && name != "":
			name = prefix + "." + name
		case name == "":
			name = prefix
		}
		if name == "" {
			name = "response"
		}
		return badResponse("%s: cannot decode JSON %s as %s", name, te.Value, te.Type)
	}
	if prefix == "" {
		prefix = "response"
	}
	return badResponse("%s: %v", prefix, err)
}

func isNull(raw json.RawMessage) bool {
	return bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}
