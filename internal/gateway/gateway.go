// Package gateway is the HTTP trainer API: what a trainer without a
// JetStream library (a Python trainer on the standard library) needs, over
// plain HTTP and JSON. It submits samples (one, a batch or JSONL, validated
// with per-line errors), reads results and group completions from the
// trainer's durable consumers with long polls, acknowledges them, and makes
// the control calls (pause, resume, abort, control) and reads the status.
//
// It is stateless: a read hands out each delivery with an ack token (its
// JetStream ack subject), which any gateway replica accepts, so gateways
// scale horizontally behind a load balancer and a trainer that reconnects
// to another one goes on where it stopped. Delivery is the consumers':
// at least once, a delivery not acknowledged within client.AckWait coming
// again; the results stream holds one result per trajectory, so a trainer
// that acknowledges what it has kept sees each trajectory once. The
// contract is openapi.yaml in this package, served at GET /v1/openapi.yaml.
package gateway

import (
	"context"
	_ "embed" // the API description is served as written
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/actloop/actloop/internal/metrics"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/pkg/client"
	"github.com/actloop/actloop/pkg/control"
	"github.com/actloop/actloop/pkg/schema"
)

//go:embed openapi.yaml
var openAPI []byte

// MaxSubmitBytes bounds a POST /v1/samples body: a batch of samples at
// schema.MaxSampleBytes each.
const MaxSubmitBytes = 256 << 20

// ackPrefix is the start of every ack token: the JetStream ack subjects of
// the results stream, and nothing else.
const ackPrefix = "$JS.ACK." + schema.StreamResults + "."

// consumerName is what a consumer may be called: a JetStream durable name
// without the characters subjects give meaning to.
var consumerName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Gateway serves the HTTP trainer API.
type Gateway struct {
	cfg    Config
	d      *service.Deps
	bodies *client.Bodies
	// consumers caches the durable consumers made so far, each for
	// consumerTTL (an optimisation: making one is idempotent; made again,
	// client.EnsureConsumerRequest sees a name taken up for another
	// subject or run after the server deleted an unused one).
	consumers sync.Map // name+"\x00"+subject+"\x00"+run -> cachedConsumer

	requests *prometheus.CounterVec   // by route and code
	seconds  *prometheus.HistogramVec // by route
}

// New returns a gateway over d, its metrics registered on d.Metrics.
func New(cfg Config, d *service.Deps) *Gateway {
	g := &Gateway{cfg: cfg, d: d, bodies: client.NewBodies(d.JS),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "actloop_gateway_requests_total",
			Help: metrics.Names()["actloop_gateway_requests_total"].Help}, []string{"route", "code"})}
	var routes []string
	for _, rt := range g.routes() {
		routes = append(routes, rt.method+" "+rt.path)
		g.requests.WithLabelValues(rt.method+" "+rt.path, "200")
	}
	g.seconds = metrics.NewHistogramVec("actloop_gateway_request_seconds", "route", routes...)
	d.Metrics.MustRegister(g.requests, g.seconds)
	return g
}

// Run serves until ctx ends.
func (g *Gateway) Run(ctx context.Context) error {
	return service.Serve(ctx, g.cfg.Addr, g.Handler(), g.d.Log)
}

// route is one call of the API: its method and path, as openapi.yaml
// lists them (a test holds the two together), and whether it is open to
// callers without the token.
type route struct {
	method, path string
	open         bool
	h            http.HandlerFunc
}

func (g *Gateway) routes() []route {
	return []route{
		{"GET", "/v1/openapi.yaml", true, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/yaml")
			_, _ = w.Write(openAPI)
		}},
		{"POST", "/v1/samples", false, g.submit},
		{"GET", "/v1/results", false, g.read(schema.SubjectResults)},
		{"GET", "/v1/groups", false, g.read(schema.SubjectGroups)},
		{"POST", "/v1/ack", false, g.settle("+ACK")},
		{"POST", "/v1/nak", false, g.settle("-NAK")},
		{"POST", "/v1/pause", false, g.control("pause")},
		{"POST", "/v1/resume", false, g.control("resume")},
		{"POST", "/v1/abort", false, g.control("abort")},
		{"GET", "/v1/control", false, g.control("get")},
		{"GET", "/v1/status", false, g.status},
	}
}

// Handler serves the API, /healthz, /readyz and /metrics, where each
// route's requests are counted by status code and timed
// (actloop_gateway_requests_total, actloop_gateway_request_seconds).
func (g *Gateway) Handler() http.Handler {
	mux := service.HealthMux(g.d)
	for _, rt := range g.routes() {
		var h http.Handler = rt.h
		if !rt.open {
			h = service.Bearer(g.cfg.APIToken, h)
		}
		name := rt.method + " " + rt.path
		route := prometheus.Labels{"route": name}
		h = promhttp.InstrumentHandlerCounter(g.requests.MustCurryWith(route),
			promhttp.InstrumentHandlerDuration(g.seconds.MustCurryWith(route), h))
		mux.Handle(name, h)
	}
	return mux
}

func fail(w http.ResponseWriter, status int, err error) {
	writeJSON(w, status, schema.APIError{Error: err.Error()})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// LineError is a sample of a POST /v1/samples that cannot be submitted:
// its line (1-based; for a JSON array, its index + 1) and why.
type LineError struct {
	Line  int    `json:"line"`
	ID    string `json:"id,omitempty"`
	Error string `json:"error"`
}

// MaxLineErrors bounds the errors a refused POST /v1/samples lists, and
// MaxLineErrorBytes each one's text: a large batch that is wrong
// throughout would otherwise get an answer as large as itself.
// SubmitReply.Omitted counts the errors left out.
const (
	MaxLineErrors     = 100
	MaxLineErrorBytes = 1024
)

// SubmitReply answers POST /v1/samples.
type SubmitReply struct {
	Accepted int         `json:"accepted"`
	Errors   []LineError `json:"errors,omitempty"`
	// Omitted counts the bad lines beyond the first MaxLineErrors, which
	// Errors leaves out.
	Omitted int    `json:"omitted,omitempty"`
	Error   string `json:"error,omitempty"`
	// Already lists the ids of a resubmitted batch (resubmit=true) found
	// stored by an earlier attempt: counted in Accepted, not stored again.
	Already []string `json:"already,omitempty"`
}

// lineErrors collects a batch's LineErrors, keeping the first
// MaxLineErrors, each cut to MaxLineErrorBytes, and counting the rest.
type lineErrors struct {
	list    []LineError
	omitted int
}

func (e *lineErrors) add(line int, id, msg string) {
	if len(e.list) >= MaxLineErrors {
		e.omitted++
		return
	}
	if len(msg) > MaxLineErrorBytes {
		cut := MaxLineErrorBytes
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + fmt.Sprintf("… (%d bytes more)", len(msg)-cut)
	}
	e.list = append(e.list, LineError{Line: line, ID: id, Error: msg})
}

func (e *lineErrors) count() int { return len(e.list) + e.omitted }

// reply is the answer that lists the errors, with what of them it left
// out.
func (e *lineErrors) reply(summary string) SubmitReply {
	if e.omitted > 0 {
		summary += fmt.Sprintf(" (the first %d listed, %d more left out)", len(e.list), e.omitted)
	}
	return SubmitReply{Errors: e.list, Omitted: e.omitted, Error: summary}
}

// submit validates every sample of the body (one JSON object, a JSON
// array, or JSON lines) and, if all are valid, their ids distinct and
// their groups consistent, answers 400 listing each bad line (the first
// MaxLineErrors). It then looks up each id (client.CheckIDs) and answers
// 409, listing each, if a result of an earlier run holds one; else it
// publishes the samples in order, each with Nats-Msg-Id = its id, and
// answers 409 for a sample the stream answers as a duplicate of one
// stored within its duplicate window (client.PublishSample: the samples
// before it are stored, it and the rest are not).
//
// With resubmit=true the caller says the batch is one it submitted before
// and whose answer it lost (a retry): a sample whose id an earlier result
// holds, or the stream answers as a duplicate, is taken as that earlier
// attempt's, stored: it counts in accepted and is listed in already, and
// the rest are published. Ids unique to the caller (a run prefix) make
// that exact.
func (g *Gateway) submit(w http.ResponseWriter, r *http.Request) {
	resubmit, err := boolParam(r.URL.Query(), "resubmit")
	if err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxSubmitBytes+1))
	switch {
	case err != nil:
		fail(w, http.StatusBadRequest, fmt.Errorf("read body: %w", err))
		return
	case len(body) > MaxSubmitBytes:
		fail(w, http.StatusRequestEntityTooLarge, fmt.Errorf("body exceeds %d bytes: submit in batches", MaxSubmitBytes))
		return
	}
	lines, err := splitSamples(body)
	if err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	var errs lineErrors
	var groups schema.GroupCheck
	ids := make([]string, len(lines))
	first := map[string]int{}
	for i, l := range lines {
		s, err := schema.DecodeSample(l)
		if err != nil {
			var named struct{ ID string }
			if json.Unmarshal(l, &named) != nil || !schema.ValidID(named.ID) { // name the sample when it can be read
				named.ID = ""
			}
			errs.add(i+1, named.ID, err.Error())
			continue
		}
		if prev, dup := first[s.ID]; dup {
			errs.add(i+1, s.ID, fmt.Sprintf("id: %q repeats line %d", s.ID, prev))
			continue
		}
		first[s.ID], ids[i] = i+1, s.ID
		if err := groups.Add(&s); err != nil {
			errs.add(i+1, s.ID, err.Error())
		}
	}
	if errs.count() > 0 {
		writeJSON(w, http.StatusBadRequest, errs.reply(fmt.Sprintf("%d of %d samples are invalid; none was submitted", errs.count(), len(lines))))
		return
	}
	taken, err := client.CheckIDs(r.Context(), g.d.JS, ids)
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, SubmitReply{Error: fmt.Sprintf("%v; none was submitted", err)})
		return
	}
	var already []string
	stored := make([]bool, len(lines)) // by an earlier attempt (resubmit)
	for i, err := range taken {
		switch {
		case err != nil && resubmit:
			stored[i] = true
			already = append(already, ids[i])
		case err != nil:
			errs.add(i+1, ids[i], err.Error())
		}
	}
	if errs.count() > 0 {
		writeJSON(w, http.StatusConflict, errs.reply(fmt.Sprintf("%d of %d sample ids are taken by earlier runs; none was submitted", errs.count(), len(lines))))
		return
	}
	for i, l := range lines {
		if stored[i] {
			continue
		}
		err := client.PublishSample(r.Context(), g.d.JS, ids[i], l)
		switch {
		case errors.Is(err, client.ErrIDTaken) && resubmit:
			already = append(already, ids[i])
		case errors.Is(err, client.ErrIDTaken):
			errs.add(i+1, ids[i], err.Error())
			rep := errs.reply(fmt.Sprintf("sample %s (line %d): its id is taken; the first %d are stored, it and the rest are not", ids[i], i+1, i))
			rep.Accepted = i
			writeJSON(w, http.StatusConflict, rep)
			return
		case err != nil:
			writeJSON(w, http.StatusServiceUnavailable, SubmitReply{Accepted: i, Already: already,
				Error: fmt.Sprintf("sample %s (line %d): %v; the first %d are stored: submit the samples from line %d on again", ids[i], i+1, err, i, i+1)})
			return
		}
	}
	writeJSON(w, http.StatusOK, SubmitReply{Accepted: len(lines), Already: already})
}

// splitSamples cuts a body into samples: the elements of a JSON array, or
// its non-blank lines (one JSON object is one line).
func splitSamples(body []byte) ([][]byte, error) {
	trimmed := strings.TrimSpace(string(body))
	if trimmed == "" {
		return nil, errors.New("no sample in the body")
	}
	if strings.HasPrefix(trimmed, "[") {
		var raw []json.RawMessage
		if err := json.Unmarshal([]byte(trimmed), &raw); err != nil {
			return nil, fmt.Errorf("body: not a JSON array of samples: %w", err)
		}
		out := make([][]byte, len(raw))
		for i, m := range raw {
			out[i] = m
		}
		return out, nil
	}
	var out [][]byte
	for l := range strings.SplitSeq(trimmed, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, []byte(l))
		}
	}
	return out, nil
}

// Delivery is one result or group handed out by a read: settle it by its
// Ack token (POST /v1/ack or /v1/nak) within client.AckWait, or it comes
// again.
type Delivery struct {
	Ack    string            `json:"ack"`
	Result *schema.Result    `json:"result,omitempty"`
	Group  *schema.GroupDone `json:"group,omitempty"`
}

// ReadReply answers GET /v1/results and /v1/groups. Dropped lists
// deliveries that cannot be read (their body gone or not matching its
// head): they are terminated, never delivered again.
type ReadReply struct {
	Deliveries []Delivery `json:"deliveries"`
	Dropped    []string   `json:"dropped,omitempty"`
}

// read answers a long poll on the durable consumer named by the consumer
// parameter of subject's messages: up to max (default 16) deliveries,
// waiting up to wait_ms (default 5,000) for the first and returning those
// that came by then. With run, the consumer is that run's
// (client.ConsumerRequest.Run): it hands out only the messages of ids
// that start with run + "." and acknowledges the others unseen; a
// consumer name in use for another subject or run is refused (409).
func (g *Gateway) read(subject string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		name := q.Get("consumer")
		if !consumerName.MatchString(name) {
			fail(w, http.StatusBadRequest, fmt.Errorf("consumer: %q is not a consumer name ([A-Za-z0-9_-]{1,64})", name))
			return
		}
		// The gateway's NATS user is denied them: refused here, the call
		// would only time out.
		if schema.ServiceConsumer(name) {
			fail(w, http.StatusBadRequest, fmt.Errorf("consumer: %q is a service's consumer; name one of your own", name))
			return
		}
		batchMax, err := intParam(q, "max", 16, 1, g.cfg.MaxBatch)
		if err != nil {
			fail(w, http.StatusBadRequest, err)
			return
		}
		waitMS, err := intParam(q, "wait_ms", 5000, 0, int(g.cfg.MaxWait.Milliseconds()))
		if err != nil {
			fail(w, http.StatusBadRequest, err)
			return
		}
		run := q.Get("run")
		if q.Has("run") && !client.ValidRun(run) {
			fail(w, http.StatusBadRequest, fmt.Errorf("run: %q is not a run (%s: an id's first part, without '.')", run, client.RunPattern))
			return
		}
		cons, err := g.consumer(r.Context(), name, subject, run)
		switch {
		case errors.Is(err, client.ErrConsumerConflict):
			fail(w, http.StatusConflict, err)
			return
		case err != nil:
			fail(w, http.StatusServiceUnavailable, err)
			return
		}
		var msgs []jetstream.Msg
		if run == "" {
			msgs, err = fetch(cons, batchMax, time.Duration(waitMS)*time.Millisecond)
		} else {
			msgs, err = fetchRun(cons, batchMax, time.Duration(waitMS)*time.Millisecond, client.RunSubjectPrefix(subject, run))
		}
		if err != nil {
			fail(w, http.StatusServiceUnavailable, fmt.Errorf("fetch from %s: %w", name, err))
			return
		}
		reply := ReadReply{Deliveries: []Delivery{}}
		for _, m := range msgs {
			d := Delivery{Ack: m.Reply()}
			if subject == schema.SubjectGroups {
				gd, err := schema.Decode[schema.GroupDone](m.Data())
				if err != nil {
					_ = m.Term()
					reply.Dropped = append(reply.Dropped, fmt.Sprintf("%s: %v", m.Subject(), err))
					continue
				}
				d.Group = &gd
			} else {
				res, err := g.bodies.Decode(r.Context(), m.Data())
				if err != nil {
					_ = m.Term()
					reply.Dropped = append(reply.Dropped, fmt.Sprintf("%s: %v", m.Subject(), err))
					continue
				}
				d.Result = &res
			}
			reply.Deliveries = append(reply.Deliveries, d)
		}
		writeJSON(w, http.StatusOK, reply)
	}
}

// fetch returns up to n messages of cons: those there now, or else the
// first to come within wait and any there with it. (A pull of n would wait
// for all n.)
func fetch(cons jetstream.Consumer, n int, wait time.Duration) ([]jetstream.Msg, error) {
	var out []jetstream.Msg
	pull := func(b jetstream.MessageBatch, err error) error {
		if err != nil {
			return err
		}
		for m := range b.Messages() {
			out = append(out, m)
		}
		if err := b.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return nil
	}
	if err := pull(cons.FetchNoWait(n)); err != nil || len(out) > 0 || wait <= 0 {
		return out, err
	}
	if err := pull(cons.Fetch(1, jetstream.FetchMaxWait(max(wait, time.Millisecond)))); err != nil || len(out) == 0 || n == 1 {
		return out, err
	}
	return out, pull(cons.FetchNoWait(n - 1))
}

// fetchRun is fetch of the messages whose subject starts with prefix (a
// run's, client.RunSubjectPrefix): the others are acknowledged, never to
// come again to this consumer, which is the run's. It reads on until it
// has n, or has some and no more are there now, or wait has passed.
func fetchRun(cons jetstream.Consumer, n int, wait time.Duration, prefix string) ([]jetstream.Msg, error) {
	deadline := time.Now().Add(wait)
	var out []jetstream.Msg
	for {
		left := time.Until(deadline)
		w := max(left, 0)
		if len(out) > 0 {
			w = 0 // some to answer with: only what is there now
		}
		msgs, err := fetch(cons, n-len(out), w)
		for _, m := range msgs {
			if strings.HasPrefix(m.Subject(), prefix) {
				out = append(out, m)
			} else {
				_ = m.Ack() // another run's
			}
		}
		if err != nil {
			for _, m := range out {
				_ = m.Nak()
			}
			return nil, err
		}
		if len(out) == n || (len(msgs) == 0 && (len(out) > 0 || left <= 0)) || time.Now().After(deadline) {
			return out, nil
		}
	}
}

func intParam(q url.Values, name string, def, lo, hi int) (int, error) {
	v := q.Get(name)
	if v == "" {
		return min(def, hi), nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("%s: %q is not an integer in [%d, %d]", name, v, lo, hi)
	}
	return n, nil
}

// consumerTTL is how long the gateway uses a consumer it made without
// asking for it again.
const consumerTTL = time.Minute

type cachedConsumer struct {
	c  jetstream.Consumer
	at time.Time
}

// boolParam reads an optional true/false parameter.
func boolParam(q url.Values, name string) (bool, error) {
	v := q.Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s: %q is not true or false", name, v)
	}
	return b, nil
}

// consumer creates, or takes up again, the durable consumer name of
// subject (of run, when not "") on the results stream, as pkg/client does.
func (g *Gateway) consumer(ctx context.Context, name, subject, run string) (jetstream.Consumer, error) {
	key := name + "\x00" + subject + "\x00" + run
	if c, ok := g.consumers.Load(key); ok && time.Since(c.(cachedConsumer).at) < consumerTTL {
		return c.(cachedConsumer).c, nil
	}
	c, err := client.EnsureConsumerRequest(ctx, g.d.NC, g.d.JS, client.ConsumerRequest{Name: name, Subject: subject, Run: run})
	if errors.Is(err, client.ErrConsumerConflict) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("consumer %s of %s: %w", name, subject, err)
	}
	g.consumers.Store(key, cachedConsumer{c: c, at: time.Now()})
	return c, nil
}

// SettleRequest is the body of POST /v1/ack and /v1/nak: ack tokens of
// deliveries.
type SettleRequest struct {
	Acks []string `json:"acks"`
}

// SettleReply answers it: how many were settled, and the tokens that were
// not, with why (an ack too late is one whose delivery came again).
type SettleReply struct {
	Settled int         `json:"settled"`
	Failed  []AckFailed `json:"failed,omitempty"`
}

// AckFailed is a token that could not be settled.
type AckFailed struct {
	Ack   string `json:"ack"`
	Error string `json:"error"`
}

// settle acknowledges (+ACK) or hands back (-NAK) deliveries by their
// tokens, waiting for the server to confirm each.
func (g *Gateway) settle(kind string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req SettleRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, schema.MaxMessageBytes)).Decode(&req); err != nil {
			fail(w, http.StatusBadRequest, fmt.Errorf("body: want {\"acks\": [tokens]}: %w", err))
			return
		}
		for i, a := range req.Acks {
			if !strings.HasPrefix(a, ackPrefix) || strings.ContainsAny(a, " *>") {
				fail(w, http.StatusBadRequest, fmt.Errorf("acks[%d]: %q is not an ack token of a delivery", i, a))
				return
			}
			if cons, _, _ := strings.Cut(strings.TrimPrefix(a, ackPrefix), "."); schema.ServiceConsumer(cons) {
				fail(w, http.StatusBadRequest, fmt.Errorf("acks[%d]: %q is a delivery of a service's consumer", i, a))
				return
			}
		}
		reply := SettleReply{}
		for _, a := range req.Acks {
			ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
			_, err := g.d.NC.RequestWithContext(ctx, a, []byte(kind))
			cancel()
			if err != nil {
				reply.Failed = append(reply.Failed, AckFailed{Ack: a, Error: err.Error()})
				continue
			}
			reply.Settled++
		}
		writeJSON(w, http.StatusOK, reply)
	}
}

// control makes the control call op through the coordinator (NATS
// request-reply), naming the HTTP client in the coordinator's audit.
func (g *Gateway) control(op string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, schema.MaxMessageBytes))
		if err != nil {
			fail(w, http.StatusBadRequest, fmt.Errorf("read body: %w", err))
			return
		}
		c := control.Client{NC: g.d.NC, Name: "gateway " + r.RemoteAddr}
		var answer any
		switch op {
		case "pause":
			var req schema.PauseRequest
			if req, err = schema.DecodeRequest[schema.PauseRequest](body); err == nil {
				answer, err = c.Pause(r.Context(), req)
			}
		case "resume":
			var req schema.ResumeRequest
			if req, err = schema.DecodeRequest[schema.ResumeRequest](body); err == nil {
				answer, err = c.Resume(r.Context(), req.WeightVersion)
			}
		case "abort":
			var req schema.AbortRequest
			if req, err = schema.DecodeRequest[schema.AbortRequest](body); err == nil {
				if err = req.Validate(); err == nil { // an empty body decodes to an empty request
					answer, err = c.Abort(r.Context(), req)
				}
			}
		default:
			answer, err = c.Get(r.Context())
		}
		var ce *control.Error
		var fe *schema.FieldError
		switch {
		case errors.As(err, &fe):
			fail(w, http.StatusBadRequest, err)
		case errors.As(err, &ce) && len(ce.Missing) > 0: // a pause that timed out
			writeJSON(w, http.StatusGatewayTimeout, schema.APIError{Error: ce.Error(), Missing: ce.Missing})
		case errors.As(err, &ce):
			fail(w, http.StatusConflict, err)
		case err != nil:
			fail(w, http.StatusServiceUnavailable, err)
		default:
			writeJSON(w, http.StatusOK, answer)
		}
	}
}

// status proxies the coordinator's GET /v1/status.
func (g *Gateway) status(w http.ResponseWriter, r *http.Request) {
	if g.cfg.CoordinatorURL == "" {
		fail(w, http.StatusNotImplemented, errors.New("status: this gateway has no ACTLOOP_COORDINATOR_URL"))
		return
	}
	coord := client.Coordinator{URL: g.cfg.CoordinatorURL, Token: g.cfg.APIToken}
	st, err := coord.Status(r.Context())
	if err != nil {
		fail(w, http.StatusBadGateway, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(st)
}
