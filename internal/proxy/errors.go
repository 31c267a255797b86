package proxy

import (
	"errors"
	"fmt"
	"net/http"
)

// ErrInvalidRequest is wrapped by every *RequestError: a request body the
// endpoint answers with 400.
var ErrInvalidRequest = errors.New("invalid request")

// ErrNoRoom: the trajectory has no room left for a generation (its context
// or token budget is spent), so no SamplingParams can be made. The endpoint
// decides what that means for the trajectory (a limit), not this package.
var ErrNoRoom = errors.New("no room left for a generation")

// ErrAborted: the generation was aborted (llm.FinishAbort), so there is no
// reply to build; the caller resumes or fails it.
var ErrAborted = errors.New("the generation was aborted")

// Codes of a RequestError, in OpenAI's words (its error objects carry
// "invalid_value", "unsupported_value" and the like as code).
const (
	CodeInvalid     = "invalid_value"     // malformed, of the wrong type, or out of range
	CodeUnsupported = "unsupported_value" // valid in OpenAI's API, not served by this endpoint
)

// RequestError is a request that cannot be served: Param is the JSON path
// of the field at fault ("messages[2].content[0].type"; "" for the body as
// a whole), Message says why, Code is CodeInvalid or CodeUnsupported.
type RequestError struct {
	Param, Message, Code string
}

func (e *RequestError) Error() string {
	if e.Param == "" {
		return e.Message
	}
	return e.Param + ": " + e.Message
}

// Unwrap makes every RequestError match ErrInvalidRequest.
func (e *RequestError) Unwrap() error { return ErrInvalidRequest }

func invalid(param, format string, args ...any) *RequestError {
	return &RequestError{Param: param, Message: fmt.Sprintf(format, args...), Code: CodeInvalid}
}

func unsupported(param, format string, args ...any) *RequestError {
	return &RequestError{Param: param, Message: fmt.Sprintf(format, args...), Code: CodeUnsupported}
}

// ErrorBody is OpenAI's error response, {"error": {"message", "type",
// "param", "code"}}, which OpenAI's clients parse and vLLM also answers
// with (ErrorResponse in vllm/entrypoints/openai/protocol.py, where code is
// the HTTP status instead).
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is ErrorBody's error.
type ErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// ErrorFor returns the HTTP status and body that answer err: 400 and
// "invalid_request_error" for a *RequestError, with its param and code;
// 500 and "server_error" for anything else.
func ErrorFor(err error) (int, ErrorBody) {
	var re *RequestError
	if errors.As(err, &re) {
		d := ErrorDetail{Message: re.Error(), Type: "invalid_request_error"}
		if re.Param != "" {
			p := re.Param
			d.Param = &p
		}
		if re.Code != "" {
			c := re.Code
			d.Code = &c
		}
		return http.StatusBadRequest, ErrorBody{Error: d}
	}
	return http.StatusInternalServerError, ErrorBody{Error: ErrorDetail{Message: err.Error(), Type: "server_error"}}
}
