package agent

import (
	"fmt"

	"github.com/actloop/actloop/pkg/schema"
)

// Ending is how a trajectory ends: the TerminatingException subclass that
// ends mini-swe-agent's DefaultAgent.run (v1.17.5, agents/default.py).
// Format errors and timeouts are not endings; they go back to the model.
type Ending int

const (
	// EndingSubmitted: a command's output submitted (HasFinished).
	EndingSubmitted Ending = iota + 1
	// EndingLimitsExceeded: a limit was reached before a model call
	// (CheckLimits). actloop's own limits (token budget, wall clock) end
	// this way too.
	EndingLimitsExceeded
)

// String returns the exception's class name, which mini-swe-agent's run
// returns as the exit status.
func (e Ending) String() string {
	switch e {
	case EndingSubmitted:
		return "Submitted"
	case EndingLimitsExceeded:
		return "LimitsExceeded"
	}
	return fmt.Sprintf("Ending(%d)", int(e))
}

// TerminatingMessage returns the message mini-swe-agent appends to the
// conversation when a run ends: a user message holding str(e) of the
// terminating exception. Submitted is raised with the submission's text
// (HasFinished's text), so that is the content; LimitsExceeded is raised
// without arguments, so its content is empty, and so is any other
// ending's. submission is read only for EndingSubmitted.
func TerminatingMessage(e Ending, submission string) schema.Message {
	m := schema.Message{Role: schema.RoleUser}
	if e == EndingSubmitted {
		m.Content = submission
	}
	return m
}
