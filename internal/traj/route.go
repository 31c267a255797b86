package traj

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/actloop/actloop/internal/agent"
	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/telemetry"
	"github.com/actloop/actloop/pkg/priority"
	"github.com/actloop/actloop/pkg/schema"
)

// Routing: which message follows a committed state, and how a finished
// trajectory becomes a result.
//
// The next message is derived from the trajectory's committed state alone, so
// a worker that finds its step already committed (a redelivery) can publish
// the follow-up again; the Nats-Msg-Id "<traj_id>:<seq>:<kind>" lets the
// stream's duplicate window swallow it if it went out before.

// Classifier tells the priority class of a trajectory's next gen step.
type Classifier interface {
	Class(replica, trajID string) string
}

// LowOnly puts every gen step in the low class (no snapshots yet).
type LowOnly struct{}

// Class implements Classifier.
func (LowOnly) Class(string, string) string { return priority.ClassLow }

// ErrNoNext: the trajectory is terminal; its follow-up is a result, which
// only Result builds.
var ErrNoNext = errors.New("terminal trajectory has no next step")

// Next is the message that follows t's committed state.
type Next struct {
	Subject string
	MsgID   string
	Msg     any
}

// NextOf returns the message that t's status calls for.
func NextOf(t *Trajectory, cls Classifier) (Next, error) {
	env := func(subject string, kind schema.EnvKind) Next {
		return Next{subject, t.MsgID(string(kind)),
			schema.EnvStep{V: schema.Version, TrajID: t.ID, Seq: t.Seq, Kind: kind, Reason: t.Reason}}
	}
	switch t.Status {
	case StatusStarting:
		return env(bus.SubjectEnvStart, schema.EnvStart), nil
	case StatusNeedsGeneration:
		// The replica is part of the id: a step moved to another replica
		// (its own went down) is not a duplicate of the one left behind.
		// Only a first generation waits in its priority class; a
		// trajectory under way (or interrupted) waits in the resume class.
		class := priority.StepClass(cls.Class(t.Replica, t.ID), t.Calls == 0 && !t.Resuming)
		return Next{bus.SubjectGen(t.Replica, class), t.MsgID("gen-" + t.Replica),
			schema.GenStep{V: schema.Version, TrajID: t.ID, Seq: t.Seq, Replica: t.Replica}}, nil
	case StatusNeedsEnvStep:
		return env(bus.SubjectEnv(t.Owner), schema.EnvExec), nil
	case StatusFinishing:
		return env(bus.SubjectEnv(t.Owner), schema.EnvFinish), nil
	case StatusTerminated, StatusAborted:
		return Next{}, ErrNoNext
	}
	return Next{}, fmt.Errorf("trajectory %s: unknown status %q", t.ID, t.Status)
}

// Publish publishes n in the trace of the trajectory (trace context from
// its stored traceparent).
func Publish(ctx context.Context, pub *bus.Publisher, traceparent string, n Next) error {
	return pub.Publish(telemetry.TrajContext(ctx, traceparent), n.Subject, n.MsgID, n.Msg)
}

// ResultMsgID is the Nats-Msg-Id of t's result.
func ResultMsgID(t *Trajectory) string { return t.MsgID("result") }

// MsgID is the Nats-Msg-Id of the message of kind for t's current seq:
// schema.MsgID, with ":run<n>" after it for a trajectory admitted again
// (Run n > 0), whose seqs repeat those of its first run within the
// stream's duplicate window.
func (t *Trajectory) MsgID(kind string) string {
	id := schema.MsgID(t.ID, t.Seq, kind)
	if t.Run > 0 {
		id += fmt.Sprintf(":run%d", t.Run)
	}
	return id
}

// PublishResult publishes the result of a terminal trajectory (loading
// whatever t lacks) and lets its state expire after ttl. Publishing again
// is safe (see Results.Publish). ctl decides which tokens are stale.
func PublishResult(ctx context.Context, st *Store, w *Results, t *Trajectory, ttl time.Duration, ctl schema.Control) error {
	if !t.Status.Terminal() {
		return fmt.Errorf("result of %s: not terminal (%s)", t.ID, t.Status)
	}
	if t.Tokens == nil || t.Messages == nil {
		var err error
		if t, err = st.Load(ctx, t.ID, WithAll); err != nil {
			return err
		}
	}
	if err := w.Publish(telemetry.TrajContext(ctx, t.Trace), Result(t, ctl), ResultMsgID(t)); err != nil {
		return err
	}
	return st.Expire(ctx, t.ID, ttl)
}

// FallbackResult is a result from head alone (its ids, group fields,
// status, reason and times): status fallback unless head names another,
// reward 0, no tokens, for a trajectory whose state cannot be read (never
// created, or lost). The sample id is the trajectory id.
func FallbackResult(head schema.ResultHead) schema.Result {
	head.V, head.SampleID, head.Status, head.Reward = schema.Version, head.TrajID, cmp.Or(head.Status, schema.StatusFallback), 0
	head.MinVersion, head.MaxVersion = -1, -1
	return schema.Result{ResultHead: head, Tokens: []int32{}, Logprobs: []float32{}, LossMask: []int8{}, Versions: []int32{},
		Messages: []schema.Message{}}
}

// Result builds the result of a terminal trajectory loaded WithAll. One
// that did not run to its end (failed, fallback, aborted) carries no
// trainable tokens: only its prompt's, under a loss mask of 0, when it got
// that far. A generated token more than
// ctl.MaxStaleness versions older than ctl.WeightVersion is stale: the
// result says so, and under stale_policy mask its loss mask is 0. (Under
// restart a trajectory starts again at its next generation; one that went
// stale after its last is delivered flagged, as under keep.)
func Result(t *Trajectory, ctl schema.Control) schema.Result {
	s := t.Sample
	r := schema.Result{
		ResultHead: schema.ResultHead{V: schema.Version, TrajID: t.ID, SampleID: s.ID, GroupID: s.GroupID,
			GroupIndex: s.GroupIndex, GroupSize: s.GroupSize, Family: s.Family, Purpose: schema.ResultPurpose(s.Purpose), Status: t.ResultStatus(),
			Limit: t.Limit, Reason: t.Reason, Reward: t.Reward, RewardComponents: t.RewardComponents,
			RewardError: t.RewardError, Replica: t.Replica,
			Turns: t.Calls, Commands: t.Commands, GenTokens: t.GenTokens, AdmittedAt: t.AdmittedAt.UTC(),
			FinishedAt: t.FinishedAt.UTC(), MinVersion: -1, MaxVersion: -1, Restarts: t.Restarts, PromptLen: t.PromptLen,
			Replays: t.Replays, Diverged: t.Diverged, ReplacedOutputs: t.Replaced},
		Diff: t.Diff, Tests: t.Tests, Metadata: s.Metadata,
		Tokens: []int32{}, Logprobs: []float32{}, LossMask: []int8{}, Versions: []int32{}, Messages: t.Messages,
	}
	if r.Messages == nil {
		r.Messages = []schema.Message{}
	}
	if !schema.Trainable(r.Status) {
		r.Reward, r.RewardComponents = 0, nil
		if n := min(t.PromptLen, len(t.Tokens)); n > 0 {
			r.Tokens, r.Logprobs, r.LossMask, r.Versions = t.Tokens[:n], t.Logprobs[:n], make([]int8, n), t.Versions[:n]
			r.NumTokens = n
			if len(t.SegmentStarts) > 0 {
				r.Segments = []int{0} // the prompt: the first segment's start
			}
		} else {
			r.PromptLen = 0
		}
		return r
	}
	r.Tokens, r.Logprobs, r.LossMask, r.Versions = t.Tokens, t.Logprobs, t.Mask, t.Versions
	r.NumTokens = len(t.Tokens)
	r.Segments = t.SegmentStarts
	lo, hi := int32(math.MaxInt32), int32(-1)
	staleBefore := ctl.StaleBefore()
	if s.Validation() {
		staleBefore = math.MinInt64 // not training data: never stale
	}
	for i, m := range t.Mask {
		if m != 1 {
			continue
		}
		v := t.Versions[i]
		lo, hi = min(lo, v), max(hi, v)
		if int64(v) < staleBefore {
			if r.StaleTokens == 0 && ctl.StalePolicy == schema.StaleMask {
				r.LossMask = slices.Clone(t.Mask)
			}
			r.StaleTokens++
			if ctl.StalePolicy == schema.StaleMask {
				r.LossMask[i] = 0
			}
		}
	}
	r.Stale = r.StaleTokens > 0
	if hi >= 0 {
		r.MinVersion, r.MaxVersion = lo, hi
	}
	return r
}

// ResultStatus is the result status of t once its end is known: its End, or for a state written
// before ends were recorded, what its status and reason say.
func (t *Trajectory) ResultStatus() string {
	switch {
	case t.End != "":
		return t.End
	case t.Status == StatusAborted:
		return schema.StatusFallback
	case t.Reason == ReasonSubmitted || strings.HasPrefix(t.Reason, ReasonSubmitted+";"):
		return schema.StatusSubmitted
	}
	return schema.StatusLimitExceeded
}

// Pos is where a step stands against its trajectory's committed state.
type Pos int

// Positions of a step.
const (
	// PosCurrent: the step is the trajectory's next; run it.
	PosCurrent Pos = iota + 1
	// PosJustDone: the step was the last one committed; its follow-up may not
	// have gone out (a crash between commit and publish), so publish it again.
	PosJustDone
	// PosOld: a later step committed, so the follow-up was consumed; drop.
	PosOld
	// PosAhead: the state has not reached the step yet (should not happen:
	// steps are published after their commit); retry later.
	PosAhead
)

// PosOf places a step for seq against t.
func PosOf(t *Trajectory, seq int64) Pos {
	switch {
	case t.Seq == seq:
		return PosCurrent
	case t.Seq == seq+1:
		return PosJustDone
	case t.Seq > seq:
		return PosOld
	}
	return PosAhead
}

// ReportFailed tells the coordinator that step seq of a trajectory cannot be
// done; the coordinator ends the trajectory with a fallback result (or, if
// the step did commit, sends its follow-up again).
func ReportFailed(ctx context.Context, pub *bus.Publisher, now time.Time, worker, trajID string, seq int64, cause error) error {
	e := schema.Event{V: schema.Version, Type: schema.EventFailed, TrajID: trajID, Seq: seq, Worker: worker,
		Reason: cause.Error(), At: now.UTC()}
	return pub.Publish(ctx, bus.SubjectEvents, schema.MsgID(trajID, seq, "failed"), e)
}

// ReportProgress publishes p, a trajectory's progress report (and
// prediction, when it has one), to the coordinator at now.
func ReportProgress(ctx context.Context, pub *bus.Publisher, now time.Time, p schema.Prediction) error {
	p.At = now.UTC()
	return pub.Publish(ctx, bus.SubjectPredictions, schema.MsgID(p.TrajID, p.TurnSeq, "pred"), p)
}

// ProgressReport is t's progress report for the coordinator after a model call
// (ReportProgress, without a prediction): its turns, tokens and context, and
// whether it is finishing (its last reply is in).
func ProgressReport(t *Trajectory) schema.Prediction {
	return schema.Prediction{V: schema.Version, TrajID: t.ID, Replica: t.Replica, TurnSeq: t.Seq, Turns: t.Calls,
		GenTokens: t.GenTokens, ContextTokens: t.GenCtx, PromptTokens: min(t.PromptLen, t.GenCtx),
		Finishing: t.Status == StatusFinishing}
}

// PredictRequest is what predictor-gw is asked of t after a model call:
// its progress, and what its conversation says (the command the reply asks
// to run, cut to schema.MaxPredictCommandBytes at a character boundary,
// and its kind; the previous command's observation and exit code).
func PredictRequest(t *Trajectory) schema.PredictRequest {
	cmd := t.Action
	if n := schema.MaxPredictCommandBytes; len(cmd) > n {
		for n > 0 && !utf8.RuneStart(cmd[n]) {
			n--
		}
		cmd = cmd[:n]
	}
	r := schema.PredictRequest{V: schema.Version, TrajID: t.ID, GroupID: t.Sample.GroupID, Family: t.Sample.Family,
		Turns: t.Calls, GenTokens: t.GenTokens, TurnSeq: t.Seq, ContextTokens: t.GenCtx,
		PromptTokens: min(t.PromptLen, t.GenCtx), Command: cmd, ObsTokens: t.LastObs, ExitCode: t.LastExit}
	if t.Action != "" {
		r.CommandKind = agent.ClassifyCommand(t.Action)
	}
	return r
}
