package traj

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/actloop/actloop/internal/agent"
	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/pkg/schema"
)

// A Transition is one step's change to a trajectory: the only way a worker
// or the coordinator changes one (Store.Commit). Each checks the status it
// starts from, sets the fields it owns, and says what the step appends to
// the messages and token arrays.
type Transition interface {
	// apply changes t, a copy of the loaded state, at now, and returns
	// what the step appends. t's token ids are those loaded, if any.
	apply(t *Trajectory, now time.Time) (appended, error)
}

// ErrTransition is a transition from a status that does not allow it.
var ErrTransition = errors.New("transition not allowed from this status")

// appended is what a transition adds to the message list and the token
// arrays (after emptying them, with reset).
type appended struct {
	reset    bool
	messages []schema.Message
	tokens   []int32
	logprobs []float32
	mask     []int8
	versions []int32
	uneven   bool // log-probs given for a different number of tokens
}

// add appends tokens with their log-probs (nil: 0), loss mask and weight
// version.
func (a *appended) add(tokens []int32, logprobs []float32, mask int8, version int32) {
	if logprobs != nil && len(logprobs) != len(tokens) {
		a.uneven = true
		return
	}
	a.tokens = append(a.tokens, tokens...)
	for i := range tokens {
		var lp float32
		if logprobs != nil {
			lp = logprobs[i]
		}
		a.logprobs = append(a.logprobs, lp)
		a.mask = append(a.mask, mask)
		a.versions = append(a.versions, version)
	}
}

// user appends a user message and its prompt tokens (untrained).
func (a *appended) user(u UserTurn) {
	a.messages = append(a.messages, schema.Message{Role: cmp.Or(u.Role, schema.RoleUser), Content: u.Content})
	a.add(u.Tokens, nil, 0, -1)
}

func from(t *Trajectory, tr Transition, allowed ...Status) error {
	if slices.Contains(allowed, t.Status) {
		return nil
	}
	return fmt.Errorf("%T from %s: %w", tr, t.Status, ErrTransition)
}

// UserTurn is a message to the model (a task, an observation, a format
// error's feedback, a terminating message) and its tokens: the message as
// the chat template renders it, then the generation prompt that follows it
// (none after a terminating message). Role is schema.RoleUser ("" too), or
// schema.RoleTool for a tool call's result.
type UserTurn struct {
	Role    string
	Content string
	Tokens  []int32
}

// Started: the sandbox is up (starting → needs_generation). Messages are
// the system prompt and the task; Prompt their tokens up to the first
// generation prompt.
type Started struct {
	Owner, Handle string
	Messages      []schema.Message
	Prompt        []int32
}

func (s Started) apply(t *Trajectory, _ time.Time) (appended, error) {
	if err := from(t, s, StatusStarting); err != nil {
		return appended{}, err
	}
	t.Status, t.Owner, t.Handle, t.PromptLen = StatusNeedsGeneration, s.Owner, s.Handle, len(s.Prompt)
	a := appended{messages: s.Messages}
	a.add(s.Prompt, nil, 0, -1)
	return a, nil
}

// Turn is a model's whole turn: its output tokens with their log-probs and
// the weight version that produced them, the tokens that close the turn
// (untrained), the output as text (the assistant message), and the request
// id it ran under, which the trajectory keeps for its next turns ("": the
// trajectory's own).
type Turn struct {
	Output    []int32
	Logprobs  []float32
	Version   int32
	CloseTurn []int32
	Text      string
	RID       string
	// Finish is how the generation ended, JSON of an llm.Finish, for a
	// proxy-flow turn (its reply says so); "" otherwise.
	Finish string
}

// add appends the turn and counts it; t holds the context it continued.
func (u Turn) add(t *Trajectory, a *appended) {
	a.add(u.Output, u.Logprobs, 1, u.Version)
	a.add(u.CloseTurn, nil, 0, -1)
	a.messages = append(a.messages, schema.Message{Role: schema.RoleAssistant, Content: u.Text})
	t.Calls++
	t.GenTokens += len(u.Output)
	t.GenCtx = len(t.Tokens) - t.Segment + len(u.Output)
	if u.RID != "" {
		t.RID = u.RID
	}
	t.Resuming, t.TurnGen, t.Finish = false, 0, u.Finish
}

// Generated: the model's turn holds an action (needs_generation →
// needs_env_step).
type Generated struct {
	Turn
	Action string
}

func (g Generated) apply(t *Trajectory, _ time.Time) (appended, error) {
	if err := from(t, g, StatusNeedsGeneration); err != nil {
		return appended{}, err
	}
	var a appended
	g.Turn.add(t, &a)
	t.Status, t.Action, t.FormatErrors = StatusNeedsEnvStep, g.Action, 0
	return a, nil
}

// FormatErrored: the model's turn holds no valid action; Feedback tells it
// so, and it generates again (needs_generation → needs_generation).
type FormatErrored struct {
	Turn
	Feedback UserTurn
}

func (f FormatErrored) apply(t *Trajectory, _ time.Time) (appended, error) {
	if err := from(t, f, StatusNeedsGeneration); err != nil {
		return appended{}, err
	}
	var a appended
	f.Turn.add(t, &a)
	a.user(f.Feedback)
	t.FormatErrors++
	return a, nil
}

// Interrupted: a generation aborted for a preemption or a pause keeps what
// it produced (possibly nothing, when the abort came before prefill) and
// its request id, and waits to resume; the status stays needs_generation.
type Interrupted struct {
	Output    []int32
	Logprobs  []float32
	Version   int32
	RID       string
	Preempted bool // for a higher-priority step (else a pause)
}

func (i Interrupted) apply(t *Trajectory, now time.Time) (appended, error) {
	if err := from(t, i, StatusNeedsGeneration); err != nil {
		return appended{}, err
	}
	n := len(i.Output)
	var a appended
	a.add(i.Output, i.Logprobs, 1, i.Version)
	if i.RID != "" {
		t.RID = i.RID
	}
	t.Resuming = true
	t.TurnGen += n
	t.GenTokens += n
	t.GenCtx = len(t.Tokens) - t.Segment + n
	if i.Preempted {
		t.Preempts++
		t.PreemptedAt = now
	}
	return a, nil
}

// Closing is the turn that ends a trajectory's conversation in flow f when
// it ends as e (submission: the submitted text), nil when f appends none.
func Closing(f agent.Flow, tmpl tokenize.ChatTemplate, e agent.Ending, submission string) *UserTurn {
	m, ids, ok := f.Closing(tmpl, e, submission)
	if !ok {
		return nil
	}
	return &UserTurn{Role: m.Role, Content: m.Content, Tokens: ids}
}

// LimitReached: a limit ends the trajectory before its next model call
// (needs_generation → finishing), or, for the wall clock, during its
// sandbox's setup (starting → terminated: there is no sandbox to take a
// diff of, and no conversation) or while a proxy-flow agent works
// between calls (needs_env_step → finishing). Limit names it (schema.LimitStep, …);
// Closing is the message that ends the conversation, if any (none from
// starting).
type LimitReached struct {
	Limit, Reason string
	Closing       *UserTurn
}

func (l LimitReached) apply(t *Trajectory, now time.Time) (appended, error) {
	if err := from(t, l, StatusNeedsGeneration, StatusStarting, StatusNeedsEnvStep); err != nil {
		return appended{}, err
	}
	starting := t.Status == StatusStarting
	if t.Status == StatusNeedsEnvStep {
		t.Commands++ // a proxy-flow agent's work since its last answer
	}
	t.Status, t.Reason, t.Limit, t.End = StatusFinishing, l.Reason, l.Limit, schema.StatusLimitExceeded
	if l.Limit == schema.LimitFormatError {
		t.End = schema.StatusFormatErrorLimit
	}
	if starting {
		t.Status, t.FinishedAt = StatusTerminated, now
		return appended{}, nil
	}
	var a appended
	if l.Closing != nil {
		a.user(*l.Closing)
	}
	return a, nil
}

// Called: a proxy-flow agent called its endpoint (starting or
// needs_env_step → needs_generation; docs/agent.md, "The proxy flow"). The
// call's tokens go to the stream untrained, its messages to the result's
// list, and its sampling fields wait for its generation. From starting,
// Owner and Handle are the env-worker's and the sandbox's, as Started's;
// from needs_env_step the agent's work since the previous reply counts as
// one command. apply needs t's token ids loaded: a new segment starts at
// their end.
type Called struct {
	Owner, Handle string
	// Append are the tokens the call adds; NewSegment says they start a
	// new segment (always at the first call).
	Append     []int32
	NewSegment bool
	// Messages are what the call adds to the result's messages: those
	// after the previous call's reply, or all of them for a new segment.
	Messages []schema.Message
	// Call is the call's own sampling fields, JSON (Trajectory.Call).
	Call string
}

func (c Called) apply(t *Trajectory, _ time.Time) (appended, error) {
	if err := from(t, c, StatusStarting, StatusNeedsEnvStep); err != nil {
		return appended{}, err
	}
	agentStep(t, c.Owner, c.Handle)
	if c.NewSegment || len(t.SegmentStarts) == 0 {
		t.Segment = len(t.Tokens)
		t.SegmentStarts = append(slices.Clip(t.SegmentStarts), t.Segment)
	}
	if t.PromptLen == 0 {
		t.PromptLen = len(t.Tokens) + len(c.Append)
	}
	t.Status, t.Call, t.Action = StatusNeedsGeneration, c.Call, ""
	a := appended{messages: c.Messages}
	a.add(c.Append, nil, 0, -1)
	return a, nil
}

// agentStep records what a proxy-flow env step did before its end: from
// starting, the sandbox its agent runs in (owner and handle, as Started);
// from an env step, the agent's work since its last answer, one command.
func agentStep(t *Trajectory, owner, handle string) {
	if t.Status == StatusStarting {
		t.Owner, t.Handle = owner, handle
		return
	}
	t.Commands++
}

// AgentExited: a proxy-flow agent exited, or was lost (starting or
// needs_env_step → finishing): with Code 0 it submitted its work (reason
// "submitted"), else it failed, and Reason says how (its code and its
// output's tail). Owner and Handle as Called's, from starting.
type AgentExited struct {
	Owner, Handle string
	Code          int
	Reason        string
}

func (x AgentExited) apply(t *Trajectory, _ time.Time) (appended, error) {
	if err := from(t, x, StatusStarting, StatusNeedsEnvStep); err != nil {
		return appended{}, err
	}
	agentStep(t, x.Owner, x.Handle)
	t.Status, t.Call, t.LastExit = StatusFinishing, "", x.Code
	if x.Code == 0 {
		t.Reason, t.End = ReasonSubmitted, schema.StatusSubmitted
	} else {
		t.Reason, t.End = x.Reason, schema.StatusFailed
	}
	return appended{}, nil
}

// Restarted: a trajectory whose tokens went stale starts again: its
// messages, tokens, counts and request id go, and a fresh sandbox starts
// (the env start closes the old one) (needs_generation → starting).
type Restarted struct{}

func (r Restarted) apply(t *Trajectory, _ time.Time) (appended, error) {
	if err := from(t, r, StatusNeedsGeneration); err != nil {
		return appended{}, err
	}
	t.Calls, t.GenTokens, t.Commands, t.TurnGen, t.GenCtx, t.PromptLen = 0, 0, 0, 0, 0, 0
	t.RID, t.Resuming, t.Action, t.Reason = "", false, "", ""
	t.Segment, t.SegmentStarts, t.Call, t.Finish = 0, nil, "", ""
	t.Status = StatusStarting
	t.FormatErrors, t.End, t.Limit, t.Replaced = 0, "", "", 0
	t.Restarts++
	return appended{reset: true}, nil
}

// Observed: the action ran; its observation goes to the model
// (needs_env_step → needs_generation). Handle, when set, is the sandbox's
// new handle (rebuilt by replay).
type Observed struct {
	Ran         Ran
	Observation UserTurn
}

func (o Observed) apply(t *Trajectory, _ time.Time) (appended, error) {
	if err := from(t, o, StatusNeedsEnvStep); err != nil {
		return appended{}, err
	}
	o.Ran.apply(t)
	t.Status = StatusNeedsGeneration
	t.LastObs = len(o.Observation.Tokens)
	var a appended
	a.user(o.Observation)
	return a, nil
}

// Submitted: the action submitted the work (needs_env_step → finishing).
// Ran as for Observed; Closing is the message that ends the conversation,
// if any.
type Submitted struct {
	Ran     Ran
	Closing *UserTurn
}

func (s Submitted) apply(t *Trajectory, _ time.Time) (appended, error) {
	if err := from(t, s, StatusNeedsEnvStep); err != nil {
		return appended{}, err
	}
	s.Ran.apply(t)
	t.Status, t.Reason, t.End = StatusFinishing, ReasonSubmitted, schema.StatusSubmitted
	var a appended
	if s.Closing != nil {
		a.user(*s.Closing)
	}
	return a, nil
}

// ReasonSubmitted is the reason of a trajectory whose action submitted.
const ReasonSubmitted = "submitted"

// Ran is what running the pending action left: the digest of its outcome
// (ExecDigest), whether its output held invalid UTF-8 that the
// observation holds replaced, and, when its sandbox was lost and rebuilt
// by replay first, the new sandbox's handle.
type Ran struct {
	Digest   string
	Exit     int // the command's exit code
	Replaced bool
	Replay   Replay
}

// Replay is a sandbox rebuilt by replaying the commands that ran in the
// lost one: its handle, and how many replayed commands had an outcome other
// than their first run's (the sandbox may not be the one the model saw).
type Replay struct {
	Handle   string
	Diverged int
}

func (r Replay) apply(t *Trajectory) {
	if r.Handle != "" {
		t.Handle = r.Handle
		t.Replays++
		t.Diverged += r.Diverged
	}
}

func (r Ran) apply(t *Trajectory) {
	t.Action = ""
	t.Commands++
	d := r.Digest
	if d == "" {
		d = "-" // no digest: nothing to check a replay against
	}
	if t.Digests != "" {
		t.Digests += " "
	}
	t.Digests += d
	t.LastExit = r.Exit
	if r.Replaced {
		t.Replaced++
	}
	r.Replay.apply(t)
}

// ExecDigest is the digest a command's outcome is recorded by: the first
// 16 hex digits of the SHA-256 of its exit code and output.
func ExecDigest(output string, exitCode int) string {
	h := sha256.New()
	fmt.Fprintf(h, "%d\x00", exitCode)
	io.WriteString(h, output)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// CommandDigests splits t.Digests: one per command run ("-" where none
// was recorded).
func (t *Trajectory) CommandDigests() []string { return strings.Fields(t.Digests) }

// Finished: the diff is taken and scored (finishing → terminated); the
// result follows.
type Finished struct {
	Reason string
	Diff   string
	Reward float64
	// RewardComponents and RewardError: the reward's named parts, and why
	// the reward endpoint gave none (schema.ResultHead's fields).
	RewardComponents map[string]float64
	RewardError      string
	Tests            map[string]string // each listed test's outcome, for samples that list tests
	// Replay: the sandbox was rebuilt by replay to take the diff.
	Replay Replay
}

func (f Finished) apply(t *Trajectory, now time.Time) (appended, error) {
	if err := from(t, f, StatusFinishing); err != nil {
		return appended{}, err
	}
	t.Status, t.Reason, t.Diff, t.Reward, t.Tests, t.FinishedAt = StatusTerminated, f.Reason, f.Diff, f.Reward, f.Tests, now
	t.RewardComponents, t.RewardError = f.RewardComponents, f.RewardError
	f.Replay.apply(t)
	return appended{}, nil
}

// Failed: the sample's own environment failed at the start (its sandbox
// could not be set up, its prompt not rendered): it ends (starting →
// terminated) with a result of status failed, published by the worker
// like any other end.
type Failed struct{ Reason string }

func (f Failed) apply(t *Trajectory, now time.Time) (appended, error) {
	if err := from(t, f, StatusStarting); err != nil {
		return appended{}, err
	}
	t.Status, t.Reason, t.End, t.FinishedAt = StatusTerminated, f.Reason, schema.StatusFailed, now
	return appended{}, nil
}

// Aborted: a trajectory that cannot finish, or that the trainer aborts,
// ends (any live status → aborted); the coordinator publishes its result.
// End is the result's status: schema.StatusFailed, StatusAborted, or
// StatusFallback ("" too).
type Aborted struct{ End, Reason string }

func (ab Aborted) apply(t *Trajectory, now time.Time) (appended, error) {
	if t.Status.Terminal() {
		return appended{}, fmt.Errorf("%T from %s: %w", ab, t.Status, ErrTransition)
	}
	t.Status, t.Reason, t.FinishedAt, t.End = StatusAborted, ab.Reason, now, cmp.Or(ab.End, schema.StatusFallback)
	t.Limit = ""
	return appended{}, nil
}

// Stolen is Then, committed by a gen-worker that took the step from
// another replica's queue: the trajectory moves to Replica atomically with
// the step.
type Stolen struct {
	Replica string
	Then    Transition
}

func (s Stolen) apply(t *Trajectory, now time.Time) (appended, error) {
	a, err := s.Then.apply(t, now)
	t.Replica = s.Replica
	return a, err
}
