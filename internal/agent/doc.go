// Package agent holds the step logic of a mini-swe-agent style agent as pure
// functions: rendering the prompt templates, parsing the one shell command
// out of a model turn, recognising a submission in a command's output, and
// checking limits. Apart from Load, which reads a configuration file, it
// does no I/O and keeps no state, so a rollout worker can replay or test a
// trajectory step by step, and every function is safe for concurrent use.
//
// A Config is a mini-swe-agent (v1) configuration: Parse and Load read its
// YAML, and its Jinja templates render as Jinja2 renders them (with the
// gonja engine; testdata holds Jinja2's own renders of mini-swe-agent's
// configurations to compare with).
//
// A trajectory, as mini-swe-agent's DefaultAgent runs it:
//
//	messages = [system: Config.System(vars), user: Config.Instance(task, vars)]
//	loop:
//	    CheckLimits(limits, usage)            // error → terminal (ErrLimitsExceeded)
//	    out = model(messages, MaxNewTokens(…)) // append assistant: out
//	    action, err = c.ParseAction(out)
//	    *FormatError → append user: Config.FormatErrorFor(fe); continue
//	    result = sandbox(action)
//	    timed out → append user: Config.Timeout(action, partial); continue
//	    Submission(result.Output) submitted → terminal, the text is the answer
//	    append user: Config.Observation(action, result.Output, result.ReturnCode)
//
// Format errors and timeouts go back to the model and the loop goes on; only
// limits and a submission end it. Where this package departs from
// mini-swe-agent it says so where it does: ParseAction (CRLF, empty commands,
// ASCII \s) and the built-in configuration (default.yaml).
package agent
