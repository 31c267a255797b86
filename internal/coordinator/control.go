package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/pkg/schema"
)

// control is the coordinator's side of weight synchronisation: it owns the
// control state in NATS KV and answers the trainer's pause and resume.
type control struct {
	kv jetstream.KeyValue

	write sync.Mutex // serialises changes of the state
	// rev is the revision of the state this coordinator last wrote, under
	// write: the next write replaces it without reading it first (one KV
	// round trip on the pause's path). 0: not known, read it.
	rev uint64

	mu      sync.Mutex
	state   schema.Control
	reports map[string]schema.PauseReport // by key "gen.<replica>.<worker>"
	changed chan struct{}                 // closed and replaced when reports change
	audited chan struct{}                 // closed once the audit of the call answered last is published
}

// PauseError is a pause that did not complete: the workers named did not
// report paused in time.
type PauseError struct {
	Epoch   int64
	Missing []string // "gen.<replica>.<worker>"
	Reason  string
}

func (e *PauseError) Error() string {
	if len(e.Missing) == 0 {
		return fmt.Sprintf("pause epoch %d: %s", e.Epoch, e.Reason)
	}
	return fmt.Sprintf("pause epoch %d: %s: %s", e.Epoch, e.Reason, strings.Join(e.Missing, ", "))
}

// errVersionBack is a resume whose weight version is older than the current.
var errVersionBack = errors.New("weight_version may not go back")

// errVersionStep is a resume that raises the weight version by more than
// ACTLOOP_MAX_VERSION_STEP.
var errVersionStep = errors.New("weight_version may not rise by more than ACTLOOP_MAX_VERSION_STEP at once")

// initControl loads the control state, or writes the first one, with this
// coordinator's staleness settings (it owns them).
func (c *Coordinator) initControl(ctx context.Context) error {
	kv, err := c.d.JS.KeyValue(ctx, bus.BucketControl)
	if err != nil {
		return fmt.Errorf("kv %s: %w", bus.BucketControl, err)
	}
	audited := make(chan struct{})
	close(audited)
	c.ctl = &control{kv: kv, reports: map[string]schema.PauseReport{}, changed: make(chan struct{}), audited: audited}
	st := schema.DefaultControl()
	if e, err := kv.Get(ctx, bus.KeyControl); err == nil {
		if s, err := schema.Decode[schema.Control](e.Value()); err == nil {
			st = s
		} else {
			c.d.Log.Warn("undecodable control state replaced", "error", err)
		}
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("control state: %w", err)
	}
	st.MaxStaleness, st.StalePolicy = c.cfg.MaxStaleness, c.cfg.StalePolicy
	return c.putControl(ctx, st)
}

// putControl writes st; callers hold c.ctl.write (or are starting). The
// write is fenced: it replaces only the revision this coordinator last
// wrote, or read, and is refused (ending the term) when the revision there
// was written by a later term. Usually it is one round trip: an update of
// the revision this coordinator wrote last; when another wrote since (the
// update is refused), or none is known, it reads the state first.
func (c *Coordinator) putControl(ctx context.Context, st schema.Control) error {
	st.V, st.At, st.Term = schema.Version, c.d.Now().UTC(), c.term
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	rev := c.ctl.rev
	c.ctl.rev = 0 // unknown until this write is known to have landed
	for {
		if rev == 0 {
			if rev, err = c.readControlRev(ctx); err != nil {
				return err
			}
		}
		if rev == 0 {
			rev, err = c.ctl.kv.Create(ctx, bus.KeyControl, b)
		} else {
			rev, err = c.ctl.kv.Update(ctx, bus.KeyControl, b, rev)
		}
		if err == nil {
			break
		}
		if !isRefused(err) {
			return fmt.Errorf("write control state: %w", err)
		}
		rev = 0 // written in between (by another term): read it again
	}
	c.ctl.rev = rev
	c.ctl.mu.Lock()
	c.ctl.state = st
	c.ctl.notifyLocked()
	c.ctl.mu.Unlock()
	c.poke() // a new weight version may make room for admission
	return nil
}

// readControlRev returns the revision of the control state in NATS KV (0:
// none), ending the term when a later one wrote it.
func (c *Coordinator) readControlRev(ctx context.Context) (uint64, error) {
	e, err := c.ctl.kv.Get(ctx, bus.KeyControl)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("write control state: %w", err)
	}
	if cur, derr := schema.Decode[schema.Control](e.Value()); derr == nil && c.term > 0 && cur.Term > c.term {
		err := fmt.Errorf("write control state: %w (written by term %d, this is term %d)", ErrFenced, cur.Term, c.term)
		c.fenced(err)
		return 0, err
	}
	return e.Revision(), nil
}

func (k *control) notifyLocked() {
	close(k.changed)
	k.changed = make(chan struct{})
}

// Control returns the control state and the workers' newest reports.
func (c *Coordinator) Control() schema.ControlStatus {
	c.ctl.mu.Lock()
	defer c.ctl.mu.Unlock()
	st := schema.ControlStatus{Control: c.ctl.state, Workers: make([]schema.PauseReport, 0, len(c.ctl.reports))}
	for _, r := range c.ctl.reports {
		st.Workers = append(st.Workers, r)
	}
	sort.Slice(st.Workers, func(i, j int) bool { return st.Workers[i].Worker < st.Workers[j].Worker })
	return st
}

// watchReports follows the gen-workers' pause reports until ctx ends.
func (c *Coordinator) watchReports(ctx context.Context) error {
	return bus.WatchKV(ctx, c.d.JS, c.d.Log, bus.BucketControl, func(e jetstream.KeyValueEntry, _ bool) {
		if !strings.HasPrefix(e.Key(), "gen.") {
			return
		}
		c.ctl.mu.Lock()
		defer c.ctl.mu.Unlock()
		if e.Operation() != jetstream.KeyValuePut {
			delete(c.ctl.reports, e.Key())
		} else if r, err := schema.Decode[schema.PauseReport](e.Value()); err == nil {
			c.ctl.reports[e.Key()] = r
		} else {
			c.d.Log.Warn("undecodable pause report skipped", "key", e.Key(), "error", err)
			return
		}
		c.ctl.notifyLocked()
	})
}

// Pause pauses generation and returns once every live gen-worker has
// reported paused for the epoch. A pause while paused in the same mode is
// the same pause (same epoch); in the other mode it is a new one.
func (c *Coordinator) Pause(ctx context.Context, req schema.PauseRequest) (schema.PauseReply, error) {
	start := time.Now()
	mode := req.Mode
	if mode == "" {
		mode = schema.PauseAbort
	}
	timeout := c.cfg.PauseTimeout
	if req.TimeoutMS > 0 {
		timeout = time.Duration(req.TimeoutMS) * time.Millisecond
	}
	c.ctl.write.Lock()
	st := c.controlState()
	if !st.Paused || st.Mode != mode {
		st.Paused, st.Mode = true, mode
		st.Epoch++
		if err := c.putControl(ctx, st); err != nil {
			c.ctl.write.Unlock()
			return schema.PauseReply{}, err
		}
		c.d.Log.Info("pause", "epoch", st.Epoch, "mode", mode)
	}
	c.ctl.write.Unlock()

	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(25 * time.Millisecond) // liveness changes with time, not only with events
	defer tick.Stop()
	for {
		c.ctl.mu.Lock()
		changed := c.ctl.changed
		cur := c.ctl.state
		c.ctl.mu.Unlock()
		if !cur.Paused {
			return schema.PauseReply{}, &PauseError{Epoch: st.Epoch, Reason: "resumed before every worker paused"}
		}
		reply, missing := c.pauseProgress(st.Epoch)
		if len(missing) == 0 {
			reply.Epoch, reply.Mode = st.Epoch, mode
			reply.WaitedMS = float64(time.Since(start).Microseconds()) / 1000
			return reply, nil
		}
		select {
		case <-changed:
		case <-tick.C:
		case <-deadline.C:
			return schema.PauseReply{}, &PauseError{Epoch: st.Epoch, Missing: missing,
				Reason: fmt.Sprintf("no pause report within %v from", timeout)}
		case <-ctx.Done():
			return schema.PauseReply{}, &PauseError{Epoch: st.Epoch, Missing: missing, Reason: ctx.Err().Error() + " waiting for"}
		}
	}
}

func (c *Coordinator) controlState() schema.Control {
	c.ctl.mu.Lock()
	defer c.ctl.mu.Unlock()
	return c.ctl.state
}

// pauseProgress sums the reports of live gen-workers paused for epoch (or
// a later one) and names the live ones that have not reported so.
func (c *Coordinator) pauseProgress(epoch int64) (schema.PauseReply, []string) {
	live := c.members.liveGenWorkers(c.d.Now())
	slices.Sort(live)
	var reply schema.PauseReply
	var missing []string
	c.ctl.mu.Lock()
	defer c.ctl.mu.Unlock()
	for _, key := range live {
		r, ok := c.ctl.reports[key]
		if !ok || !r.Paused || r.Epoch < epoch {
			missing = append(missing, key)
			continue
		}
		reply.Workers++
		reply.Aborted += r.Aborted
		reply.KeptTokens += r.KeptTokens
		reply.ServerMS = max(reply.ServerMS, r.ServerMS)
	}
	return reply, missing
}

// Resume lets generation go on; a weight version, when given, becomes the
// current one and may not go back. Resuming while running is harmless.
func (c *Coordinator) Resume(ctx context.Context, req schema.ResumeRequest) (schema.Control, error) {
	c.ctl.write.Lock()
	defer c.ctl.write.Unlock()
	st := c.controlState()
	next := st
	next.Paused, next.Mode = false, ""
	if v := req.WeightVersion; v != nil {
		if *v < st.WeightVersion {
			return st, fmt.Errorf("%w: %d is older than the current %d", errVersionBack, *v, st.WeightVersion)
		}
		if step := c.cfg.MaxVersionStep; step > 0 && *v-st.WeightVersion > step {
			return st, fmt.Errorf("%w (%d): %d is %d past the current %d", errVersionStep, step, *v, *v-st.WeightVersion,
				st.WeightVersion)
		}
		next.WeightVersion = *v
	}
	if next.Paused == st.Paused && next.WeightVersion == st.WeightVersion {
		return st, nil
	}
	if err := c.putControl(ctx, next); err != nil {
		return st, err
	}
	c.d.Log.Info("resume", "epoch", next.Epoch, "weight_version", next.WeightVersion)
	c.poke() // admission held during the pause goes on
	return c.controlState(), nil
}

// caller is how a control call came (Via: http or nats) and from where,
// for its audit.
type caller struct{ Via, From string }

func (w caller) String() string { return w.Via + " " + w.From }

// controlCall runs the trainer call named op ("pause", "resume", "abort",
// "get") on body and passes answer the HTTP status and the JSON answer.
// Every call is audited: logged with who made it, the request and how it
// ended, and but for get published as an EventControl on actloop.events.
// The audit is published once the call is answered (its round trip is
// not the trainer's to wait for), in the order the calls were answered.
func (c *Coordinator) controlCall(ctx context.Context, op string, body []byte, who caller, answer func(int, any)) {
	status, reply := c.runControl(ctx, op, body)
	outcome := http.StatusText(status)
	if e, ok := reply.(schema.APIError); ok {
		outcome += ": " + e.Error
	}
	if op == "get" { // read-only, and polled: logged only
		answer(status, reply)
		c.d.Log.DebugContext(ctx, "control call", "op", op, "from", who.String(), "status", status, "outcome", outcome)
		return
	}
	prev, mine := c.ctl.auditTurn()
	defer close(mine)
	answer(status, reply)
	detail := string(body)
	if len(detail) > maxAuditDetail {
		detail = detail[:maxAuditDetail] + "…"
	}
	c.d.Log.InfoContext(ctx, "control call", "op", op, "from", who.String(), "request", detail, "status", status,
		"outcome", outcome)
	e := schema.Event{V: schema.Version, Type: schema.EventControl, Op: op, From: who.String(), Detail: detail,
		Reason: outcome, Worker: c.cfg.CoordinatorID, At: c.d.Now().UTC()}
	id := fmt.Sprintf("control:%s:%s:%d", c.cfg.CoordinatorID, op, e.At.UnixNano())
	<-prev
	if err := c.d.Pub.Publish(context.WithoutCancel(ctx), bus.SubjectEvents, id, e); err != nil {
		c.d.Log.Warn("control call not audited on actloop.events", "op", op, "error", err)
	}
}

// auditTurn returns a channel closed once the audit of the call answered
// before is published, and this call's own, to close once its audit is.
func (k *control) auditTurn() (prev <-chan struct{}, mine chan struct{}) {
	mine = make(chan struct{})
	k.mu.Lock()
	defer k.mu.Unlock()
	prev, k.audited = k.audited, mine
	return prev, mine
}

// maxAuditDetail bounds the request body an audit record keeps.
const maxAuditDetail = 1024

// runControl makes the call controlCall audits.
func (c *Coordinator) runControl(ctx context.Context, op string, body []byte) (int, any) {
	fail := func(status int, err error) (int, any) {
		e := schema.APIError{Error: err.Error()}
		var pe *PauseError
		if errors.As(err, &pe) {
			e.Missing = pe.Missing
		}
		return status, e
	}
	switch op {
	case "pause":
		req, err := schema.DecodeRequest[schema.PauseRequest](body)
		if err != nil {
			return fail(http.StatusBadRequest, err)
		}
		reply, err := c.Pause(ctx, req)
		var pe *PauseError
		switch {
		case errors.As(err, &pe) && len(pe.Missing) > 0:
			return fail(http.StatusGatewayTimeout, err)
		case errors.As(err, &pe):
			return fail(http.StatusConflict, err)
		case err != nil:
			return fail(http.StatusServiceUnavailable, err)
		}
		return http.StatusOK, reply
	case "resume":
		req, err := schema.DecodeRequest[schema.ResumeRequest](body)
		if err != nil {
			return fail(http.StatusBadRequest, err)
		}
		st, err := c.Resume(ctx, req)
		switch {
		case errors.Is(err, errVersionBack), errors.Is(err, errVersionStep):
			return fail(http.StatusConflict, err)
		case err != nil:
			return fail(http.StatusServiceUnavailable, err)
		}
		return http.StatusOK, st
	case "get":
		return http.StatusOK, c.Control()
	case "abort":
		req, err := schema.DecodeRequest[schema.AbortRequest](body)
		if err == nil {
			err = req.Validate() // an empty body decodes to an empty request
		}
		if err != nil {
			return fail(http.StatusBadRequest, err)
		}
		reply, err := c.Abort(ctx, req)
		if err != nil {
			return fail(http.StatusServiceUnavailable, err)
		}
		return http.StatusOK, reply
	}
	return fail(http.StatusNotFound, fmt.Errorf("unknown control call %q (want pause, resume, abort or get)", op))
}

// serveControlNATS answers actloop.control.{pause,resume,abort,get} until ctx
// ends; each call runs on its own, so a pause that waits blocks no resume.
func (c *Coordinator) serveControlNATS(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	sub, err := c.d.NC.QueueSubscribe("actloop.control.*", "coordinator", func(m *nats.Msg) {
		wg.Go(func() {
			op := strings.TrimPrefix(m.Subject, "actloop.control.")
			from := m.Header.Get(schema.HeaderClient)
			if from == "" {
				from = "(unnamed client)"
			}
			c.controlCall(ctx, op, m.Data, caller{Via: "nats", From: from}, func(_ int, answer any) {
				b, _ := json.Marshal(answer)
				_ = m.Respond(b)
			})
		})
	})
	if err != nil {
		return fmt.Errorf("subscribe actloop.control.*: %w", err)
	}
	<-ctx.Done()
	return sub.Unsubscribe()
}

// handleControl serves POST /v1/pause, POST /v1/resume, POST /v1/abort and
// GET /v1/control.
func (c *Coordinator) handleControl(op string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := readBody(r)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, schema.APIError{Error: err.Error()})
			return
		}
		c.controlCall(r.Context(), op, body, caller{Via: "http", From: r.RemoteAddr}, func(status int, answer any) {
			writeJSON(w, status, answer)
			_ = http.NewResponseController(w).Flush() // before the audit: see controlCall
		})
	}
}

func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, schema.MaxMessageBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	return b, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
