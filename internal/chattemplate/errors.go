package chattemplate

import (
	"errors"
	"fmt"
	"strconv"
)

// ErrNoTemplate means the model has no chat template, or not the one asked for.
var ErrNoTemplate = errors.New("no chat template")

// ErrUnsupported means the template uses a construct this package does not
// render as Jinja2 would; the error names the construct.
var ErrUnsupported = errors.New("unsupported template construct")

// RaiseError is the error a template raises with raise_exception(msg).
type RaiseError struct {
	Message string
}

func (e *RaiseError) Error() string { return "template raised: " + e.Message }

// PrefixError means the rendering of the conversation so far is not a
// prefix of the rendering of the longer conversation, so the new turn is not
// an append: the template rewrites earlier text (Qwen3 drops earlier
// reasoning, some templates move the system prompt or add a date).
type PrefixError struct {
	// Offset is the first byte at which the two renderings differ.
	Offset int
	// Prev and Next are short excerpts of both renderings from a little
	// before Offset.
	Prev, Next string
}

func (e *PrefixError) Error() string {
	return fmt.Sprintf("earlier rendering is not a prefix: renderings diverge at byte %d: prev %s, next %s",
		e.Offset, strconv.Quote(e.Prev), strconv.Quote(e.Next))
}
