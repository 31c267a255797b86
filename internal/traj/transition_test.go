package traj

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/actloop/actloop/pkg/schema"
)

// Each transition from each status: the statuses it leaves, the fields it
// sets and what it appends; every other status refuses it.
func TestTransitions(t *testing.T) {
	now := time.UnixMilli(5000)
	base := Trajectory{ID: "x", Seq: 3, Calls: 2, Commands: 1, GenTokens: 10, PromptLen: 4, TurnGen: 2, RID: "r", Resuming: true,
		Preempts: 1, Restarts: 0, Tokens: make([]int32, 20), Action: "ls", Handle: "h0", Digests: "ab"}
	obs := UserTurn{Content: "out", Tokens: []int32{7, 8}}
	turn := Turn{Output: []int32{1, 2, 3}, Logprobs: []float32{-1, -2, -3}, Version: 9, CloseTurn: []int32{4}, Text: "t"}
	ridTurn := turn
	ridTurn.RID = "first"
	tests := []struct {
		name  string
		tr    Transition
		from  []Status
		check func(t *Trajectory, a appended) string // "" = as wanted
	}{
		{"started", Started{Owner: "w", Handle: "h", Messages: []schema.Message{{Role: "system"}, {Role: "user"}}, Prompt: []int32{1, 2}},
			[]Status{StatusStarting}, func(t *Trajectory, a appended) string {
				if t.Status != StatusNeedsGeneration || t.Owner != "w" || t.Handle != "h" || t.PromptLen != 2 ||
					len(a.messages) != 2 || !slices.Equal(a.mask, []int8{0, 0}) || !slices.Equal(a.versions, []int32{-1, -1}) {
					return fmt.Sprintf("%+v %+v", t, a)
				}
				return ""
			}},
		{"generated", Generated{Turn: turn, Action: "cat f"}, []Status{StatusNeedsGeneration},
			func(t *Trajectory, a appended) string {
				if t.Status != StatusNeedsEnvStep || t.Action != "cat f" || t.Calls != 3 || t.GenTokens != 13 || t.GenCtx != 23 ||
					t.RID != "r" || t.Resuming || t.TurnGen != 0 || !slices.Equal(a.tokens, []int32{1, 2, 3, 4}) ||
					!slices.Equal(a.mask, []int8{1, 1, 1, 0}) || !slices.Equal(a.versions, []int32{9, 9, 9, -1}) ||
					!slices.Equal(a.logprobs, []float32{-1, -2, -3, 0}) || len(a.messages) != 1 || a.messages[0].Role != schema.RoleAssistant {
					return fmt.Sprintf("%+v %+v", t, a)
				}
				return ""
			}},
		{"generated under a new rid", Generated{Turn: ridTurn, Action: "cat f"}, []Status{StatusNeedsGeneration},
			func(t *Trajectory, a appended) string {
				if t.RID != "first" || t.Resuming || t.TurnGen != 0 {
					return fmt.Sprintf("%+v", t)
				}
				return ""
			}},
		{"format error", FormatErrored{Turn: ridTurn, Feedback: obs}, []Status{StatusNeedsGeneration},
			func(t *Trajectory, a appended) string {
				if t.Status != StatusNeedsGeneration || t.Calls != 3 || t.RID != "first" || t.Resuming ||
					!slices.Equal(a.tokens, []int32{1, 2, 3, 4, 7, 8}) ||
					len(a.messages) != 2 || a.messages[1] != (schema.Message{Role: schema.RoleUser, Content: "out"}) {
					return fmt.Sprintf("%+v %+v", t, a)
				}
				return ""
			}},
		{"preempted", Interrupted{Output: []int32{5}, Version: 9, RID: "rid", Preempted: true}, []Status{StatusNeedsGeneration},
			func(t *Trajectory, a appended) string {
				if t.Status != StatusNeedsGeneration || t.RID != "rid" || !t.Resuming || t.TurnGen != 3 || t.GenTokens != 11 || t.GenCtx != 21 ||
					t.Preempts != 2 || !t.PreemptedAt.Equal(now) || t.Calls != 2 || len(a.messages) != 0 ||
					!slices.Equal(a.mask, []int8{1}) {
					return fmt.Sprintf("%+v %+v", t, a)
				}
				return ""
			}},
		{"paused", Interrupted{RID: "rid"}, []Status{StatusNeedsGeneration},
			func(t *Trajectory, a appended) string {
				if t.RID != "rid" || !t.Resuming || t.TurnGen != 2 || t.Preempts != 1 || !t.PreemptedAt.IsZero() || len(a.tokens) != 0 {
					return fmt.Sprintf("%+v %+v", t, a)
				}
				return ""
			}},
		{"limit", LimitReached{Reason: "step limit"}, []Status{StatusNeedsGeneration, StatusStarting, StatusNeedsEnvStep},
			func(t *Trajectory, a appended) string {
				if t.Reason != "step limit" || len(a.tokens) != 0 || t.End != schema.StatusLimitExceeded {
					return fmt.Sprintf("%+v %+v", t, a)
				}
				return ""
			}},
		{"called", Called{Owner: "w", Handle: "h", Append: []int32{5, 6}, Messages: []schema.Message{{Role: "user", Content: "go"}},
			Call: `{"max_tokens":9}`}, []Status{StatusStarting, StatusNeedsEnvStep},
			func(t *Trajectory, a appended) string {
				// From starting: the sandbox's; from an env step: the
				// agent's work counts as a command. The first call starts
				// the stream's first segment, at its end (20 tokens here).
				owner, commands := "", 2
				if t.Owner == "w" {
					owner, commands = "w", 1
				}
				if t.Status != StatusNeedsGeneration || (owner == "w") != (t.Handle == "h") || t.Commands != commands ||
					t.Call != `{"max_tokens":9}` || t.Action != "" || t.Segment != 20 || !slices.Equal(t.SegmentStarts, []int{20}) ||
					t.PromptLen != 4 || !slices.Equal(a.tokens, []int32{5, 6}) || !slices.Equal(a.mask, []int8{0, 0}) || len(a.messages) != 1 {
					return fmt.Sprintf("%+v %+v", t, a)
				}
				return ""
			}},
		{"exited", AgentExited{Code: 0}, []Status{StatusStarting, StatusNeedsEnvStep},
			func(t *Trajectory, a appended) string {
				if t.Status != StatusFinishing || t.End != schema.StatusSubmitted || t.Reason != ReasonSubmitted || len(a.tokens) != 0 {
					return fmt.Sprintf("%+v %+v", t, a)
				}
				return ""
			}},
		{"exited failing", AgentExited{Code: 2, Reason: "the agent exited with code 2"}, []Status{StatusStarting, StatusNeedsEnvStep},
			func(t *Trajectory, a appended) string {
				if t.Status != StatusFinishing || t.End != schema.StatusFailed || t.Reason != "the agent exited with code 2" || t.LastExit != 2 {
					return fmt.Sprintf("%+v %+v", t, a)
				}
				return ""
			}},
		{"restarted", Restarted{}, []Status{StatusNeedsGeneration},
			func(t *Trajectory, a appended) string {
				if t.Status != StatusStarting || t.Restarts != 1 || t.Calls != 0 || t.GenTokens != 0 || t.Commands != 0 ||
					t.TurnGen != 0 || t.PromptLen != 0 || t.RID != "" || t.Resuming || t.Action != "" || !a.reset ||
					t.Segment != 0 || t.SegmentStarts != nil {
					return fmt.Sprintf("%+v %+v", t, a)
				}
				return ""
			}},
		{"observed", Observed{Ran: Ran{Exit: 3}, Observation: obs}, []Status{StatusNeedsEnvStep},
			func(t *Trajectory, a appended) string {
				if t.Status != StatusNeedsGeneration || t.Action != "" || t.Commands != 2 || t.Handle != "h0" ||
					t.LastExit != 3 || t.LastObs != len(obs.Tokens) ||
					!slices.Equal(a.tokens, []int32{7, 8}) || len(a.messages) != 1 {
					return fmt.Sprintf("%+v %+v", t, a)
				}
				return ""
			}},
		{"observed, its output replaced", Observed{Ran: Ran{Replaced: true}, Observation: obs}, []Status{StatusNeedsEnvStep},
			func(t *Trajectory, a appended) string {
				if t.Replaced != 1 || t.Commands != 2 {
					return fmt.Sprintf("%+v", t)
				}
				return ""
			}},
		{"observed after a replay", Observed{Ran: Ran{Digest: "00ff", Replay: Replay{Handle: "h1", Diverged: 2}}, Observation: obs},
			[]Status{StatusNeedsEnvStep},
			func(t *Trajectory, a appended) string {
				if t.Handle != "h1" || t.Replays != 1 || t.Diverged != 2 || !slices.Equal(t.CommandDigests(), []string{"ab", "00ff"}) {
					return fmt.Sprintf("%+v", t)
				}
				return ""
			}},
		{"submitted", Submitted{}, []Status{StatusNeedsEnvStep},
			func(t *Trajectory, a appended) string {
				if t.Status != StatusFinishing || t.Reason != ReasonSubmitted || t.Commands != 2 || t.Action != "" || len(a.tokens) != 0 {
					return fmt.Sprintf("%+v %+v", t, a)
				}
				return ""
			}},
		{"finished", Finished{Reason: "submitted", Diff: "d", Reward: 1, Tests: map[string]string{"a": "PASSED"}},
			[]Status{StatusFinishing}, func(t *Trajectory, a appended) string {
				if t.Status != StatusTerminated || t.Diff != "d" || t.Reward != 1 || t.Tests["a"] != "PASSED" || !t.FinishedAt.Equal(now) {
					return fmt.Sprintf("%+v %+v", t, a)
				}
				return ""
			}},
		{"aborted", Aborted{Reason: "lost"}, []Status{StatusStarting, StatusNeedsGeneration, StatusNeedsEnvStep, StatusFinishing},
			func(t *Trajectory, a appended) string {
				if t.Status != StatusAborted || t.Reason != "lost" || !t.FinishedAt.Equal(now) {
					return fmt.Sprintf("%+v %+v", t, a)
				}
				return ""
			}},
		{"stolen", Stolen{Replica: "r9", Then: Generated{Turn: turn}}, []Status{StatusNeedsGeneration},
			func(t *Trajectory, a appended) string {
				if t.Replica != "r9" || t.Status != StatusNeedsEnvStep || t.RID != "r" {
					return fmt.Sprintf("%+v", t)
				}
				return ""
			}},
	}
	all := []Status{StatusStarting, StatusNeedsGeneration, StatusNeedsEnvStep, StatusFinishing, StatusTerminated, StatusAborted}
	for _, tt := range tests {
		for _, st := range all {
			t.Run(tt.name+"/from "+string(st), func(t *testing.T) {
				tr := base
				tr.Status = st
				a, err := tt.tr.apply(&tr, now)
				if !slices.Contains(tt.from, st) {
					if !errors.Is(err, ErrTransition) {
						t.Fatalf("from %s: err %v, want ErrTransition", st, err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if msg := tt.check(&tr, a); msg != "" {
					t.Fatal(msg)
				}
			})
		}
	}
}

// The wall clock runs out during setup: the trajectory ends at once,
// limit_exceeded naming the wall clock as between turns, with nothing
// appended (no conversation yet) and no finish step (no sandbox to take a
// diff of).
func TestLimitReachedDuringSetup(t *testing.T) {
	now := time.UnixMilli(5000)
	tr := Trajectory{ID: "x", Status: StatusStarting}
	a, err := LimitReached{Limit: schema.LimitWallClock, Reason: "wall clock",
		Closing: &UserTurn{Content: "bye", Tokens: []int32{1}}}.apply(&tr, now)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Status != StatusTerminated || tr.End != schema.StatusLimitExceeded || tr.Limit != schema.LimitWallClock ||
		tr.Reason != "wall clock" || !tr.FinishedAt.Equal(now) || tr.ResultStatus() != schema.StatusLimitExceeded {
		t.Fatalf("after: %+v", tr)
	}
	if len(a.messages) != 0 || len(a.tokens) != 0 {
		t.Fatalf("appended %+v, want nothing", a)
	}
	if _, err := NextOf(&tr, LowOnly{}); !errors.Is(err, ErrNoNext) {
		t.Fatalf("NextOf: %v, want ErrNoNext (the result follows)", err)
	}
}

// The codec reads back what it writes, for every field.
func TestCodecRoundTrip(t *testing.T) {
	want := Trajectory{ID: "c", Status: StatusNeedsEnvStep, Seq: 9, Replica: "r", Owner: "o", Handle: "h", Action: "a",
		Reason: "why", Diff: "d", Tests: map[string]string{"t": "FAILED"}, Reward: 0.25, Trace: "tp",
		RewardComponents: map[string]float64{"pass_rate": 0.5, "style": -1e-3}, RewardError: "reward endpoint: http status 500",
		Sample: schema.Sample{V: schema.Version, ID: "c", Task: "task"}, Calls: 1, Commands: 2, GenTokens: 3, PromptLen: 4,
		End: schema.StatusLimitExceeded, Limit: schema.LimitStep, FormatErrors: 3, RID: "rid", Resuming: true, TurnGen: 5, GenCtx: 6, Preempts: 7, Restarts: 8, LastExit: -9, LastObs: 10, Digests: "00ff -", Replays: 1, Diverged: 1, Replaced: 3, Run: 2, PreemptedAt: time.UnixMilli(1), AdmittedAt: time.UnixMilli(2),
		UpdatedAt: time.UnixMilli(3), FinishedAt: time.UnixMilli(4), Segment: 30, SegmentStarts: []int{0, 30}, Call: `{"stop":["x"]}`,
		Finish: `{"Type":1}`}
	h := map[string]string{}
	args := encodeFields(&Trajectory{Seq: -1}, &want, false)
	for i := 0; i < len(args); i += 2 {
		h[args[i].(string)] = args[i+1].(string)
	}
	if len(h) != len(fields) {
		t.Fatalf("encoded %d fields, want all %d", len(h), len(fields))
	}
	got, err := decodeHash("c", h)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(*got) != fmt.Sprint(want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", *got, want)
	}
	h["calls"] = "x"
	if _, err := decodeHash("c", h); err == nil {
		t.Fatal("a bad counter decoded")
	}
}

// Any hash decodes to a trajectory or a clear error naming the field,
// never a panic; what decodes encodes back to the same state.
func FuzzDecodeHash(f *testing.F) {
	f.Add("needs_generation", "3", "7", "1700000000000", "{\"a\":\"PASSED\"}", "0.5", `{"v":1,"id":"x"}`, `{"a":1}`)
	f.Add("", "x", "-1", "0", "{", "NaN", "", `{"a":1e999}`)
	f.Fuzz(func(t *testing.T, status, seq, calls, at, tests, reward, sample, components string) {
		h := map[string]string{fieldStatus: status, fieldSeq: seq, "calls": calls, "admitted_at": at, "tests": tests,
			"reward": reward, "sample": sample, "reward_components": components}
		got, err := decodeHash("x", h)
		if err != nil {
			return
		}
		h2 := map[string]string{}
		args := encodeFields(&Trajectory{Seq: -1}, got, false)
		for i := 0; i < len(args); i += 2 {
			h2[args[i].(string)] = args[i+1].(string)
		}
		again, err := decodeHash("x", h2)
		if err != nil {
			t.Fatalf("re-decoding what was encoded: %v", err)
		}
		if fmt.Sprint(*again) != fmt.Sprint(*got) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", *again, *got)
		}
	})
}

// A call that continues the stream keeps its segment; one that does not
// starts a new segment at the stream's end; Restarted forgets them all.
func TestCalledSegments(t *testing.T) {
	tr := Trajectory{ID: "x", Status: StatusNeedsEnvStep, Tokens: make([]int32, 50), Segment: 10, SegmentStarts: []int{0, 10}}
	if _, err := (Called{Append: []int32{1}}).apply(&tr, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if tr.Segment != 10 || !slices.Equal(tr.SegmentStarts, []int{0, 10}) {
		t.Fatalf("a continuing call moved the segment: %d %v", tr.Segment, tr.SegmentStarts)
	}
	tr.Status = StatusNeedsEnvStep
	if _, err := (Called{Append: []int32{1}, NewSegment: true}).apply(&tr, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if tr.Segment != 50 || !slices.Equal(tr.SegmentStarts, []int{0, 10, 50}) {
		t.Fatalf("a new segment at %d %v, want 50 [0 10 50]", tr.Segment, tr.SegmentStarts)
	}
	if _, err := (Restarted{}).apply(&tr, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if tr.Segment != 0 || tr.SegmentStarts != nil || tr.Call != "" {
		t.Fatalf("restarted with segment %d %v, call %q", tr.Segment, tr.SegmentStarts, tr.Call)
	}
}

// Any segment_starts field decodes to offsets or a clear error naming the
// field, and what decodes encodes back the same.
func FuzzDecodeSegmentStarts(f *testing.F) {
	f.Add("0 30 712")
	f.Add("")
	f.Add("0 x")
	f.Fuzz(func(t *testing.T, v string) {
		got, err := decodeHash("x", map[string]string{"segment_starts": v})
		if err != nil {
			if !strings.Contains(err.Error(), "segment_starts") {
				t.Fatalf("error %v does not name the field", err)
			}
			return
		}
		args := encodeFields(&Trajectory{Seq: -1}, got, false)
		h := map[string]string{}
		for i := 0; i < len(args); i += 2 {
			h[args[i].(string)] = args[i+1].(string)
		}
		again, err := decodeHash("x", h)
		if err != nil || !slices.Equal(again.SegmentStarts, got.SegmentStarts) {
			t.Fatalf("%q: decoded %v, again %v (%v)", v, got.SegmentStarts, again.SegmentStarts, err)
		}
	})
}
