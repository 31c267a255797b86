package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"sync"
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
	// Outcomes is what the results seen since this coordinator's term
	// began say: throughput over the last minute, reward, solve rate and
	// staleness.
	Outcomes Outcomes `json:"outcomes"`
	// Errors names each source of the status that could not be read (the
	// samples not yet taken in, the finished counts, the queues), with
	// why; what it would have told is missing: the rest is still shown.
	Errors []string `json:"errors,omitempty"`
}

// QueueStatus is one work subject's backlog: messages not yet delivered or
// not yet acknowledged, and the age of the oldest.
type QueueStatus struct {
	Subject    string  `json:"subject"`
	Depth      int     `json:"depth"`
	OldestAgeS float64 `json:"oldest_age_s"`
	// ageUnknown: the oldest message could not be read (the status's
	// errors say why), so OldestAgeS is not its age.
	ageUnknown bool
}

// ReplicaStatus is one replica's share of the active trajectories.
type ReplicaStatus struct {
	Name   string `json:"name"`
	Active int    `json:"active"`
	// Held is how many of them are held for want of room in its pool
	// (ACTLOOP_HOLD), at the newest snapshot.
	Held  int `json:"held"`
	Slots int `json:"slots"`
	// Busy is the generations running, as the replica's gen-workers said
	// in their last heartbeats.
	Busy int  `json:"busy"`
	Live bool `json:"live"`
}

// Status reports admission and per-replica load, read fresh. When a
// source could not be read, the error joins why (st.Errors names them too)
// and st holds the rest.
func (c *Coordinator) Status(ctx context.Context) (Status, error) {
	st := c.state()
	return st, c.readStores(ctx, &st).err()
}

// state is the part of the status the components hold in memory (each
// read under its own lock).
func (c *Coordinator) state() Status {
	now := c.d.Now()
	st := Status{Policy: c.cfg.Policy}
	st.MaxActiveFloor, st.MaxActiveCeiling = c.activeBounds(now)
	st.PredictorFailures = c.predict.Failures.Load()
	st.Control = c.controlState()
	load := c.active.load()
	st.Active, st.MaxActive = c.active.count(), c.waiting.currentLimit()
	st.StalenessRoom = c.stalenessRoom()
	// A sample being admitted is in both sets for a moment: it counts as
	// active.
	st.Queued = uint64(c.waiting.countNot(c.active.has))
	st.Snapshot, st.StalePredictions = c.snaps.get(), c.active.stalePredictions()
	st.Moved, st.Republished, st.EnvMoved = c.moved.Load(), c.republished.Load(), c.envMoved.Load()
	st.Readmitted, st.AdmissionHeld = c.readmitted.Load(), c.held.Load()
	st.Outcomes = c.outcomes.get(now)
	slots := c.replicaSlots(now) // the live replicas'
	busy := c.members.busy(now)
	if !st.Snapshot.At.IsZero() {
		st.SnapshotAgeS = now.Sub(st.Snapshot.At).Seconds()
	}
	// The expected replicas (ACTLOOP_REPLICAS), live or down, and those
	// that joined and are live or hold trajectories; one that left and
	// holds none is gone.
	for _, r := range c.members.replicas() {
		_, live := slots[r]
		if !live && load[r] == 0 && !slices.Contains(c.cfg.Replicas, r) {
			continue
		}
		n := slots[r]
		if !live && slices.Contains(c.cfg.Replicas, r) {
			n = c.cfg.Slots
		}
		st.Replicas = append(st.Replicas, ReplicaStatus{Name: r, Active: load[r], Held: st.Snapshot.Held[r], Slots: n, Busy: busy[r], Live: live})
		delete(load, r)
	}
	// Replicas not heard from since this coordinator started (it took
	// over from another) that hold trajectories.
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

// storeReadTimeout bounds the reads of what NATS and Redis hold for one
// status, page or scrape, so that a source that does not answer (a
// JetStream call the server refuses is never answered) delays it at most
// this long.
const storeReadTimeout = 2 * time.Second

// unread are the sources of a status that could not be read, and why
// (nil: read).
type unread struct {
	samples, finished, queues error
}

// named are the reasons, each naming its source; none when every source
// was read.
func (u unread) named() []error {
	var errs []error
	for _, s := range []struct {
		name string
		err  error
	}{{"samples not yet taken in", u.samples}, {"finished counts", u.finished}, {"queues", u.queues}} {
		if s.err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.name, s.err))
		}
	}
	return errs
}

// err joins the reasons; nil when every source was read.
func (u unread) err() error { return errors.Join(u.named()...) }

// readStores adds to st what NATS and Redis hold: the samples not yet
// taken in, the finished counts, the work queues. It reads them at once,
// within storeReadTimeout; each source it could not read (or read in
// part: the queues) is left out and named in st.Errors, and returned.
func (c *Coordinator) readStores(ctx context.Context, st *Status) unread {
	ctx, cancel := context.WithTimeout(ctx, storeReadTimeout)
	defer cancel()
	var (
		u        unread
		wg       sync.WaitGroup
		pending  uint64
		finished map[string]int64
		queues   []queue
	)
	wg.Go(func() {
		info, err := c.samples.Info(ctx)
		if err == nil {
			pending = info.NumPending
		}
		u.samples = err
	})
	wg.Go(func() { finished, u.finished = c.store.Counts(ctx) })
	wg.Go(func() { queues, u.queues = c.queues(ctx) })
	wg.Wait()
	st.Queued += pending
	st.Finished = finished
	for _, q := range queues {
		st.Queues = append(st.Queues, QueueStatus{Subject: q.subject, Depth: q.depth, OldestAgeS: q.age.Seconds(), ageUnknown: q.ageUnknown})
	}
	for _, e := range u.named() {
		st.Errors = append(st.Errors, e.Error())
	}
	return u
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
// and Redis hold, with the sources it could not read.
func (c *Coordinator) viewed(ctx context.Context) (Status, []utilSample, unread) {
	v := c.view.Load()
	st := v.state
	st.Replicas = slices.Clone(st.Replicas)
	return st, v.util, c.readStores(ctx, &st)
}

// Handler serves the status page at /, /v1/status, one trajectory at
// /v1/trajectories/{id}, the trainer API (POST /v1/pause, POST /v1/resume,
// GET /v1/control), /healthz, /readyz and /metrics.
func (c *Coordinator) Handler() http.Handler {
	mux := service.HealthMux(c.d)
	read := func(h http.HandlerFunc) http.Handler {
		if c.cfg.StatusOpen {
			return h
		}
		return service.Bearer(c.cfg.APIToken, h)
	}
	mux.Handle("GET /{$}", read(c.servePage))
	// A source that cannot be read leaves the rest of the status to show:
	// it is named in its errors.
	mux.Handle("GET /v1/status", read(func(w http.ResponseWriter, r *http.Request) {
		st, _, _ := c.viewed(r.Context())
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(st)
	}))
	mux.Handle("POST /v1/pause", service.Bearer(c.cfg.APIToken, c.handleControl("pause")))
	mux.Handle("POST /v1/resume", service.Bearer(c.cfg.APIToken, c.handleControl("resume")))
	mux.Handle("POST /v1/abort", service.Bearer(c.cfg.APIToken, c.handleControl("abort")))
	mux.Handle("GET /v1/control", read(c.handleControl("get")))
	// One trajectory's state is not among the counts the open status
	// shows: it always needs the token.
	mux.Handle("GET /v1/trajectories/{id}", service.Bearer(c.cfg.APIToken, http.HandlerFunc(c.serveInspect)))
	return mux
}
