package llm

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrInvalidRequest marks a request that was rejected before sending.
	ErrInvalidRequest = errors.New("invalid request")
	// ErrBadResponse marks a server answer that does not decode or is
	// inconsistent; the message names the field.
	ErrBadResponse = errors.New("bad response")
)

// maxErrorBody bounds HTTPError.Body.
const maxErrorBody = 4 << 10

// HTTPError is a non-2xx answer from the server.
type HTTPError struct {
	Status int
	// Body is the start of the response body (at most 4 KiB). SGLang puts
	// errors in {"error": {"message": …}}.
	Body string
}

// Error reports the status and the start of the body.
func (e *HTTPError) Error() string {
	body := strings.TrimSpace(e.Body)
	if body == "" {
		return fmt.Sprintf("http status %d", e.Status)
	}
	return fmt.Sprintf("http status %d: %s", e.Status, body)
}

// transportError is a failure to exchange a request and response with the
// server (connection refused, reset, cut short).
type transportError struct{ err error }

func (e *transportError) Error() string { return e.err.Error() }
func (e *transportError) Unwrap() error { return e.err }

// Temporary reports whether err may go away if the same call is tried later:
// a connection error, a 5xx answer, or a deadline. A 4xx answer, a bad
// response, an invalid request and a cancelled context are not temporary.
func Temporary(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, ErrBadResponse) || errors.Is(err, ErrInvalidRequest) {
		return false
	}
	var he *HTTPError
	if errors.As(err, &he) {
		return he.Status >= 500
	}
	var te *transportError
	if errors.As(err, &te) {
		return true
	}
	return errors.Is(err, context.DeadlineExceeded)
}

func badResponse(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadResponse, fmt.Sprintf(format, args...))
}
