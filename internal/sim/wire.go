package sim

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"

	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/pkg/llm"
)

// Request side. Field names are SGLang's: GenerateReqInput
// (python/sglang/srt/managers/io_struct.py) and SamplingParams
// (python/sglang/srt/sampling/sampling_params.py). Unknown fields are ignored
// and null means "the default", as in SGLang.

// defaultMaxNewTokens is SamplingParams.max_new_tokens's default in SGLang.
const defaultMaxNewTokens = 128

// replyParam is the custom_params key that scripts the reply.
const replyParam = "actloop_reply"

// generateInput is the JSON of POST /generate (GenerateReqInput).
type generateInput struct {
	RID            *string        `json:"rid"`
	Text           *string        `json:"text"`
	InputIDs       llm.TokenIDs   `json:"input_ids"`
	SamplingParams *samplingInput `json:"sampling_params"`
	ReturnLogprob  *bool          `json:"return_logprob"`
	Stream         *bool          `json:"stream"`
}

// samplingInput is sampling_params (SamplingParams).
type samplingInput struct {
	MaxNewTokens      *int                       `json:"max_new_tokens"`
	Temperature       *float64                   `json:"temperature"`
	TopP              *float64                   `json:"top_p"`
	TopK              *int                       `json:"top_k"`
	MinP              *float64                   `json:"min_p"`
	Stop              stopStrings                `json:"stop"`
	StopTokenIDs      []*int32                   `json:"stop_token_ids"`
	SkipSpecialTokens *bool                      `json:"skip_special_tokens"`
	NoStopTrim        *bool                      `json:"no_stop_trim"`
	CustomParams      map[string]json.RawMessage `json:"custom_params"`
}

// stopStrings is SamplingParams.stop: a string, a list of strings, or null.
type stopStrings []string

func (s *stopStrings) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var one string
		if err := json.Unmarshal(b, &one); err != nil {
			return err
		}
		*s = stopStrings{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		// json fills in the field's path for this error type.
		return &json.UnmarshalTypeError{Value: jsonKind(b), Type: reflect.TypeFor[stopStrings]()}
	}
	*s = many
	return nil
}

// genRequest is a validated /generate request.
type genRequest struct {
	RID           string
	InputIDs      []int32
	MaxNewTokens  int
	StopTokenIDs  []int32
	Stop          []string
	SkipSpecial   bool
	NoStopTrim    bool
	Reply         *string
	ReturnLogprob bool
	text          *string // the prompt, when it came as text
}

// fieldError is a 400 naming the offending field.
type fieldError struct {
	field string
	msg   string
}

func (e *fieldError) Error() string {
	if e.field == "" {
		return e.msg
	}
	return e.field + ": " + e.msg
}

func errField(field, format string, args ...any) error {
	return &fieldError{field: field, msg: fmt.Sprintf(format, args...)}
}

// decodeJSON decodes b into v, naming the field of a type error.
func decodeJSON(b []byte, v any) error {
	err := json.Unmarshal(b, v)
	if err == nil {
		return nil
	}
	var ee *llm.TokenIDError
	if errors.As(err, &ee) { // input_ids is the only id list decoded so
		return errField(fmt.Sprintf("input_ids[%d]", ee.Index), "%s", ee.Reason)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return errField(te.Field, "cannot use JSON %s as %s", te.Value, goTypeName(te.Type.String()))
	}
	return errField("", "malformed JSON: %v", err)
}

// jsonKind names the kind of a JSON value, as UnmarshalTypeError.Value does.
func jsonKind(b []byte) string {
	switch {
	case len(b) == 0:
		return "value"
	case b[0] == '{':
		return "object"
	case b[0] == '[':
		return "array"
	case b[0] == 't' || b[0] == 'f':
		return "bool"
	case b[0] == 'n':
		return "null"
	}
	return "number"
}

func goTypeName(t string) string {
	switch {
	case strings.HasSuffix(t, "stopStrings"):
		return "a string or a list of strings"
	case strings.HasSuffix(t, "int32"):
		return "a 32-bit integer"
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "*int"):
		return "an integer"
	case strings.HasPrefix(t, "float"), strings.HasPrefix(t, "*float"):
		return "a number"
	case strings.HasSuffix(t, "string"):
		return "a string"
	case strings.HasSuffix(t, "bool"):
		return "a boolean"
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case strings.HasPrefix(t, "map"), strings.Contains(t, "Input"):
		return "an object"
	}
	return t
}

// decodeGenerateRequest parses and validates the body of POST /generate
// for a model whose context length is contextLen.
func decodeGenerateRequest(b []byte, contextLen int) (*genRequest, error) {
	var in generateInput
	if err := decodeJSON(b, &in); err != nil {
		return nil, err
	}
	req := &genRequest{SkipSpecial: true, MaxNewTokens: defaultMaxNewTokens}
	if in.RID != nil {
		req.RID = *in.RID
	}
	if req.RID == "" {
		req.RID = newRID()
	}
	switch {
	case in.InputIDs != nil:
		ids, err := inputIDs(in.InputIDs)
		if err != nil {
			return nil, err
		}
		req.InputIDs = ids
	case in.Text != nil:
		req.text = in.Text // the server encodes it with its tokenizer
		req.InputIDs = tokenize.Bytes{}.Encode(*in.Text)
		if len(req.InputIDs) == 0 {
			return nil, errField("text", "cannot be empty")
		}
	default:
		return nil, errField("input_ids", "either text or input_ids should be provided")
	}
	if in.Stream != nil && *in.Stream {
		return nil, errField("stream", "streaming is not supported by the simulator")
	}
	if in.ReturnLogprob != nil {
		req.ReturnLogprob = *in.ReturnLogprob
	}
	if sp := in.SamplingParams; sp != nil {
		if err := sp.validate(req); err != nil {
			return nil, err
		}
	}
	if err := fitContext(req, contextLen); err != nil {
		return nil, err
	}
	return req, nil
}

// fitContext refuses a /generate request that does not fit the context
// length as SGLang's TokenizerManager._validate_one_request does
// (python/sglang/srt/managers/tokenizer_manager.py), in its words: an
// input of contextLen tokens or more, or an input and max_new_tokens of
// more than contextLen together (older SGLang versions refuse them equal
// too).
func fitContext(req *genRequest, contextLen int) error {
	in := len(req.InputIDs)
	if in >= contextLen {
		return errField("input_ids", "The input (%d tokens) is longer than the model's context length (%d tokens).", in, contextLen)
	}
	if total := in + req.MaxNewTokens; total > contextLen {
		return errField("sampling_params.max_new_tokens", "Requested token count exceeds the model's maximum context length "+
			"of %d tokens. You requested a total of %d tokens: %d tokens from the input messages and %d tokens for the "+
			"completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.",
			contextLen, total, in, req.MaxNewTokens)
	}
	return nil
}

// inputIDs validates input_ids: not empty, no negative id (the decoder
// refused null and non-integer ids).
func inputIDs(ids []int32) ([]int32, error) {
	if len(ids) == 0 {
		return nil, errField("input_ids", "cannot be empty")
	}
	for i, id := range ids {
		if id < 0 {
			return nil, errField(fmt.Sprintf("input_ids[%d]", i), "negative token id %d", id)
		}
	}
	return ids, nil
}

// planInput is the JSON of POST /actloop/plan.
type planInput struct {
	InputIDs llm.TokenIDs `json:"input_ids"`
}

// decodePlanRequest parses and validates the body of POST /actloop/plan:
// the input ids of a generation about to start on a model whose context
// length is contextLen.
func decodePlanRequest(b []byte, contextLen int) ([]int32, error) {
	var in planInput
	if err := decodeJSON(b, &in); err != nil {
		return nil, err
	}
	if in.InputIDs == nil {
		return nil, errField("input_ids", "field required")
	}
	if len(in.InputIDs) > contextLen {
		return nil, errField("input_ids", "%d tokens exceed the context length of %d", len(in.InputIDs), contextLen)
	}
	return inputIDs(in.InputIDs)
}

// validate checks sp as SamplingParams.verify does and copies what the
// simulator uses into req.
func (sp *samplingInput) validate(req *genRequest) error {
	const p = "sampling_params."
	if v := sp.MaxNewTokens; v != nil {
		if *v < 0 {
			return errField(p+"max_new_tokens", "must be at least 0, got %d", *v)
		}
		req.MaxNewTokens = *v
	}
	if v := sp.Temperature; v != nil && (*v < 0 || math.IsInf(*v, 0)) {
		return errField(p+"temperature", "must be a non-negative finite number, got %v", *v)
	}
	if v := sp.TopP; v != nil && !(*v > 0 && *v <= 1) {
		return errField(p+"top_p", "must be in (0, 1], got %v", *v)
	}
	if v := sp.MinP; v != nil && !(*v >= 0 && *v <= 1) {
		return errField(p+"min_p", "must be in [0, 1], got %v", *v)
	}
	if v := sp.TopK; v != nil && *v != -1 && *v < 1 {
		return errField(p+"top_k", "must be -1 (disable) or at least 1, got %d", *v)
	}
	for i, id := range sp.StopTokenIDs {
		if id == nil {
			continue // SGLang drops nulls
		}
		if *id < 0 {
			return errField(fmt.Sprintf(p+"stop_token_ids[%d]", i), "negative token id %d", *id)
		}
		req.StopTokenIDs = append(req.StopTokenIDs, *id)
	}
	req.Stop = sp.Stop
	if sp.SkipSpecialTokens != nil {
		req.SkipSpecial = *sp.SkipSpecialTokens
	}
	if sp.NoStopTrim != nil {
		req.NoStopTrim = *sp.NoStopTrim
	}
	if raw, ok := sp.CustomParams[replyParam]; ok && !isNull(raw) {
		var reply string
		if err := json.Unmarshal(raw, &reply); err != nil {
			return errField(p+"custom_params."+replyParam, "must be a string")
		}
		req.Reply = &reply
	}
	return nil
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

// newRID returns a random rid as SGLang makes one (uuid4().hex: 32 hex).
func newRID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand documents it)
	return hex.EncodeToString(b[:])
}

// Response side: what TokenizerManager returns for one non-streamed request
// (python/sglang/srt/managers/tokenizer_manager.py, _handle_batch_output and
// _handle_abort_req), with finish_reason from BaseFinishReason.to_json
// (python/sglang/srt/managers/schedule_batch.py).

// generateOutput is the body of a /generate answer.
type generateOutput struct {
	Text      string        `json:"text"`
	OutputIDs *llm.TokenIDs `json:"output_ids,omitempty"`
	MetaInfo  metaOutput    `json:"meta_info"`
}

type metaOutput struct {
	ID                  string         `json:"id"`
	FinishReason        map[string]any `json:"finish_reason"`
	PromptTokens        *int           `json:"prompt_tokens,omitempty"`
	WeightVersion       *string        `json:"weight_version,omitempty"`
	CompletionTokens    int            `json:"completion_tokens"`
	CachedTokens        *int           `json:"cached_tokens,omitempty"`
	E2ELatency          *float64       `json:"e2e_latency,omitempty"`
	OutputTokenLogprobs *logprobList   `json:"output_token_logprobs,omitempty"`
}

// logprobList marshals as SGLang's output_token_logprobs:
// [[logprob, token_id, null], ...], each log-prob in its shortest float32 form.
type logprobList struct {
	ids []int32
	lps []float32
}

func (l *logprobList) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 24*len(l.ids)+2)
	b = append(b, '[')
	for i, id := range l.ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		b = strconv.AppendFloat(b, float64(l.lps[i]), 'g', -1, 32)
		b = append(b, ',')
		b = strconv.AppendInt(b, int64(id), 10)
		b = append(b, ",null]"...)
	}
	return append(b, ']'), nil
}

// outputText is the text SGLang would return for ids: special tokens
// skipped if asked, a matched stop token or stop string trimmed unless
// no_stop_trim.
func outputText(v *vocab, req *genRequest, p *plan, ids []int32, complete bool) string {
	if complete && !req.NoStopTrim && p.kind == finishStopToken && len(ids) > 0 {
		ids = ids[:len(ids)-1]
	}
	var text string
	if req.SkipSpecial {
		kept := make([]int32, 0, len(ids))
		for _, id := range ids {
			if !v.special(id) {
				kept = append(kept, id)
			}
		}
		text = v.tok.Decode(kept)
	} else {
		text = v.tok.Decode(ids)
	}
	if complete && !req.NoStopTrim && p.kind == finishStopString {
		if i := strings.Index(text, p.matchedStr); i >= 0 {
			text = text[:i]
		}
	}
	return text
}
