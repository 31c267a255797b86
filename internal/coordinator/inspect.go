package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/priority"
	"github.com/actloop/actloop/pkg/schema"
)

// ErrNoTrajectory: no trajectory of that id is known: none waits for
// admission and Redis holds no state of it (never admitted, or its state
// expired ACTLOOP_RESULT_TTL after its result).
var ErrNoTrajectory = errors.New("no such trajectory")

// Inspection is the body of GET /v1/trajectories/{id}: one trajectory as
// the coordinator and Redis know it.
type Inspection struct {
	ID string `json:"id"`
	// State is "waiting" (taken in, not yet admitted), or the trajectory's
	// status in Redis: starting, needs_generation, needs_env_step,
	// finishing, terminated (its result published) or aborted (a fallback
	// published).
	State string `json:"state"`
	Seq   int64  `json:"seq"`
	// End is the result's status once known, Limit the limit that ended
	// it, Reason why it ended.
	End    string  `json:"end,omitempty"`
	Limit  string  `json:"limit,omitempty"`
	Reason string  `json:"reason,omitempty"`
	Reward float64 `json:"reward"`
	// Turns counts model calls, Commands the commands run, GenTokens the
	// tokens generated, NumTokens the whole context (prompt, replies and
	// observations).
	Turns     int `json:"turns"`
	Commands  int `json:"commands"`
	GenTokens int `json:"gen_tokens"`
	NumTokens int `json:"num_tokens"`
	PromptLen int `json:"prompt_len"`
	// Replica is the inference replica it is assigned to, EnvWorker the
	// env-worker that owns its sandbox, RID its request id on the server.
	Replica   string `json:"replica,omitempty"`
	EnvWorker string `json:"env_worker,omitempty"`
	RID       string `json:"rid,omitempty"`
	// MinVersion and MaxVersion are the weight versions of its generated
	// tokens (-1: none generated); WeightVersion the current one.
	MinVersion    int32  `json:"min_version"`
	MaxVersion    int32  `json:"max_version"`
	WeightVersion int64  `json:"weight_version"`
	Preempts      int    `json:"preempts"`
	Restarts      int    `json:"restarts"`
	Replays       int    `json:"replays"`
	GroupID       string `json:"group_id,omitempty"`
	// TraceID is its trace's id (every span of the trajectory is in it);
	// Traceparent the W3C trace context stored with its state.
	TraceID     string `json:"trace_id,omitempty"`
	Traceparent string `json:"traceparent,omitempty"`
	// WaitsOn is where it waits: the subject of the work message its state
	// calls for, queued or being worked on (actloop.env.start, its
	// replica's gen queue of its class, its env-worker's subject),
	// "admission" while waiting to be admitted, "" once it has ended.
	WaitsOn    string    `json:"waits_on,omitempty"`
	ArrivedAt  time.Time `json:"arrived_at,omitzero"`
	AdmittedAt time.Time `json:"admitted_at,omitzero"`
	UpdatedAt  time.Time `json:"updated_at,omitzero"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// Audit is its audit log in Redis: one line per write that moved its
	// seq, "<seq> <transition> <unix ms>".
	Audit []string `json:"audit"`
}

// Inspect returns what is known of trajectory id; an error wrapping
// ErrNoTrajectory when nothing is.
func (c *Coordinator) Inspect(ctx context.Context, id string) (Inspection, error) {
	ctx, cancel := context.WithTimeout(ctx, storeReadTimeout)
	defer cancel()
	in := Inspection{ID: id, MinVersion: -1, MaxVersion: -1, WeightVersion: c.controlState().WeightVersion, Audit: []string{}}
	t, err := c.store.Load(ctx, id, traj.WithTokens)
	if errors.Is(err, traj.ErrNotFound) {
		if w := c.waiting.get(id); w != nil {
			in.State, in.ArrivedAt, in.GroupID, in.WaitsOn = "waiting", w.ArrivedAt, w.Sample.GroupID, "admission"
			return in, nil
		}
		return in, fmt.Errorf("trajectory %q: %w (never admitted, or its state expired ACTLOOP_RESULT_TTL after its result)", id, ErrNoTrajectory)
	}
	if err != nil {
		return in, err
	}
	in.State, in.Seq, in.End, in.Limit, in.Reason, in.Reward = string(t.Status), t.Seq, t.End, t.Limit, t.Reason, t.Reward
	in.Turns, in.Commands, in.GenTokens, in.NumTokens, in.PromptLen = t.Calls, t.Commands, t.GenTokens, len(t.Tokens), t.PromptLen
	in.Replica, in.EnvWorker, in.RID = t.Replica, t.Owner, t.RID
	in.Preempts, in.Restarts, in.Replays, in.GroupID = t.Preempts, t.Restarts, t.Replays, t.Sample.GroupID
	in.Traceparent, in.TraceID = t.Trace, traceID(t.Trace)
	in.AdmittedAt, in.UpdatedAt, in.FinishedAt = t.AdmittedAt, t.UpdatedAt, t.FinishedAt
	for i, v := range t.Versions {
		if i < len(t.Mask) && t.Mask[i] == 1 {
			if in.MinVersion < 0 || v < in.MinVersion {
				in.MinVersion = v
			}
			in.MaxVersion = max(in.MaxVersion, v)
		}
	}
	if n, err := traj.NextOf(t, c.classOf(ctx, t.Replica)); err == nil {
		in.WaitsOn = n.Subject
	}
	if in.Audit, err = c.store.Audit(ctx, id); err != nil {
		return in, err
	}
	return in, nil
}

// classOf reads the newest priority snapshot of replica: the class a gen
// step of its is published in (everything low without one).
func (c *Coordinator) classOf(ctx context.Context, replica string) traj.Classifier {
	b := &priority.Board{}
	if e, err := c.kv.Get(ctx, replica); err == nil {
		if s, err := priority.DecodeSnapshot(e.Value()); err == nil {
			b.Set(s)
		}
	}
	return b
}

// traceID is the trace id of a W3C traceparent ("" when it is none).
func traceID(traceparent string) string {
	parts := strings.Split(traceparent, "-")
	if len(parts) != 4 || len(parts[1]) != 32 {
		return ""
	}
	return parts[1]
}

// serveInspect answers GET /v1/trajectories/{id}: 404 naming the id when
// nothing is known of it.
func (c *Coordinator) serveInspect(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !schema.ValidID(id) {
		http.Error(w, fmt.Sprintf("trajectory %q: not a valid id", id), http.StatusBadRequest)
		return
	}
	in, err := c.Inspect(r.Context(), id)
	switch {
	case errors.Is(err, ErrNoTrajectory):
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	case err != nil:
		http.Error(w, fmt.Sprintf("trajectory %q: %v", id, err), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(in)
}
