package coordinator

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sort"
	"time"

	"github.com/actloop/actloop/pkg/schema"

	"github.com/actloop/actloop/internal/service"
)

// Status is the body of GET /v1/status.
type Status struct {
	Active int `json:"active"`
	// MaxActive is the admission limit now; it adapts between the floor and
	// the ceiling.
	MaxActive        int              `json:"max_active"`
	MaxActiveFloor   int              `json:"max_active_floor"`
	MaxActiveCeiling int              `json:"max_active_ceiling"`
	Queued           uint64           `json:"queued"`
	Finished         map[string]int64 `json:"finished"`
	Replicas         []ReplicaStatus  `json:"replicas"`
	Policy           string           `json:"policy"`
	// Snapshot describes the newest priority snapshots; SnapshotAgeS is
	// how old they are.
	Moved             int64         `json:"moved"`       // trajectories moved off replicas that went down
	Republished       int64         `json:"republished"` // work messages published again for lack of progress
	Readmitted        int64         `json:"readmitted"`  // trajectories started again after their state was lost
	EnvMoved          int64         `json:"env_moved"`   // trajectories moved off env-workers that went away
	Snapshot          snapshotStats `json:"snapshot"`
	SnapshotAgeS      float64       `json:"snapshot_age_s"`
	StalePredictions  int64         `json:"stale_predictions"`
	PredictorFailures int64         `json:"predictor_failures"`
	// StalenessRoom is how many more trajectories the staleness bound lets
	// in (ACTLOOP_TRAIN_BATCH_SIZE with ACTLOOP_MAX_STALENESS); -1 when no
	// such bound is set. At 0 admission waits for the next weight version.
	StalenessRoom int `json:"staleness_room"`
	// AdmissionHeld counts the admission passes that found samples waiting
	// while generation was paused, and so admitted none.
	AdmissionHeld int64 `json:"admission_held"`
	// Control is the control state: paused or running, the weight version.
	Control schema.Control `json:"control"`
	// Queues is the backlog of each work subject.
	Queues []QueueStatus `json:"queues"`
}

// QueueStatus is one work subject's backlog: messages not yet delivered or
// not yet acknowledged, and the age of the oldest.
type QueueStatus struct {
	Subject    string  `json:"subject"`
	Depth      int     `json:"depth"`
	OldestAgeS float64 `json:"oldest_age_s"`
}

// ReplicaStatus is one replica's share of the active trajectories.
type ReplicaStatus struct {
	Name   string `json:"name"`
	Active int    `json:"active"`
	Slots  int    `json:"slots"`
	// Busy is the generations running, as the replica's gen-workers said
	// in their last heartbeats.
	Busy int  `json:"busy"`
	Live bool `json:"live"`
}

// Status reports admission and per-replica load, read fresh.
func (c *Coordinator) Status(ctx context.Context) (Status, error) {
	st := c.state()
	return st, c.readStores(ctx, &st)
}

// state is the part of the status the components hold in memory (each
// read under its own lock).
func (c *Coordinator) state() Status {
	st := Status{MaxActiveFloor: c.cfg.ActiveFloor(), MaxActiveCeiling: c.cfg.ActiveCeiling(), Policy: c.cfg.Policy}
	st.PredictorFailures = c.predict.Failures.Load()
	st.Control = c.controlState()
	now := c.d.Now()
	load := c.active.load()
	st.Active, st.MaxActive = c.active.count(), c.waiting.currentLimit()
	st.StalenessRoom = c.stalenessRoom()
	st.Queued = uint64(c.waiting.count())
	st.Snapshot, st.StalePredictions = c.snaps.get(), c.active.stalePredictions()
	st.Moved, st.Republished, st.EnvMoved = c.moved.Load(), c.republished.Load(), c.envMoved.Load()
	st.Readmitted, st.AdmissionHeld = c.readmitted.Load(), c.held.Load()
	live := map[string]bool{}
	for _, r := range c.members.liveReplicas(c.cfg.Replicas, now) {
		live[r] = true
	}
	busy := c.members.busy(now)
	if !st.Snapshot.At.IsZero() {
		st.SnapshotAgeS = now.Sub(st.Snapshot.At).Seconds()
	}
	for _, r := range c.cfg.Replicas {
		st.Replicas = append(st.Replicas, ReplicaStatus{Name: r, Active: load[r], Slots: c.cfg.Slots, Busy: busy[r], Live: live[r]})
		delete(load, r)
	}
	// Replicas no longer configured that still hold trajectories.
	var rest []string
	for r := range load {
		rest = append(rest, r)
	}
	sort.Strings(rest)
	for _, r := range rest {
		st.Replicas = append(st.Replicas, ReplicaStatus{Name: r, Active: load[r], Busy: busy[r]})
	}
	return st
}

// readStores adds to st what NATS and Redis hold: the samples not yet
// taken in, the finished counts, the work queues.
func (c *Coordinator) readStores(ctx context.Context, st *Status) error {
	info, err := c.samples.Info(ctx)
	if err != nil {
		return err
	}
	st.Queued += info.NumPending
	if st.Finished, err = c.store.Counts(ctx); err != nil {
		return err
	}
	for _, q := range c.queues(ctx) {
		st.Queues = append(st.Queues, QueueStatus{Subject: q.subject, Depth: q.depth, OldestAgeS: q.age.Seconds()})
	}
	return nil
}

// viewEvery is how often the view the HTTP API reads is published.
const viewEvery = 250 * time.Millisecond

// view is the components' state as the HTTP API and the metrics see it:
// published by publishView, read without taking their locks. What NATS and
// Redis hold is read per request (viewed).
type view struct {
	state Status
	util  []utilSample
}

// publishView publishes the components' state.
func (c *Coordinator) publishView() {
	c.view.Store(&view{state: c.state(), util: c.util.samples()})
}

// viewed is the status from the published view and, read now, what NATS
// and Redis hold.
func (c *Coordinator) viewed(ctx context.Context) (Status, []utilSample, error) {
	v := c.view.Load()
	st := v.state
	st.Replicas = slices.Clone(st.Replicas)
	return st, v.util, c.readStores(ctx, &st)
}

// Handler serves the status page at /, /v1/status, the trainer API (POST
// /v1/pause, POST /v1/resume, GET /v1/control), /healthz, /readyz and
// /metrics.
func (c *Coordinator) Handler() http.Handler {
	mux := service.HealthMux(c.d)
	read := func(h http.HandlerFunc) http.Handler {
		if c.cfg.StatusOpen {
			return h
		}
		return service.Bearer(c.cfg.APIToken, h)
	}
	mux.Handle("GET /{$}", read(c.servePage))
	mux.Handle("GET /v1/status", read(func(w http.ResponseWriter, r *http.Request) {
		st, _, err := c.viewed(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(st)
	}))
	mux.Handle("POST /v1/pause", service.Bearer(c.cfg.APIToken, c.handleControl("pause")))
	mux.Handle("POST /v1/resume", service.Bearer(c.cfg.APIToken, c.handleControl("resume")))
	mux.Handle("POST /v1/abort", service.Bearer(c.cfg.APIToken, c.handleControl("abort")))
	mux.Handle("GET /v1/control", read(c.handleControl("get")))
	return mux
}
