// Package agent holds the step logic of a mini-swe-agent style agent as pure
// functions: rendering the prompt templates, parsing the one shell command
// out of a model turn, recognising a submission in a command's output, and
// checking limits. Apart from Load, which reads a configuration file, it
// does no I/O and keeps no state, so a rollout worker can replay or test a
// trajectory step by step, and every function is safe for concurrent use.
//
// A Config is a mini-swe-agent (v1) configuration: Parse and Load read its
// YAML as PyYAML reads it, and its Jinja templates render as Jinja2 renders
// them, values printed as Python prints them (with the gonja engine;
// testdata holds Jinja2's own renders of mini-swe-agent's configurations to
// compare with).
//
// A trajectory, as mini-swe-agent's DefaultAgent runs it (v1.17.5,
// src/minisweagent/agents/default.py), with c = Config.For(task, calls):
//
//	messages = Opening(…)                  // system: c.System, user: c.Instance(task)
//	                                       // (or the sample's own messages or ids: SampleOpening)
//	loop:
//	    CheckLimits(limits, usage)            // error → end: EndingLimitsExceeded
//	    out = model(messages, MaxNewTokens(…)) // append assistant: out; calls++
//	    action, err = c.ParseAction(out)
//	    *FormatError → append user: c.FormatErrorFor(fe); continue
//	    result = sandbox(action)
//	    timed out → append user: c.Timeout(action, partial); continue
//	    HasFinished(result.Output, result.ReturnCode) → end: EndingSubmitted, the text is the answer
//	    append user: c.Observation(action, result.Output, result.ReturnCode)
//	end: append TerminatingMessage(ending, text)
//
// Format errors and timeouts go back to the model and the loop goes on; only
// limits and a submission end it, and a command that printed the submission
// marker but failed does not submit. Where this package departs from
// mini-swe-agent it says so where it does: ParseAction (CRLF, empty commands,
// ASCII \s), the built-in configuration (default.yaml), the order a YAML
// dict prints in (pyDict) and cost_limit (Config.CostLimit).
package agent
