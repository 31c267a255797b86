package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// replyParam is the custom_params key that scripts the simulator's reply.
const replyParam = "actloop_reply"

// generateRequest is the subset of SGLang's GenerateReqInput that actloop
// sends to POST /generate (python/sglang/srt/managers/io_struct.py,
// class GenerateReqInput).
type generateRequest struct {
	RID            string         `json:"rid"`
	InputIDs       []int32        `json:"input_ids"`
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
	return json.Marshal(w)
}

// generateResponse is what POST /generate answers for one non-streamed
// request. The finished path builds it in TokenizerManager._handle_batch_output
// (python/sglang/srt/managers/tokenizer_manager.py: "output_ids", "meta_info");
// an abort in the waiting queue in TokenizerManager._handle_abort_req (no
// prompt_tokens or cached_tokens); an "Abort before prefill" carries neither
// output_ids nor output_token_logprobs.
type generateResponse struct {
	OutputIDs []int32   `json:"output_ids"`
	MetaInfo  *metaInfo `json:"meta_info"`
}

// metaInfo is the response's meta_info (tokenizer_manager.py,
// _handle_batch_output; weight_version is server_args.weight_version;
// output_token_logprobs entries are [logprob, token_id, text-or-null] as built
// by detokenize_logprob_tokens).
type metaInfo struct {
	ID                  *string           `json:"id"`
	FinishReason        json.RawMessage   `json:"finish_reason"`
	PromptTokens        *int              `json:"prompt_tokens"`
	CompletionTokens    *int              `json:"completion_tokens"`
	CachedTokens        *int              `json:"cached_tokens"`
	WeightVersion       *string           `json:"weight_version"`
	OutputTokenLogprobs []json.RawMessage `json:"output_token_logprobs"`
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
	if mi.OutputTokenLogprobs == nil {
		if len(ids) > 0 {
			return Result{}, "", badResponse("meta_info.output_token_logprobs: missing for %d output_ids", len(ids))
		}
	} else {
		if ids == nil && finish.Type != FinishAbort {
			return Result{}, "", badResponse("output_ids: missing")
		}
		if ids != nil && len(ids) != len(mi.OutputTokenLogprobs) {
			return Result{}, "", badResponse("meta_info.output_token_logprobs: %d entries for %d output_ids",
				len(mi.OutputTokenLogprobs), len(ids))
		}
		lps := make([]float32, len(mi.OutputTokenLogprobs))
		lpIDs := make([]int32, len(mi.OutputTokenLogprobs))
		for i, raw := range mi.OutputTokenLogprobs {
			lp, id, err := decodeLogprobEntry(raw, i)
			if err != nil {
				return Result{}, "", err
			}
			if ids != nil && id != ids[i] {
				return Result{}, "", badResponse("meta_info.output_token_logprobs[%d]: token id %d, but output_ids[%d] is %d",
					i, id, i, ids[i])
			}
			lps[i], lpIDs[i] = lp, id
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
