package envworker

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/actloop/actloop/internal/agent"
	"github.com/actloop/actloop/internal/proxy"
	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/llm"
	"github.com/actloop/actloop/pkg/sandbox"
	"github.com/actloop/actloop/pkg/schema"
)

// The proxy flow (docs/agent.md, "The proxy flow"): a sample's own agent
// runs in its sandbox against an OpenAI-compatible endpoint served to it
// alone, and each call it makes is one generation step. The env-worker
// that starts the sandbox runs the agent and serves its endpoint; the
// trajectory's env steps are the agent's work between calls. A start step
// launches the agent and ends at its first call; an exec step answers the
// call from the turn just generated and ends at the next call. Either
// ends instead when the agent exits or falls silent past
// env.step_timeout_ms (AgentExited) or the wall clock runs out
// (LimitReached). The agent lives in this process: an env-worker that
// restarts loses it, and its trajectory fails (agentLost); watchAgents
// stops one whose trajectory no longer needs it.

// MaxCallBytes bounds the body of one call to the endpoint: a conversation
// of a full context (a million tokens of text) in JSON, with room to spare.
const MaxCallBytes = 32 << 20

// servedModel is the model the endpoint's GET /v1/models lists; a call may
// name any model, and its answer names the one it asked for.
const servedModel = "actloop"

// agentTailBytes is how much of a failed agent's output its reason keeps.
const agentTailBytes = 2048

// agentRun is one proxy-flow trajectory's agent on this worker: its
// process, the endpoint it calls, and the calls it made.
type agentRun struct {
	key     string // the trajectory's API key
	model   string
	tmpl    tokenize.ChatTemplate
	parsers proxy.Parsers
	calls   chan *agentCall // the endpoint's calls, to the step that waits for one
	// keepAlive is how often a streamed call waiting for its answer gets
	// an SSE comment (keepAliveEvery).
	keepAlive time.Duration
	exited    chan struct{} // closed once the agent's process ended
	res       sandbox.ExecResult
	err       error           // set with res before exited closes
	ctx       context.Context // the agent's: ended by stop, or the worker's end
	done      chan struct{}   // closed by stop
	stopped   sync.Once
	cancel    context.CancelFunc
	unserve   func()

	// The trajectory's steps alone read and change these, one step at a
	// time (traj.Driver runs one step of a trajectory at a time).
	conv  proxy.Conversation
	taken map[int]*agentCall // the calls taken, by how many calls came before each
}

// agentCall is one call of the agent: its request (chat or text) and what
// it adds to the stream, and the channel its answer goes back on.
type agentCall struct {
	chat     *proxy.ChatRequest
	text     *proxy.CompletionRequest
	step     proxy.Step
	answered bool
	answer   chan func(*callWriter) // buffered: the step never waits for the handler
}

// callWriter writes a call's answer: whole as JSON, or as server-sent
// events for a call that asked to stream, whose headers may have gone out
// already (keepAlive).
type callWriter struct {
	w       http.ResponseWriter
	stream  bool
	started bool // a stream's headers are out: the status is 200, errors go as events
}

// keepAliveEvery is how often a streamed call that waits for its
// generation gets an SSE comment, so that a client's read timeout (the
// time between two chunks) does not end it while it is queued.
const keepAliveEvery = 15 * time.Second

// start sends a stream's headers, once.
func (cw *callWriter) start() {
	if cw.started {
		return
	}
	cw.started = true
	cw.w.Header().Set("Content-Type", "text/event-stream")
	cw.w.Header().Set("Cache-Control", "no-cache")
	cw.w.WriteHeader(http.StatusOK)
}

// keepAlive sends a stream's headers and an SSE comment, which clients
// ignore.
func (cw *callWriter) keepAlive() {
	cw.start()
	_, _ = io.WriteString(cw.w, ": waiting for the generation\n\n")
	if f, ok := cw.w.(http.Flusher); ok {
		f.Flush()
	}
}

// events writes a stream's events (once its headers are out).
func (cw *callWriter) events(write func(io.Writer) error) {
	cw.start()
	_ = write(cw.w)
}

// json writes a whole answer.
func (cw *callWriter) json(v any) {
	cw.w.Header().Set("Content-Type", "application/json")
	_ = proxy.WriteJSON(cw.w, v)
}

// error answers status and body as OpenAI's servers do; in a stream whose
// headers are out, as vLLM does there: an event holding the error, then
// [DONE].
func (cw *callWriter) error(status int, body proxy.ErrorBody) {
	if cw.started {
		_ = proxy.WriteErrorStream(cw.w, body)
		return
	}
	cw.w.Header().Set("Content-Type", "application/json")
	cw.w.WriteHeader(status)
	_ = proxy.WriteJSON(cw.w, body)
}

// stop ends the agent and its endpoint; calls waiting get 503. Idempotent.
func (r *agentRun) stop() {
	r.stopped.Do(func() {
		close(r.done)
		r.cancel()
		r.unserve()
	})
}

// launch starts t's agent in sb, serving its endpoint there: the agent's
// command with OPENAI_BASE_URL (and OPENAI_API_BASE, the name older
// clients read) and OPENAI_API_KEY set (ACTLOOP_TASK is in
// the sandbox's environment from its start, startFresh). It runs under the
// worker's life, not the step's: it outlives the step that starts it.
func (w *Worker) launch(t *traj.Trajectory, sb sandbox.Sandbox) (*agentRun, error) {
	srv, ok := sb.(sandbox.Server)
	if !ok {
		return nil, fmt.Errorf("backend %q cannot serve the proxy flow's endpoint to its sandboxes",
			w.backendName(w.backends[t.Sample.Env.Backend]))
	}
	key := make([]byte, 24)
	_, _ = rand.Read(key) // never fails (crypto/rand)
	ctx, cancel := context.WithCancel(w.life)
	r := &agentRun{key: "sk-actloop-" + hex.EncodeToString(key), model: servedModel, tmpl: w.tmpl,
		parsers: proxy.ParsersFor(w.tmpl), calls: make(chan *agentCall), exited: make(chan struct{}), done: make(chan struct{}),
		ctx: ctx, cancel: cancel, taken: map[int]*agentCall{}, keepAlive: keepAliveEvery}
	url, unserve, err := srv.Serve(r)
	if err != nil {
		cancel()
		return nil, err
	}
	r.unserve = unserve
	cmd := "export OPENAI_BASE_URL=" + url + "/v1 OPENAI_API_BASE=" + url + "/v1 OPENAI_API_KEY=" + r.key + "\n" + t.Sample.Agent.Command
	go func() {
		defer close(r.exited)
		r.res, r.err = sb.Exec(ctx, cmd, 0)
	}()
	w.mu.Lock()
	if old := w.agentRuns[t.ID]; old != nil {
		old.stop()
	}
	w.agentRuns[t.ID] = r
	w.mu.Unlock()
	return r, nil
}

// agentRun returns the agent this worker runs for trajectory id, or nil.
func (w *Worker) agentRun(id string) *agentRun {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.agentRuns[id]
}

// stopAgent ends trajectory id's agent, if this worker runs one, and
// waits up to agentStopWait for its process to be gone (a diff taken next
// is of what it left, not of a process still writing).
func (w *Worker) stopAgent(id string) {
	w.mu.Lock()
	r := w.agentRuns[id]
	delete(w.agentRuns, id)
	w.mu.Unlock()
	if r == nil {
		return
	}
	r.stop()
	select {
	case <-r.exited:
	case <-time.After(agentStopWait):
		w.d.Log.Warn("agent still running after it was stopped", "traj_id", id, "waited", agentStopWait)
	}
}

// agentStopWait bounds how long stopping an agent waits for its process.
const agentStopWait = 10 * time.Second

// agentWatchInterval is how often a worker looks whether the trajectories
// of the agents it runs still need them.
const agentWatchInterval = 5 * time.Second

// watchAgents stops, every agentWatchInterval until ctx ends, each agent
// whose trajectory no longer needs it: it ended (an abort, a limit, its
// result) or is gone, or it moved to another env-worker (restarted
// elsewhere after going stale, or moved off this worker while it looked
// dead). Between steps nothing else of this worker hears of that.
func (w *Worker) watchAgents(ctx context.Context) error {
	tick := time.NewTicker(agentWatchInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		w.mu.Lock()
		ids := make([]string, 0, len(w.agentRuns))
		for id := range w.agentRuns {
			ids = append(ids, id)
		}
		w.mu.Unlock()
		if len(ids) == 0 {
			continue
		}
		progress, err := w.d.Store.Progress(ctx, ids)
		if err != nil {
			continue // Redis trouble: look again
		}
		for _, id := range ids {
			p, ok := progress[id]
			if !ok || p.Status.Terminal() || (p.Owner != "" && p.Owner != w.cfg.ID) {
				w.stopAgent(id)
			}
		}
	}
}

// proxyStart is a proxy-flow trajectory's start once its sandbox is up:
// the agent launched, and its first call (or its end).
func (w *Worker) proxyStart(ctx context.Context, t *traj.Trajectory, sb sandbox.Sandbox) (traj.Transition, error) {
	r, err := w.launch(t, sb)
	if err != nil {
		return traj.Failed{Reason: "agent: " + err.Error()}, nil
	}
	tr, err := r.await(ctx, t, w.d.Now())
	switch x := tr.(type) {
	case traj.Called:
		x.Owner, x.Handle = w.cfg.ID, sb.Handle()
		return x, nil
	case traj.AgentExited:
		x.Owner, x.Handle = w.cfg.ID, sb.Handle()
		return x, nil
	}
	return tr, err
}

// proxyExec is a proxy-flow trajectory's exec step (t loaded with its
// tokens): the call its last turn answers gets its answer, and the step
// ends at the agent's next call (or its end).
func (w *Worker) proxyExec(ctx context.Context, t *traj.Trajectory) (traj.Transition, error) {
	r := w.agentRun(t.ID)
	if r == nil {
		return agentLost(w.cfg.ID), nil
	}
	c := r.taken[t.Calls-1]
	if c == nil {
		return agentLost(w.cfg.ID), nil
	}
	if !c.answered {
		if err := r.answer(c, t, w.d.Now()); err != nil {
			return nil, err
		}
	}
	for k := range r.taken {
		if k < t.Calls-1 {
			delete(r.taken, k)
		}
	}
	return r.await(ctx, t, w.d.Now())
}

// agentLost ends a trajectory whose agent this worker does not run (it
// restarted since, or the trajectory was moved to it).
func agentLost(worker string) traj.AgentExited {
	return traj.AgentExited{Code: -1, Reason: fmt.Sprintf("agent lost: env-worker %s does not run this trajectory's agent "+
		"(the worker that ran it restarted, or the trajectory moved): a proxy-flow agent cannot be resumed", worker)}
}

// await waits for the agent's call after t's t.Calls turns, which it takes
// from the endpoint unless an earlier attempt of this step took it, and
// returns it as Called; or the agent's exit, the wall clock's end (now is
// the time on the trajectories' clock), the sample's env.step_timeout_ms
// without a call or an exit (the agent hangs: it fails), or ctx's. A call
// that cannot be rendered is answered 400 at once, and the wait goes on.
func (r *agentRun) await(ctx context.Context, t *traj.Trajectory, now time.Time) (traj.Transition, error) {
	k := t.Calls
	var deadline <-chan time.Time
	if wc := t.Sample.Limits.WallClock(); wc > 0 && !t.AdmittedAt.IsZero() {
		timer := time.NewTimer(t.AdmittedAt.Add(wc).Sub(now))
		defer timer.Stop()
		deadline = timer.C
	}
	idle := time.NewTimer(t.Sample.Env.StepTimeout())
	defer idle.Stop()
	for r.taken[k] == nil {
		select {
		case c := <-r.calls:
			if err := r.prepare(c); err != nil {
				c.answer <- writeError(err)
				continue
			}
			r.taken[k] = c
		case <-r.exited:
			if r.ctx.Err() != nil { // stopped, or the worker is ending: not the agent's doing
				return nil, r.stoppedErr(t.ID)
			}
			return r.exit(k), nil
		case <-r.done:
			return nil, r.stoppedErr(t.ID)
		case <-deadline:
			wc := t.Sample.Limits.WallClock()
			err := agent.CheckLimits(agent.Limits{WallClock: wc}, agent.Usage{Elapsed: wc})
			return traj.LimitReached{Limit: schema.LimitWallClock, Reason: err.Error() + " (the agent was working between calls)"}, nil
		case <-idle.C:
			return traj.AgentExited{Code: -1, Reason: fmt.Sprintf("the agent neither called nor exited within env.step_timeout_ms "+
				"(%v) of its start or its last answer: stopped", t.Sample.Env.StepTimeout())}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return r.called(r.taken[k])
}

// prepare decodes nothing (the handler did) but places c in the stream:
// what it appends, as the continuation rule has it.
func (r *agentRun) prepare(c *agentCall) error {
	if c.chat != nil {
		step, err := r.conv.Next(c.chat.Call(), r.tmpl)
		if err != nil {
			return &proxy.RequestError{Param: "messages", Message: err.Error(), Code: proxy.CodeInvalid}
		}
		c.step = step
		return nil
	}
	if c.text.PromptIDs != nil {
		c.step = r.conv.NextIDs(c.text.PromptIDs)
	} else {
		c.step = r.conv.NextText(c.text.Prompt, r.tmpl)
	}
	return nil
}

// called is the transition of call c: its tokens, the messages it adds
// (a text completion's appended text as a user message) and its own
// sampling fields.
func (r *agentRun) called(c *agentCall) (traj.Transition, error) {
	tr := traj.Called{Append: c.step.Append, NewSegment: c.step.NewSegment}
	var fields proxy.SamplingFields
	if c.chat != nil {
		fields = c.chat.SamplingFields
		for _, m := range c.chat.Messages[c.step.From:] {
			tr.Messages = append(tr.Messages, schema.Message{Role: m.Role, Content: m.Content})
		}
	} else {
		fields = c.text.SamplingFields
		tr.Messages = []schema.Message{{Role: schema.RoleUser, Content: r.tmpl.Tokenizer().Decode(c.step.Append)}}
	}
	b, err := json.Marshal(fields)
	if err != nil {
		return nil, err
	}
	tr.Call = string(b)
	return tr, nil
}

// answer answers c from t's last turn, the ids after the call's prompt in
// the stream, and records it in the conversation.
func (r *agentRun) answer(c *agentCall, t *traj.Trajectory, now time.Time) error {
	start := t.Segment + len(c.step.Prompt)
	if start > len(t.Tokens) {
		return fmt.Errorf("trajectory %s: the stream holds %d tokens, fewer than the call's prompt ends at (%d)", t.ID, len(t.Tokens), start)
	}
	res := llm.Result{OutputIDs: t.Tokens[start:], Logprobs: t.Logprobs[start:]}
	if t.Finish != "" {
		if err := json.Unmarshal([]byte(t.Finish), &res.Finish); err != nil {
			return fmt.Errorf("trajectory %s: the turn's finish: %w", t.ID, err)
		}
	}
	meta := proxy.Meta{ID: fmt.Sprintf("%s-%d", t.ID, t.Calls), Created: now.Unix()}
	var write func(*callWriter)
	if c.chat != nil {
		reply, err := proxy.ParseChatReply(r.tmpl, res, r.parsers.ForRequest(c.chat))
		if err != nil {
			return err
		}
		meta.Model = cmp.Or(c.chat.Model, r.model)
		resp := reply.Chat(meta, len(c.step.Prompt), c.chat.Logprobs)
		write = respond(c.chat.Stream, func(w io.Writer) error { return proxy.WriteChatStream(w, resp, c.chat.IncludeUsage) }, resp)
		r.conv.Commit(c.step, c.chat.Call(), reply)
	} else {
		reply, err := proxy.ParseTextReply(r.tmpl, res)
		if err != nil {
			return err
		}
		meta.Model = cmp.Or(c.text.Model, r.model)
		resp := reply.Completion(meta, len(c.step.Prompt), c.text.Logprobs != nil)
		write = respond(c.text.Stream, func(w io.Writer) error { return proxy.WriteCompletionStream(w, resp, c.text.IncludeUsage) }, resp)
		r.conv.Commit(c.step, proxy.Call{}, reply)
	}
	c.answer <- write
	c.answered = true
	return nil
}

// respond writes a response as server-sent events, or whole as JSON.
func respond(stream bool, events func(io.Writer) error, whole any) func(*callWriter) {
	return func(cw *callWriter) {
		if stream {
			cw.events(events)
			return
		}
		cw.json(whole)
	}
}

// writeError answers err as OpenAI's servers do (proxy.ErrorFor).
func writeError(err error) func(*callWriter) {
	return func(cw *callWriter) { cw.error(proxy.ErrorFor(err)) }
}

func writeErrorBody(w http.ResponseWriter, status int, body proxy.ErrorBody) {
	(&callWriter{w: w}).error(status, body)
}

func errorBody(message, typ string) proxy.ErrorBody {
	return proxy.ErrorBody{Error: proxy.ErrorDetail{Message: message, Type: typ}}
}

// stoppedErr is a step's error when its agent was stopped, not ended by
// itself: stopped for its trajectory's end, the step has nothing to commit
// (traj.ErrSkip); stopped as the worker ends, the step is handed back.
func (r *agentRun) stoppedErr(id string) error {
	select {
	case <-r.done:
		return fmt.Errorf("the agent of %s was stopped: %w", id, traj.ErrSkip)
	default:
		return fmt.Errorf("the agent of %s ended with its worker: %w", id, r.ctx.Err())
	}
}

// exit is the transition of the agent's end after calls calls: submitted
// with code 0 once it called at least once, else failed with its
// output's tail.
func (r *agentRun) exit(calls int) traj.Transition {
	if r.err != nil {
		return traj.AgentExited{Code: -1, Reason: "agent: " + r.err.Error()}
	}
	out := r.res.Output
	if len(out) > agentTailBytes {
		out = "…" + strings.ToValidUTF8(out[len(out)-agentTailBytes:], "")
	}
	switch {
	case r.res.ReturnCode == 0 && calls > 0:
		return traj.AgentExited{}
	case r.res.ReturnCode == 0:
		return traj.AgentExited{Code: -1, Reason: "the agent exited 0 without calling the model; its output ends:\n" + out}
	}
	return traj.AgentExited{Code: r.res.ReturnCode, Reason: fmt.Sprintf("the agent exited with code %d; its output ends:\n%s",
		r.res.ReturnCode, out)}
}

// ServeHTTP is the agent's endpoint: POST /v1/chat/completions and
// /v1/completions (one generation step each), GET /v1/models, each with
// the trajectory's key as a bearer token.
func (r *agentRun) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	auth, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(auth), []byte(r.key)) != 1 {
		writeErrorBody(w, http.StatusUnauthorized, errorBody("invalid API key: use this trajectory's OPENAI_API_KEY", "invalid_request_error"))
		return
	}
	switch {
	case req.URL.Path == "/v1/models" && req.Method == http.MethodGet:
		w.Header().Set("Content-Type", "application/json")
		_ = proxy.WriteJSON(w, map[string]any{"object": "list", "data": []map[string]any{
			{"id": r.model, "object": "model", "created": 0, "owned_by": "actloop"}}})
	case req.URL.Path == "/v1/chat/completions" || req.URL.Path == "/v1/completions":
		if req.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeErrorBody(w, http.StatusMethodNotAllowed, errorBody("use POST", "invalid_request_error"))
			return
		}
		r.serveCall(w, req)
	default:
		writeErrorBody(w, http.StatusNotFound, errorBody("no such endpoint: "+req.URL.Path+
			" (served: POST /v1/chat/completions, POST /v1/completions, GET /v1/models)", "invalid_request_error"))
	}
}

// serveCall decodes a call, hands it to the trajectory's steps, and
// writes the answer they give it.
func (r *agentRun) serveCall(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, MaxCallBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeErrorBody(w, http.StatusRequestEntityTooLarge, errorBody(fmt.Sprintf("the body is over %d bytes", MaxCallBytes), "invalid_request_error"))
		}
		return
	}
	c := &agentCall{answer: make(chan func(*callWriter), 1)}
	cw := &callWriter{w: w}
	if req.URL.Path == "/v1/chat/completions" {
		if c.chat, err = proxy.DecodeChatRequest(body); err == nil {
			cw.stream = c.chat.Stream
		}
	} else {
		if c.text, err = proxy.DecodeCompletionRequest(body); err == nil {
			cw.stream = c.text.Stream
		}
	}
	if err != nil {
		writeError(err)(cw)
		return
	}
	gone := func() {
		cw.error(http.StatusServiceUnavailable, errorBody("the trajectory is over: no more calls are served", "server_error"))
	}
	tick := time.NewTicker(r.keepAlive)
	defer tick.Stop()
	for sent := false; ; {
		var calls chan<- *agentCall
		if !sent {
			calls = r.calls
		}
		select {
		case calls <- c:
			sent = true
		case write := <-c.answer:
			write(cw)
			return
		case <-tick.C:
			if cw.stream {
				cw.keepAlive()
			}
		case <-r.done:
			gone()
			return
		case <-req.Context().Done():
			return
		}
	}
}
