package traj

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// field is one hash field of actloop:traj:{id}: its name and how its value
// moves between the hash and a Trajectory. The one table, fields, serves
// both Load (decode every field present) and Commit (encode every field a
// transition changed), so a field is named and encoded in one place.
type field struct {
	name   string
	encode func(t *Trajectory) string
	decode func(t *Trajectory, v string) error
	// fixed: written once by Create; no transition changes it, so a commit
	// does not compare it (the sample can be large).
	fixed bool
}

// Field names that Lua scripts and the coordinator's progress query read
// directly.
const (
	fieldStatus    = "status"
	fieldSeq       = "seq"
	fieldReplica   = "replica"
	fieldOwner     = "owner"
	fieldUpdatedAt = "updated_at"
)

// fields is every hash field a Trajectory holds, in the order Create
// writes them.
var fields = []field{
	{name: fieldStatus, encode: func(t *Trajectory) string { return string(t.Status) },
		decode: func(t *Trajectory, v string) error { t.Status = Status(v); return nil }},
	intField(fieldSeq, func(t *Trajectory) *int64 { return &t.Seq }),
	strField(fieldReplica, func(t *Trajectory) *string { return &t.Replica }),
	strField(fieldOwner, func(t *Trajectory) *string { return &t.Owner }),
	strField("handle", func(t *Trajectory) *string { return &t.Handle }),
	strField("action", func(t *Trajectory) *string { return &t.Action }),
	strField("reason", func(t *Trajectory) *string { return &t.Reason }),
	strField("end", func(t *Trajectory) *string { return &t.End }),
	strField("limit", func(t *Trajectory) *string { return &t.Limit }),
	strField("diff", func(t *Trajectory) *string { return &t.Diff }),
	// tests: JSON object, each listed test's outcome in the eval.
	{name: "tests", encode: func(t *Trajectory) string {
		if t.Tests == nil {
			return ""
		}
		b, _ := json.Marshal(t.Tests) // a map of strings always encodes
		return string(b)
	}, decode: func(t *Trajectory, v string) error {
		// What this package wrote always decodes; anything else reads as
		// no outcomes.
		if t.Tests = nil; v != "" && json.Unmarshal([]byte(v), &t.Tests) != nil {
			t.Tests = nil
		}
		return nil
	}},
	{name: "reward", encode: func(t *Trajectory) string { return strconv.FormatFloat(t.Reward, 'g', -1, 64) },
		decode: func(t *Trajectory, v string) (err error) { t.Reward, err = strconv.ParseFloat(v, 64); return err }},
	// reward_components: JSON object, the reward's named parts.
	{name: "reward_components", encode: func(t *Trajectory) string {
		if len(t.RewardComponents) == 0 {
			return ""
		}
		b, _ := json.Marshal(t.RewardComponents) // finite numbers (schema.CheckRewardComponents) always encode
		return string(b)
	}, decode: func(t *Trajectory, v string) error {
		if t.RewardComponents = nil; v != "" && json.Unmarshal([]byte(v), &t.RewardComponents) != nil {
			t.RewardComponents = nil
		}
		return nil
	}},
	strField("reward_error", func(t *Trajectory) *string { return &t.RewardError }),
	fixed(strField("trace", func(t *Trajectory) *string { return &t.Trace })),
	{name: "sample", encode: func(t *Trajectory) string {
		b, _ := json.Marshal(t.Sample) // a validated sample always encodes
		return string(b)
	}, decode: func(t *Trajectory, v string) error { return json.Unmarshal([]byte(v), &t.Sample) }, fixed: true},
	counter("calls", func(t *Trajectory) *int { return &t.Calls }),
	counter("commands", func(t *Trajectory) *int { return &t.Commands }),
	counter("gen_tokens", func(t *Trajectory) *int { return &t.GenTokens }),
	counter("prompt_len", func(t *Trajectory) *int { return &t.PromptLen }),
	// gen_ctx: the context length the server saw at the end of the last
	// generation.
	counter("gen_ctx", func(t *Trajectory) *int { return &t.GenCtx }),
	// rid: the trajectory's request id, for all its turns. resuming and
	// turn_gen: an interrupted generation waits to resume, and the tokens
	// of the current turn it produced.
	strField("rid", func(t *Trajectory) *string { return &t.RID }),
	{name: "resuming", encode: func(t *Trajectory) string { return strconv.FormatBool(t.Resuming) },
		decode: func(t *Trajectory, v string) (err error) { t.Resuming, err = strconv.ParseBool(v); return err }},
	counter("turn_gen", func(t *Trajectory) *int { return &t.TurnGen }),
	counter("preempts", func(t *Trajectory) *int { return &t.Preempts }),
	timeField("preempted_at", func(t *Trajectory) *time.Time { return &t.PreemptedAt }),
	counter("restarts", func(t *Trajectory) *int { return &t.Restarts }),
	counter("last_exit", func(t *Trajectory) *int { return &t.LastExit }),
	counter("last_obs", func(t *Trajectory) *int { return &t.LastObs }),
	counter("format_errors", func(t *Trajectory) *int { return &t.FormatErrors }),
	strField("digests", func(t *Trajectory) *string { return &t.Digests }),
	counter("replays", func(t *Trajectory) *int { return &t.Replays }),
	counter("diverged", func(t *Trajectory) *int { return &t.Diverged }),
	// replaced: commands whose output held invalid UTF-8.
	counter("replaced", func(t *Trajectory) *int { return &t.Replaced }),
	fixed(counter("run", func(t *Trajectory) *int { return &t.Run })),
	// segment, segment_starts, call, finish: the proxy flow's (see
	// Trajectory); segment_starts are offsets separated by spaces.
	counter("segment", func(t *Trajectory) *int { return &t.Segment }),
	{name: "segment_starts", encode: func(t *Trajectory) string {
		parts := make([]string, len(t.SegmentStarts))
		for i, n := range t.SegmentStarts {
			parts[i] = strconv.Itoa(n)
		}
		return strings.Join(parts, " ")
	}, decode: func(t *Trajectory, v string) error {
		t.SegmentStarts = nil
		for f := range strings.FieldsSeq(v) {
			n, err := strconv.Atoi(f)
			if err != nil {
				return err
			}
			t.SegmentStarts = append(t.SegmentStarts, n)
		}
		return nil
	}},
	strField("call", func(t *Trajectory) *string { return &t.Call }),
	strField("finish", func(t *Trajectory) *string { return &t.Finish }),
	fixed(timeField("admitted_at", func(t *Trajectory) *time.Time { return &t.AdmittedAt })),
	timeField(fieldUpdatedAt, func(t *Trajectory) *time.Time { return &t.UpdatedAt }),
	timeField("finished_at", func(t *Trajectory) *time.Time { return &t.FinishedAt }),
}

func fixed(f field) field { f.fixed = true; return f }

func strField(name string, p func(*Trajectory) *string) field {
	return field{name: name, encode: func(t *Trajectory) string { return *p(t) },
		decode: func(t *Trajectory, v string) error { *p(t) = v; return nil }}
}

func intField(name string, p func(*Trajectory) *int64) field {
	return field{name: name, encode: func(t *Trajectory) string { return strconv.FormatInt(*p(t), 10) },
		decode: func(t *Trajectory, v string) (err error) { *p(t), err = strconv.ParseInt(v, 10, 64); return err }}
}

func counter(name string, p func(*Trajectory) *int) field {
	return field{name: name, encode: func(t *Trajectory) string { return strconv.Itoa(*p(t)) },
		decode: func(t *Trajectory, v string) (err error) { *p(t), err = strconv.Atoi(v); return err }}
}

// timeField holds an instant as unix milliseconds; 0 is the zero time.
func timeField(name string, p func(*Trajectory) *time.Time) field {
	return field{name: name, encode: func(t *Trajectory) string {
		if p(t).IsZero() {
			return "0"
		}
		return strconv.FormatInt(p(t).UnixMilli(), 10)
	}, decode: func(t *Trajectory, v string) error {
		ms, err := strconv.ParseInt(v, 10, 64)
		*p(t) = msTime(ms)
		return err
	}}
}

func msTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// decodeHash builds a Trajectory from the fields of its hash; a field
// absent from the hash keeps its zero value.
func decodeHash(id string, h map[string]string) (*Trajectory, error) {
	t := &Trajectory{ID: id}
	for _, f := range fields {
		v, ok := h[f.name]
		if !ok {
			continue
		}
		if err := f.decode(t, v); err != nil {
			return nil, fmt.Errorf("field %s: %w", f.name, err)
		}
	}
	return t, nil
}

// encodeFields returns, as HSET arguments, the fields whose encoding
// differs between before and after; with commit, not seq and updated_at
// (the commit's own) nor the fixed fields.
func encodeFields(before, after *Trajectory, commit bool) []any {
	var args []any
	for _, f := range fields {
		if commit && (f.fixed || f.name == fieldSeq || f.name == fieldUpdatedAt) {
			continue
		}
		if v := f.encode(after); v != f.encode(before) {
			args = append(args, f.name, v)
		}
	}
	return args
}
