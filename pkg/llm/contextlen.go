package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
)

// ContextLengthReader is a Generator whose server says its context length.
type ContextLengthReader interface {
	// ContextLength asks the server once for its context length: the most
	// tokens a request's input and output may hold together. 0 (and no
	// error) means the server does not say.
	ContextLength(ctx context.Context) (int, error)
}

var (
	_ ContextLengthReader = (*SGLang)(nil)
	_ ContextLengthReader = (*OpenAI)(nil)
)

// ErrContextLength matches (errors.Is) the error of a generation the server
// refused because its input and max_new_tokens do not fit the model's
// context length: a 400 whose message says so in SGLang's words
// (tokenizer_manager.py, _validate_one_request: "Requested token count
// exceeds the model's maximum context length of …", "The input (N tokens)
// is longer than the model's context length (M tokens).") or vLLM's ("This
// model's maximum context length is …", "… is longer than the maximum
// model length of …"). Retrying the same request fails again.
var ErrContextLength = errors.New("the request exceeds the model's context length")

// contextMessages are what SGLang's and vLLM's context-length refusals say,
// in lower case.
var contextMessages = []string{"maximum context length", "model's context length", "maximum model length"}

// Is reports whether e is a refusal that target names: ErrContextLength for
// a 400 whose message says the request exceeds the context length.
func (e *HTTPError) Is(target error) bool {
	if target != ErrContextLength || e.Status != http.StatusBadRequest {
		return false
	}
	body := strings.ToLower(e.Body)
	for _, m := range contextMessages {
		if strings.Contains(body, m) {
			return true
		}
	}
	return false
}

// ContextLength implements ContextLengthReader with GET /v1/models, whose
// max_model_len SGLang serves as the model's context length
// (python/sglang/srt/entrypoints/http_server.py, available_models:
// tokenizer_manager.model_config.context_len, what /generate checks a
// request against), and, for a server without it, GET /get_server_info's
// context_length (the server's --context-length argument, null when it was
// not given). 0 when neither says.
func (c *SGLang) ContextLength(ctx context.Context) (int, error) {
	n, err := c.modelsContextLength(ctx, "")
	if n > 0 || err != nil {
		return n, err
	}
	b, err := c.get(ctx, "/get_server_info")
	if notServed(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("context length: %w", err)
	}
	if n, err = decodeServerInfoContextLength(b); err != nil {
		return 0, fmt.Errorf("context length: /get_server_info: %w", err)
	}
	return n, nil
}

// ContextLength implements ContextLengthReader with GET /v1/models: the
// max_model_len of the model the client sends (its options' Model), or of
// the first model listed that has one (vLLM lists its served models first,
// then LoRA adapters, which have none: vllm/entrypoints/openai/models/
// serving.py, show_available_models, ModelCard.max_model_len =
// model_config.max_model_len). 0 when none has one.
func (c *OpenAI) ContextLength(ctx context.Context) (int, error) {
	return c.modelsContextLength(ctx, c.model)
}

// modelsContextLength is the context length GET /v1/models reports for
// model ("": the first that has one); 0 when the server does not serve the
// list or it names none.
func (c *httpCore) modelsContextLength(ctx context.Context, model string) (int, error) {
	b, err := c.get(ctx, "/v1/models")
	if notServed(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("context length: %w", err)
	}
	n, err := decodeModelsContextLength(b, model)
	if err != nil {
		return 0, fmt.Errorf("context length: /v1/models: %w", err)
	}
	return n, nil
}

// notServed reports whether err is a 4xx answer: the server has no such
// endpoint (or refuses it), which says nothing of its context length.
func notServed(err error) bool {
	var he *HTTPError
	return errors.As(err, &he) && he.Status >= 400 && he.Status < 500
}

// decodeModelsContextLength reads a /v1/models list ({"data": [{"id",
// "max_model_len"}, …]}, vLLM's and SGLang's ModelList): the max_model_len
// of the card whose id is model, or for model "" of the first card that has
// one. 0 when there is none (null or absent); ErrBadResponse for a body
// that is not such a list or a max_model_len that is not a positive
// integer.
func decodeModelsContextLength(b []byte, model string) (int, error) {
	var list struct {
		Data []struct {
			ID          string          `json:"id"`
			MaxModelLen json.RawMessage `json:"max_model_len"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		return 0, badResponse("%v", err)
	}
	for i, m := range list.Data {
		if model != "" && m.ID != model {
			continue
		}
		n, err := tokenCount(m.MaxModelLen)
		if err != nil {
			return 0, badResponse("data[%d].max_model_len: %v", i, err)
		}
		if n > 0 || model != "" {
			return n, nil
		}
	}
	return 0, nil
}

// decodeServerInfoContextLength reads SGLang's /get_server_info (its server
// arguments, the scheduler's info and more, in one object): context_length,
// 0 when null or absent; ErrBadResponse for a body that is not an object or
// a context_length that is not a positive integer.
func decodeServerInfoContextLength(b []byte) (int, error) {
	var info struct {
		ContextLength json.RawMessage `json:"context_length"`
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return 0, badResponse("%v", err)
	}
	n, err := tokenCount(info.ContextLength)
	if err != nil {
		return 0, badResponse("context_length: %v", err)
	}
	return n, nil
}

// maxContextLength bounds a context length read from a server: more than
// any model has, small enough that sums of token counts cannot overflow.
const maxContextLength = 1 << 40

// tokenCount reads a JSON token count: a positive integer (written as a
// float too, 32768.0), or null or absent for 0.
func tokenCount(raw json.RawMessage) (int, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return 0, nil
	}
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil {
		return 0, fmt.Errorf("%s is not a number", raw)
	}
	if f < 1 || f > maxContextLength || f != math.Trunc(f) {
		return 0, fmt.Errorf("%s is not a positive whole number of tokens", raw)
	}
	return int(f), nil
}
