package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"
)

// Message is one chat message of a trajectory.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Roles of chat messages. A tool message is the result of an assistant's
// tool call (the tool_call flow).
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Agent flows (Sample.Flow): how a reply becomes an action and an outcome
// the next message.
const (
	// FlowBash: mini-swe-agent's: one ```bash block per reply; outcomes as
	// user messages. The default.
	FlowBash = "bash"
	// FlowToolCall: a function-calling agent's: bash and submit listed as
	// tools in the system message, one <tool_call> per reply, outcomes as
	// tool messages (<tool_response>). Needs a chat template that renders
	// tools (ACTLOOP_CHAT_TEMPLATE=qwen3 or qwen3-nothink).
	FlowToolCall = "tool_call"
	// FlowProxy: the sample's own agent (Sample.Agent) runs in its sandbox
	// and calls an OpenAI-compatible endpoint for this trajectory alone;
	// each call is one generation step (docs/agent.md, "The proxy flow").
	FlowProxy = "proxy"
)

// Flows lists the agent flows.
var Flows = []string{FlowBash, FlowToolCall, FlowProxy}

// GenStep asks the gen-worker of Replica to run generation step Seq of a
// trajectory. Published on actloop.gen.<replica>.hi or .lo.
type GenStep struct {
	V       int    `json:"v"`
	TrajID  string `json:"traj_id"`
	Seq     int64  `json:"seq"`
	Replica string `json:"replica"`
}

// EnvKind says what an env step does.
type EnvKind string

// Env step kinds.
const (
	EnvStart  EnvKind = "start"  // start and bootstrap the sandbox (any env-worker)
	EnvExec   EnvKind = "exec"   // run the trajectory's pending action (the owner)
	EnvFinish EnvKind = "finish" // diff, eval, clean up, publish the result (the owner)
	EnvClose  EnvKind = "close"  // remove the sandbox of an aborted trajectory (the owner)
)

// EnvStep asks an env-worker to run environment step Seq of a trajectory.
// Start steps go to actloop.env.start, the others to actloop.env.<owner>.
type EnvStep struct {
	V      int     `json:"v"`
	TrajID string  `json:"traj_id"`
	Seq    int64   `json:"seq"`
	Kind   EnvKind `json:"kind"`
	// Reason says why a finish step ends the trajectory ("submitted",
	// "limits: …").
	Reason string `json:"reason,omitempty"`
}

// EventType names a lifecycle event.
type EventType string

// Event types.
const (
	// EventFailed: a worker gave up on a step (redeliveries exhausted or a
	// permanent error); the coordinator ends the trajectory with a fallback.
	EventFailed EventType = "failed"
	// EventControl: the audit of a trainer's control call (pause, resume,
	// abort): Op, From (how and from where it came), Detail (the request,
	// its first KiB), Reason (its outcome); no trajectory.
	EventControl EventType = "control"
)

// Event reports something about a trajectory to the coordinator on
// actloop.events.
type Event struct {
	V      int       `json:"v"`
	Type   EventType `json:"type"`
	TrajID string    `json:"traj_id"`
	Seq    int64     `json:"seq"`
	Worker string    `json:"worker,omitempty"`
	Op     string    `json:"op,omitempty"`
	From   string    `json:"from,omitempty"`
	Detail string    `json:"detail,omitempty"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// Result statuses: how a trajectory ended (siiRL-agentic's SUBMITTED,
// EXCEEDED and FAILED, told apart further). Only a submitted trajectory is
// scored by default (the env-worker's ACTLOOP_REWARD_ON); the ends without
// trainable tokens (Trainable false) carry reward 0, the prompt's token ids
// where the trajectory got that far, and the reason.
const (
	// StatusSubmitted: the agent submitted; the reward is the eval's.
	StatusSubmitted = "submitted"
	// StatusLimitExceeded: a limit ended the agent's run before it
	// submitted (ResultHead.Limit names it); reward 0 unless the
	// env-workers evaluate every end (ACTLOOP_REWARD_ON=always).
	StatusLimitExceeded = "limit_exceeded"
	// StatusFormatErrorLimit: the model's replies held no valid action
	// limits.format_error_limit times in a row; scored as
	// StatusLimitExceeded.
	StatusFormatErrorLimit = "format_error_limit"
	// StatusFailed: the sample's own environment failed: its sandbox could
	// not be set up (a setup command failed, the workspace or image is
	// unusable), its prompt could not be rendered, or actloop refused the
	// sample (Reason "rejected: …"). Retrying the same sample fails again.
	StatusFailed = "failed"
	// StatusFallback: actloop could not finish the trajectory (a step
	// failed for good, its state was lost, it stalled); the sample itself
	// may be fine.
	StatusFallback = "fallback"
	// StatusAborted: the trainer ended the trajectory before its end
	// (actloop.control.abort).
	StatusAborted = "aborted"
)

// Statuses lists every result status.
var Statuses = []string{StatusSubmitted, StatusLimitExceeded, StatusFormatErrorLimit, StatusFailed, StatusFallback,
	StatusAborted}

// Trainable reports whether a result of status holds the agent's whole run
// (its generated tokens under their loss mask): submitted or ended by a
// limit. The others carry no trainable tokens.
func Trainable(status string) bool {
	return status == StatusSubmitted || status == StatusLimitExceeded || status == StatusFormatErrorLimit
}

// Limits a trajectory can end on (ResultHead.Limit). All but
// LimitContextLength are the sample's (Limits); LimitContextLength is the
// inference server's context length, reached when the next model call's
// input leaves no room for a new token.
const (
	LimitStep          = "step_limit"
	LimitTokenBudget   = "token_budget"
	LimitWallClock     = "wall_clock"
	LimitFormatError   = "format_error_limit"
	LimitContextLength = "context_length"
)

// Purposes of a sample (Sample.Purpose).
const (
	PurposeTrain      = "train"
	PurposeValidation = "validation"
)

// Result is a finished trajectory, published on actloop.results.
type Result struct {
	ResultHead
	// Tokens is the whole conversation as token ids; LossMask is 1 exactly
	// on generated tokens; Logprobs and Versions are 0 and -1 elsewhere.
	Tokens   []int32   `json:"tokens"`
	Logprobs []float32 `json:"logprobs"`
	LossMask []int8    `json:"loss_mask"`
	Versions []int32   `json:"versions"`
	Messages []Message `json:"messages"`
	// Segments, for a proxy-flow trajectory, is where each segment of its
	// token stream starts (the first at 0): a call that did not extend the
	// previous call's prompt and reply (the agent rewrote its history)
	// starts a new one, its prompt rendered whole (docs/agent.md, "The
	// token stream"). Absent for the built-in flows, whose stream is one.
	Segments []int  `json:"segments,omitempty"`
	Diff     string `json:"diff,omitempty"`
	// Tests holds each test the sample lists (env.tests) with its outcome in
	// the eval: PASSED, FAILED, ERROR, SKIPPED or MISSING (not in the eval's
	// output). Absent for samples scored by exit code.
	Tests    map[string]string `json:"tests,omitempty"`
	Metadata json.RawMessage   `json:"metadata,omitempty"`
}

// ResultHead is a Result without its token arrays, messages, diff, tests
// and metadata: the message published on actloop.results.<traj_id>, and what the
// coordinator, the history predictor and a progress display act on. Body
// names the object that holds the rest (see BodyRef).
type ResultHead struct {
	V          int    `json:"v"`
	TrajID     string `json:"traj_id"`
	SampleID   string `json:"sample_id"`
	GroupID    string `json:"group_id"`
	GroupIndex int    `json:"group_index"`
	GroupSize  int    `json:"group_size,omitempty"`
	Family     string `json:"family,omitempty"`
	// Purpose is the sample's: "validation" for a validation rollout, ""
	// for training.
	Purpose string `json:"purpose,omitempty"`
	// Status is how the trajectory ended (StatusSubmitted, …); Limit names
	// the limit that ended it, for StatusLimitExceeded and
	// StatusFormatErrorLimit.
	Status string `json:"status"`
	Limit  string `json:"limit,omitempty"`
	// Reason says in words why the trajectory ended: "submitted", the
	// limit reached, what went wrong, with any note on its scoring.
	Reason string  `json:"reason"`
	Reward float64 `json:"reward"`
	// RewardComponents are the reward's named parts: the other numeric
	// fields of the eval's JSON reward line, or of the reward endpoint's
	// answer (docs/agent.md, "Reward"); absent when there are none.
	RewardComponents map[string]float64 `json:"reward_components,omitempty"`
	// RewardError says why the reward endpoint gave no reward (the reward
	// is then 0, and the status the trajectory's); absent when it did, or
	// when none was asked.
	RewardError string `json:"reward_error,omitempty"`
	// Replica is the inference replica the trajectory ran on last; "" when
	// it never ran.
	Replica    string `json:"replica,omitempty"`
	MinVersion int32  `json:"min_version"`
	MaxVersion int32  `json:"max_version"`
	// Stale: some generated token is more than max_staleness weight
	// versions behind the version current when the result was made.
	// Restarts counts how often the trajectory started again because it
	// went stale (stale_policy restart).
	Stale    bool `json:"stale,omitempty"`
	Restarts int  `json:"restarts,omitempty"`
	// Replays counts the times the trajectory's sandbox was lost and
	// rebuilt by replaying the commands that had run; Diverged the replayed
	// commands whose outcome (exit code and output) differed from their
	// first run: the sandbox the later turns ran in may not be the one the
	// model saw.
	Replays  int `json:"replays,omitempty"`
	Diverged int `json:"diverged,omitempty"`
	// ReplacedOutputs counts the commands whose output held bytes that are
	// not valid UTF-8: their observations (in messages, and so in tokens)
	// hold each invalid sequence replaced with U+FFFD, and end with a line
	// saying so (sandbox.ReplacedNote).
	ReplacedOutputs int `json:"replaced_outputs,omitempty"`
	Turns           int `json:"turns"`
	Commands        int `json:"commands"`
	GenTokens       int `json:"gen_tokens"`
	// NumTokens is the length of the token arrays; PromptLen the number of
	// tokens before the first generated one.
	NumTokens int `json:"num_tokens"`
	PromptLen int `json:"prompt_len"`
	// StaleTokens counts the generated tokens more than max_staleness
	// weight versions behind (see Stale; under stale_policy mask their
	// loss mask is 0).
	StaleTokens int       `json:"stale_tokens,omitempty"`
	AdmittedAt  time.Time `json:"admitted_at"`
	FinishedAt  time.Time `json:"finished_at"`
	// Body names the stored body. Every head on actloop.results.<traj_id> has one.
	Body *BodyRef `json:"body,omitempty"`
}

// Solved reports whether the agent submitted and the eval passed.
func (r *ResultHead) Solved() bool { return r.Status == StatusSubmitted && r.Reward >= 1 }

// PredictRequest asks predictor-gw (request-reply on actloop.predict) for a
// trajectory's remaining work, given how far it has come.
type PredictRequest struct {
	V         int    `json:"v"`
	TrajID    string `json:"traj_id"`
	GroupID   string `json:"group_id,omitempty"`
	Family    string `json:"family,omitempty"`
	Turns     int    `json:"turns"`      // model calls so far
	GenTokens int    `json:"gen_tokens"` // generated tokens so far
	TurnSeq   int64  `json:"turn_seq"`   // the trajectory's seq when asked
	// Task is sent for a sample not yet admitted (no state to read), so a
	// predictor that reads the prompt can still answer.
	Task string `json:"task,omitempty"`
	// What the conversation so far says, as the gen-worker sees it after a
	// model call: the context after the reply (of which PromptTokens are
	// the prompt), the command the reply asks to run (its first
	// MaxPredictCommandBytes) and its kind (CommandKind), and the previous
	// command's observation (its tokens; 0 before the first) and exit code.
	ContextTokens int         `json:"context_tokens,omitempty"`
	PromptTokens  int         `json:"prompt_tokens,omitempty"`
	Command       string      `json:"command,omitempty"`
	CommandKind   CommandKind `json:"command_kind,omitempty"`
	ObsTokens     int         `json:"obs_tokens,omitempty"`
	ExitCode      int         `json:"exit_code,omitempty"`
}

// MaxPredictCommandBytes bounds PredictRequest.Command: a prediction needs
// the command's head, not a heredoc's whole file.
const MaxPredictCommandBytes = 1024

// CommandKind is what a shell command mostly does, as a remaining-length
// predictor reads it (ClassifyCommand).
type CommandKind string

// Command kinds.
const (
	CommandRead   CommandKind = "read"   // look at files: cat, head, sed -n, ls, find
	CommandSearch CommandKind = "search" // grep, rg, ag
	CommandEdit   CommandKind = "edit"   // change files: sed -i, a heredoc or redirect into a file, patch, python writing a file
	CommandTest   CommandKind = "test"   // run tests: pytest, go test, make test, tox, npm test
	CommandRun    CommandKind = "run"    // run a program or script: python, node, go run, make
	CommandVCS    CommandKind = "vcs"    // git
	CommandSubmit CommandKind = "submit" // the submission (COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT)
	CommandOther  CommandKind = "other"
)

// CommandKinds lists every kind, in a fixed order (a predictor's feature
// order).
var CommandKinds = []CommandKind{CommandRead, CommandSearch, CommandEdit, CommandTest, CommandRun, CommandVCS, CommandSubmit, CommandOther}

// PredictReply answers a PredictRequest. Error is set when no prediction
// could be made; the caller falls back to fcfs for that trajectory.
type PredictReply struct {
	V               int     `json:"v"`
	RemainingTokens float64 `json:"remaining_tokens"`
	RemainingTurns  float64 `json:"remaining_turns"`
	Source          string  `json:"source,omitempty"` // backend and evidence, e.g. "history:group"
	Error           string  `json:"error,omitempty"`
}

// Prediction reports a trajectory's progress and predicted remaining work
// to the coordinator on actloop.predictions, after each of its model calls.
// The coordinator drops one whose TurnSeq is older than what it already
// knows of the trajectory.
type Prediction struct {
	V               int     `json:"v"`
	TrajID          string  `json:"traj_id"`
	Replica         string  `json:"replica"`
	TurnSeq         int64   `json:"turn_seq"`
	Turns           int     `json:"turns"`
	GenTokens       int     `json:"gen_tokens"`
	RemainingTokens float64 `json:"remaining_tokens"`
	RemainingTurns  float64 `json:"remaining_turns"`
	// Source is the predictor's evidence; empty when there is no
	// prediction (the remaining work is then unknown, and 0).
	Source string `json:"source,omitempty"`
	// ContextTokens is the trajectory's context after its last reply, of
	// which PromptTokens are its prompt: what it holds in its server's KV
	// pool.
	ContextTokens int `json:"context_tokens,omitempty"`
	PromptTokens  int `json:"prompt_tokens,omitempty"`
	// Finishing: its last reply is in and its eval follows; it needs no
	// more generation (nor KV).
	Finishing bool      `json:"finishing,omitempty"`
	At        time.Time `json:"at"`
}

// Validate implements validator.
func (r *PredictRequest) Validate() error {
	var p problems
	stepFields(&p, r.TrajID, r.TurnSeq)
	nonNegative(&p, "turns", int64(r.Turns))
	nonNegative(&p, "gen_tokens", int64(r.GenTokens))
	nonNegative(&p, "context_tokens", int64(r.ContextTokens))
	nonNegative(&p, "prompt_tokens", int64(r.PromptTokens))
	nonNegative(&p, "obs_tokens", int64(r.ObsTokens))
	if r.PromptTokens > r.ContextTokens && r.ContextTokens > 0 {
		p.add("prompt_tokens", "more than context_tokens")
	}
	if len(r.Command) > MaxPredictCommandBytes {
		p.add("command", "longer than %d bytes (%d)", MaxPredictCommandBytes, len(r.Command))
	}
	if r.CommandKind != "" && !slices.Contains(CommandKinds, r.CommandKind) {
		p.add("command_kind", "unknown kind %q", clip(string(r.CommandKind)))
	}
	return p.err()
}

// Validate implements validator.
func (r *PredictReply) Validate() error {
	var p problems
	if r.Error == "" && (r.RemainingTokens < 0 || r.RemainingTurns < 0) {
		p.add("remaining_tokens", "must be >= 0")
	}
	return p.err()
}

// Validate implements validator.
func (r *Prediction) Validate() error {
	var p problems
	stepFields(&p, r.TrajID, r.TurnSeq)
	if r.Replica == "" {
		p.add("replica", "missing")
	}
	if r.RemainingTokens < 0 || r.RemainingTurns < 0 {
		p.add("remaining_tokens", "must be >= 0")
	}
	nonNegative(&p, "context_tokens", int64(r.ContextTokens))
	nonNegative(&p, "prompt_tokens", int64(r.PromptTokens))
	if r.PromptTokens > r.ContextTokens {
		p.add("prompt_tokens", "more than context_tokens")
	}
	return p.err()
}

// Heartbeat says a gen-worker is alive and serving its replica; it is kept
// in NATS KV under "gen.<replica>.<worker>".
type Heartbeat struct {
	V       int    `json:"v"`
	Worker  string `json:"worker"`
	Replica string `json:"replica"`
	Slots   int    `json:"slots"`
	Running int    `json:"running"`
	// Cumulative since the worker started: tokens generated, and prompt
	// tokens prefilled again because the server's prefix cache had lost
	// them (a context it had seen before).
	GeneratedTokens   int64 `json:"generated_tokens"`
	ReprefilledTokens int64 `json:"reprefilled_tokens"`
	// The inference server's own figures at the worker's last read of its
	// /metrics (llm.Load; all zero when it reports none): its KV pool in
	// tokens, the share of it held by running requests, its running and
	// queued requests, and its prefix cache hit rate (−1: not reported).
	ServerKVTokens     int     `json:"server_kv_tokens,omitempty"`
	ServerKVUsage      float64 `json:"server_kv_usage,omitempty"`
	ServerRunning      int     `json:"server_running,omitempty"`
	ServerWaiting      int     `json:"server_waiting,omitempty"`
	ServerCacheHitRate float64 `json:"server_cache_hit_rate,omitempty"`
	// TokenSeconds is the worker's measure of a request's seconds per
	// output token at its server's load (generation time over output
	// tokens, an exponentially weighted mean); 0 before any generation.
	TokenSeconds float64   `json:"token_seconds,omitempty"`
	At           time.Time `json:"at"`
}

// Validate implements validator.
func (h *Heartbeat) Validate() error {
	var p problems
	if h.Worker == "" {
		p.add("worker", "missing")
	}
	if h.Replica == "" {
		p.add("replica", "missing")
	}
	return p.err()
}

// Pause modes.
const (
	// PauseAbort aborts in-flight generations, keeps their partial output
	// and resumes them after the pause.
	PauseAbort = "abort"
	// PauseDrain lets in-flight generations finish.
	PauseDrain = "drain"
)

// Stale policies: what happens to a trajectory whose oldest generated token
// is more than MaxStaleness weight versions behind.
const (
	StaleKeep    = "keep"    // deliver it, flagged stale
	StaleRestart = "restart" // discard its tokens and start again in a fresh sandbox
	StaleMask    = "mask"    // deliver it with the loss mask 0 on the stale tokens
)

// Control is the control state in NATS KV (bucket actloop_control, key
// "state"), written by the coordinator and watched by every worker.
type Control struct {
	V      int   `json:"v"`
	Paused bool  `json:"paused"`
	Epoch  int64 `json:"epoch"` // counts pauses; a worker reports paused for an epoch
	// WeightVersion is the version of the weights the inference servers
	// hold; every token generated is recorded with it, as an int32 (a
	// result's versions): it is at most MaxWeightVersion.
	WeightVersion int64  `json:"weight_version"`
	Mode          string `json:"mode,omitempty"` // PauseAbort or PauseDrain while paused
	// MaxStaleness (in weight versions; -1: no limit) and StalePolicy are
	// the coordinator's settings, published here so every worker applies the
	// same ones.
	MaxStaleness int64  `json:"max_staleness"`
	StalePolicy  string `json:"stale_policy,omitempty"`
	// Scheduling is the coordinator's ACTLOOP_SCHEDULING (action or
	// trajectory), published so that a gen-worker whose own setting
	// differs refuses to take work; "" from a coordinator that does not
	// publish it.
	Scheduling string `json:"scheduling,omitempty"`
	// Term is the term (leader lease revision) of the coordinator that
	// wrote it; a coordinator of an earlier term may no longer write it.
	Term uint64    `json:"term,omitempty"`
	At   time.Time `json:"at"`
}

// MaxWeightVersion is the largest weight version: a result records each
// token's version as an int32 (Result.Versions, its body's int32 array,
// MinVersion and MaxVersion), so every weight version on the wire is an
// int32, whatever the Go type that carries it. A resume beyond it is
// refused.
const MaxWeightVersion = math.MaxInt32

// StaleBefore is the oldest weight version still fresh: a token of an
// older version is stale. It is math.MinInt64 without a limit.
func (c *Control) StaleBefore() int64 {
	if c.MaxStaleness < 0 {
		return math.MinInt64
	}
	return c.WeightVersion - c.MaxStaleness
}

// PauseReport is a gen-worker's answer to a pause, in NATS KV (bucket
// actloop_control, key "gen.<replica>.<worker>").
type PauseReport struct {
	V       int    `json:"v"`
	Worker  string `json:"worker"`
	Replica string `json:"replica"`
	Epoch   int64  `json:"epoch"`
	Paused  bool   `json:"paused"`
	// Aborted counts the generations this worker aborted for the pause and
	// KeptTokens the partial output they had produced, now committed.
	Aborted    int   `json:"aborted"`
	KeptTokens int64 `json:"kept_tokens"`
	// ServerMS is the server's share of the pause (mode abort): from this
	// worker's abort call until the last aborted generation's answer was
	// in.
	ServerMS float64   `json:"server_ms,omitempty"`
	At       time.Time `json:"at"`
}

// PauseRequest is the body of POST /v1/pause and actloop.control.pause.
type PauseRequest struct {
	Mode      string `json:"mode"`       // PauseAbort (default) or PauseDrain
	TimeoutMS int64  `json:"timeout_ms"` // 0: the coordinator's default
}

// PauseReply answers a pause once every live gen-worker reported paused.
type PauseReply struct {
	Epoch      int64   `json:"epoch"`
	Mode       string  `json:"mode"`
	Workers    int     `json:"workers"`
	Aborted    int     `json:"aborted"`
	KeptTokens int64   `json:"kept_tokens"`
	WaitedMS   float64 `json:"waited_ms"`
	// ServerMS is the largest of the workers' ServerMS: WaitedMS less it
	// is what actloop itself spent.
	ServerMS float64 `json:"server_ms,omitempty"`
}

// ResumeRequest is the body of POST /v1/resume and actloop.control.resume.
type ResumeRequest struct {
	// WeightVersion is the version the servers now hold, in [0,
	// MaxWeightVersion]; it may not go back. Absent: unchanged.
	WeightVersion *int64 `json:"weight_version"`
}

// AbortRequest is the body of POST /v1/abort and actloop.control.abort:
// end these trajectories now, and every waiting or running member of these
// groups, each with a result of status aborted. Reason, if given, is added
// to the results' reason.
type AbortRequest struct {
	TrajIDs  []string `json:"traj_ids,omitempty"`
	GroupIDs []string `json:"group_ids,omitempty"`
	Reason   string   `json:"reason,omitempty"`
}

// MaxAbortIDs bounds the ids of one AbortRequest, so that a request of
// ids of the longest kind fits NATS's default max_payload (1 MiB); name
// groups to abort more.
const MaxAbortIDs = 4096

// AbortReply answers an abort: the trajectories it ended (waiting samples
// and running trajectories), and the ids it was given that are neither
// (finished already, or unknown).
type AbortReply struct {
	Aborted  []string      `json:"aborted"`
	NotFound []string      `json:"not_found,omitempty"`
	Failed   []AbortFailed `json:"failed,omitempty"`
}

// Cancel tells the gen-workers, on actloop.cancel (core NATS, no stream: at
// most once), that these trajectories have ended (aborted by the trainer):
// each aborts on its inference server a generation it runs for one of
// them, so the server's slot is freed at once instead of at the end of the
// turn. One missed costs only that generation's rest: its output is never
// committed.
type Cancel struct {
	V       int      `json:"v"`
	TrajIDs []string `json:"traj_ids"`
}

// MaxCancelIDs bounds the ids of one Cancel, as MaxAbortIDs an abort's:
// an abort of more (groups) sends several.
const MaxCancelIDs = MaxAbortIDs

// AbortFailed is an id an abort could not end (Redis or NATS failing): try
// again.
type AbortFailed struct {
	ID    string `json:"id"`
	Error string `json:"error"`
}

// ResultPurpose is the purpose a result carries for a sample's:
// PurposeValidation, or "" for training (the sample's "" or "train").
func ResultPurpose(samplePurpose string) string {
	if samplePurpose == PurposeValidation {
		return PurposeValidation
	}
	return ""
}

// Validate implements validator.
func (r *AbortRequest) Validate() error {
	var p problems
	if len(r.TrajIDs)+len(r.GroupIDs) == 0 {
		p.add("traj_ids", "names no trajectory and no group (give traj_ids, group_ids or both)")
	}
	if n := len(r.TrajIDs) + len(r.GroupIDs); n > MaxAbortIDs {
		p.add("traj_ids", "%d ids exceed the limit of %d", n, MaxAbortIDs)
	}
	for _, l := range []struct {
		field string
		ids   []string
	}{{"traj_ids", r.TrajIDs}, {"group_ids", r.GroupIDs}} {
		for i, id := range l.ids {
			if !ValidID(id) {
				p.add(l.field, "id %d: %s", i, idProblem(id))
				break
			}
		}
	}
	if len(r.Reason) > 1024 {
		p.add("reason", "longer than 1024 bytes")
	}
	return p.err()
}

// ControlStatus answers GET /v1/control and actloop.control.get.
type ControlStatus struct {
	Control Control       `json:"control"`
	Workers []PauseReport `json:"workers"`
}

// APIError is the body of a failed trainer call (HTTP or NATS): the error,
// and for a pause that timed out the workers that did not answer.
type APIError struct {
	Error   string   `json:"error"`
	Missing []string `json:"missing,omitempty"`
}

// GroupDone says every rollout of a group has a result (fallbacks
// included), on actloop.groups; or, with Reason set, that the group ended
// without that and never will (a member was refused: its index taken, its
// group_size another member's, its id used before).
type GroupDone struct {
	V       int      `json:"v"`
	GroupID string   `json:"group_id"`
	Size    int      `json:"size"`
	TrajIDs []string `json:"traj_ids"` // in group_index order; empty when Reason is set
	// Reason says why the group ended incomplete; "" for a complete group.
	// The members admitted still run, and each has its result.
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// Complete reports whether every member of the group has a result
// (TrajIDs lists them), as opposed to a group ended incomplete.
func (g *GroupDone) Complete() bool { return g.Reason == "" }

// DLQEntry is a message no consumer could take, on actloop.dlq.
type DLQEntry struct {
	V        int    `json:"v"`
	Subject  string `json:"subject"`
	Consumer string `json:"consumer,omitempty"`
	Reason   string `json:"reason"`
	// Data is the original bytes (base64 in JSON), cut to fit the server's
	// max_payload when Truncated; Size and SHA256 are the whole original's.
	Data      []byte              `json:"data"`
	Size      int                 `json:"size"`
	SHA256    string              `json:"sha256"`
	Truncated bool                `json:"truncated,omitempty"`
	Headers   map[string][]string `json:"headers,omitempty"`
	At        time.Time           `json:"at"`
}

// Validate implements validator.
func (g *GenStep) Validate() error {
	var p problems
	stepFields(&p, g.TrajID, g.Seq)
	if g.Replica == "" {
		p.add("replica", "missing")
	}
	return p.err()
}

// Validate implements validator.
func (e *EnvStep) Validate() error {
	var p problems
	stepFields(&p, e.TrajID, e.Seq)
	switch e.Kind {
	case EnvStart, EnvExec, EnvFinish, EnvClose:
	case "":
		p.add("kind", "missing")
	default:
		p.add("kind", "unknown kind %q", clip(string(e.Kind)))
	}
	return p.err()
}

// Validate implements validator.
func (e *Event) Validate() error {
	var p problems
	if e.Type != EventControl {
		stepFields(&p, e.TrajID, e.Seq)
	}
	switch e.Type {
	case EventFailed, EventControl:
	case "":
		p.add("type", "missing")
	default:
		p.add("type", "unknown type %q", clip(string(e.Type)))
	}
	return p.err()
}

// Validate implements validator.
func (r *Result) Validate() error {
	var p problems
	headFields(&p, r.TrajID, r.Status, r.RewardComponents)
	n := len(r.Tokens)
	if len(r.Logprobs) != n || len(r.LossMask) != n || len(r.Versions) != n {
		p.add("tokens", "tokens, logprobs, loss_mask and versions differ in length (%d, %d, %d, %d)",
			n, len(r.Logprobs), len(r.LossMask), len(r.Versions))
	}
	if n != r.NumTokens {
		p.add("num_tokens", "is %d, the body holds %d tokens", r.NumTokens, n)
	}
	return p.err()
}

// Validate implements validator: a head as published, with its body's
// name.
func (r *ResultHead) Validate() error {
	var p problems
	headFields(&p, r.TrajID, r.Status, r.RewardComponents)
	if r.NumTokens < 0 {
		p.add("num_tokens", "must be >= 0, got %d", r.NumTokens)
	}
	r.Body.validate(&p)
	return p.err()
}

func headFields(p *problems, trajID, status string, components map[string]float64) {
	if !ValidID(trajID) {
		p.add("traj_id", "invalid id %q", clip(trajID))
	}
	if err := CheckRewardComponents(components); err != nil {
		p.add("reward_components", "%v", err)
	}
	if !slices.Contains(Statuses, status) {
		p.add("status", "unknown status %q (want one of %s)", clip(status), strings.Join(Statuses, ", "))
	}
}

// Validate implements validator.
func (c *Control) Validate() error {
	var p problems
	if c.Epoch < 0 {
		p.add("epoch", "must be >= 0")
	}
	weightVersion(&p, c.WeightVersion)
	switch c.Mode {
	case "", PauseAbort, PauseDrain:
	default:
		p.add("mode", "unknown mode %q (want abort or drain)", clip(c.Mode))
	}
	if c.MaxStaleness < -1 {
		p.add("max_staleness", "must be >= -1 (-1: no limit)")
	}
	switch c.StalePolicy {
	case "", StaleKeep, StaleRestart, StaleMask:
	default:
		p.add("stale_policy", "unknown policy %q (want keep, restart or mask)", clip(c.StalePolicy))
	}
	switch c.Scheduling {
	case "", "action", "trajectory":
	default:
		p.add("scheduling", "unknown mode %q (want action or trajectory)", clip(c.Scheduling))
	}
	return p.err()
}

func weightVersion(p *problems, v int64) {
	inRange(p, "weight_version", v, MaxWeightVersion, " (a result records versions as int32)")
}

// Validate implements validator.
func (r *PauseReport) Validate() error {
	var p problems
	if r.Worker == "" {
		p.add("worker", "missing")
	}
	if r.Epoch < 0 {
		p.add("epoch", "must be >= 0")
	}
	return p.err()
}

// Validate implements validator.
func (r *PauseRequest) Validate() error {
	var p problems
	switch r.Mode {
	case "", PauseAbort, PauseDrain:
	default:
		p.add("mode", "unknown mode %q (want abort or drain)", clip(r.Mode))
	}
	if r.TimeoutMS < 0 {
		p.add("timeout_ms", "must be >= 0")
	}
	return p.err()
}

// Validate implements validator.
func (r *ResumeRequest) Validate() error {
	var p problems
	if r.WeightVersion != nil {
		weightVersion(&p, *r.WeightVersion)
	}
	return p.err()
}

// Validate implements validator.
func (g *GroupDone) Validate() error {
	var p problems
	if g.GroupID == "" {
		p.add("group_id", "missing")
	}
	switch {
	case g.Size < 1:
		p.add("size", "must be >= 1, got %d", g.Size)
	case g.Reason == "" && len(g.TrajIDs) != g.Size:
		p.add("traj_ids", "want size (%d) ids, got %d", g.Size, len(g.TrajIDs))
	case len(g.TrajIDs) > g.Size:
		p.add("traj_ids", "want at most size (%d) ids, got %d", g.Size, len(g.TrajIDs))
	}
	return p.err()
}

// Validate implements validator.
func (d *DLQEntry) Validate() error {
	var p problems
	if d.Subject == "" {
		p.add("subject", "missing")
	}
	if d.Reason == "" {
		p.add("reason", "missing")
	}
	return p.err()
}

// Validate implements validator.
func (c *Cancel) Validate() error {
	var p problems
	switch n := len(c.TrajIDs); {
	case n == 0:
		p.add("traj_ids", "names no trajectory")
	case n > MaxCancelIDs:
		p.add("traj_ids", "%d ids exceed the limit of %d", n, MaxCancelIDs)
	}
	for i, id := range c.TrajIDs {
		if !ValidID(id) {
			p.add("traj_ids", "id %d: %s", i, idProblem(id))
			break
		}
	}
	return p.err()
}

func stepFields(p *problems, trajID string, seq int64) {
	if !ValidID(trajID) {
		p.add("traj_id", "%s", idProblem(trajID))
	}
	if seq < 0 {
		p.add("seq", "must be >= 0, got %d", seq)
	}
}

type validator interface{ Validate() error }

// Decode decodes and validates one message of type T.
func Decode[T any, PT interface {
	*T
	validator
}](b []byte) (T, error) {
	var v T
	if err := decode(b, &v); err != nil {
		return v, err
	}
	if err := PT(&v).Validate(); err != nil {
		var zero T
		return zero, err
	}
	return v, nil
}

// DecodeRequest decodes and validates an API request body (a trainer's
// pause, resume or abort): as Decode, but the schema version "v" is
// optional. An empty body is an empty request. As a sample, a request is
// read strictly: a field its type lacks, or one given twice, is refused by
// name, for a misspelt "weight_version" would resume without changing the
// version; so is invalid UTF-8 (an abort's reason).
func DecodeRequest[T any, PT interface {
	*T
	validator
}](b []byte) (T, error) {
	var v T
	if len(bytes.TrimSpace(b)) == 0 {
		return v, nil
	}
	if len(b) > MaxMessageBytes {
		return v, fieldErr("(message)", "%d bytes exceeds the limit of %d", len(b), MaxMessageBytes)
	}
	if err := checkUTF8(b); err != nil {
		return v, err
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return v, jsonErr(err)
	}
	var p problems
	checkFields(&p, b, reflect.TypeFor[T](), "", "v")
	if err := errors.Join(p.err(), PT(&v).Validate()); err != nil {
		var zero T
		return zero, err
	}
	return v, nil
}

// MsgID is the Nats-Msg-Id of a work message: "<traj_id>:<seq>:<kind>".
func MsgID(trajID string, seq int64, kind string) string {
	return fmt.Sprintf("%s:%d:%s", trajID, seq, kind)
}

// DefaultControl is the control state before a coordinator has written
// one: running, version 0, no staleness limit.
func DefaultControl() Control {
	return Control{V: Version, MaxStaleness: -1, StalePolicy: StaleKeep}
}
