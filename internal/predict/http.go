package predict

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/schema"
)

// maxReplyBytes bounds what a backend server's answer may hold.
const maxReplyBytes = 1 << 20

// HTTP asks an external model server: it POSTs an HTTPRequest as JSON
// (protocol HTTPProtocol: the PredictRequest's fields, the last exit code,
// and with HTTPSources the conversation's tail and the group siblings'
// progress) and expects 2xx with {"remaining_tokens": N,
// "remaining_turns": M}, both non-negative numbers. Anything else is an
// error naming the problem.
//
// With HTTPSources.Redis it also keeps, beside History's keys (one hash
// tag), the progress of the trajectories it was asked about after a model
// call, for their siblings' requests:
//
//	actloop:{predict}:progress:<group_id>  hash: traj_id -> "<gen_tokens> <turns>"
//
// and learns the finished siblings' totals as History does (Observe).
type HTTP struct {
	url     string
	timeout time.Duration
	hc      *http.Client
	src     HTTPSources
	hist    *History // with src.Redis
}

// HTTPSources is what HTTP reads beside the request. The zero value reads
// nothing: the body has no conversation and no siblings.
type HTTPSources struct {
	// Store holds the trajectories, whose messages make the conversation;
	// Template counts their tokens (required with Store).
	Store    *traj.Store
	Template tokenize.ChatTemplate
	// MessagesBytes bounds the tail of the conversation sent (the sum of
	// its messages' content bytes); 0 is DefaultMessagesBytes.
	MessagesBytes int
	// Redis holds the siblings' progress and, as History keeps them, their
	// totals; History configures those keys.
	Redis   redis.UniversalClient
	History HistoryConfig
}

var (
	_ Predictor = (*HTTP)(nil)
	_ interface {
		Observe(context.Context, schema.ResultHead) error
	} = (*HTTP)(nil)
)

// NewHTTP returns an HTTP predictor posting to url, each call bounded by
// timeout (none when <= 0) as well as by its context, that reads nothing
// beside the request.
func NewHTTP(url string, timeout time.Duration) *HTTP {
	return &HTTP{url: url, timeout: timeout, hc: newClient()}
}

// NewHTTPWith returns an HTTP predictor as NewHTTP does that reads src.
func NewHTTPWith(url string, timeout time.Duration, src HTTPSources) (*HTTP, error) {
	if src.Store != nil && src.Template == nil {
		return nil, errors.New("http predictor: a store needs a chat template to count the conversation's tokens")
	}
	if src.MessagesBytes < 0 || src.MessagesBytes > MaxMessagesBytes {
		return nil, fmt.Errorf("http predictor: messages bytes must be 0 to %d, got %d", MaxMessagesBytes, src.MessagesBytes)
	}
	if src.MessagesBytes == 0 {
		src.MessagesBytes = DefaultMessagesBytes
	}
	h := NewHTTP(url, timeout)
	h.src = src
	if src.Redis != nil {
		h.src.History = src.History.withDefaults()
		h.hist = NewHistory(src.Redis, src.History)
	}
	return h, nil
}

func newClient() *http.Client {
	return &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
}

// Close closes idle connections.
func (h *HTTP) Close() error {
	h.hc.CloseIdleConnections()
	return nil
}

// StatusError is a non-2xx answer of a backend server.
type StatusError struct {
	URL    string
	Status int
	Body   string // the start of the body
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s answered %d %s: %s", e.URL, e.Status, http.StatusText(e.Status), e.Body)
}

// Predict implements Predictor. Reading the sources and the server's
// answer share the timeout.
func (h *HTTP) Predict(ctx context.Context, req schema.PredictRequest) (schema.PredictReply, error) {
	if h.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, h.timeout)
		defer cancel()
	}
	in, err := h.request(ctx, req)
	if err != nil {
		return schema.PredictReply{}, fmt.Errorf("predict %s: %w", req.TrajID, err)
	}
	body, err := json.Marshal(in)
	if err != nil {
		return schema.PredictReply{}, fmt.Errorf("predict %s: %w", req.TrajID, err)
	}
	if len(body) > MaxHTTPRequestBytes {
		return schema.PredictReply{}, fmt.Errorf("predict %s: request of %d bytes, more than %d", req.TrajID, len(body), MaxHTTPRequestBytes)
	}
	b, err := postJSON(ctx, h.hc, h.url, 0, body)
	if err != nil {
		return schema.PredictReply{}, fmt.Errorf("predict %s: %w", req.TrajID, err)
	}
	rep, err := decodeHTTPReply(b)
	if err != nil {
		return schema.PredictReply{}, fmt.Errorf("predict %s: %s: %w", req.TrajID, h.url, err)
	}
	return rep, nil
}

// request builds the body for req from the sources.
func (h *HTTP) request(ctx context.Context, req schema.PredictRequest) (HTTPRequest, error) {
	in := HTTPRequest{PredictRequest: req, Protocol: HTTPProtocol, LastExitCode: LastExitCode(req)}
	if h.src.Store == nil && h.src.Redis == nil {
		return in, nil
	}
	if err := req.Validate(); err != nil { // its ids name keys
		return HTTPRequest{}, err
	}
	if h.src.Store != nil {
		t, err := h.src.Store.Load(ctx, req.TrajID, traj.WithMessages)
		switch {
		case errors.Is(err, traj.ErrNotFound): // a waiting sample: its task is in the request
		case err != nil && (strings.Contains(err.Error(), "NOPERM") || strings.Contains(err.Error(), "EXECABORT")):
			// Redis refused the read (a refused command aborts the
			// MULTI): an ACL without the trajectories, most likely.
			return HTTPRequest{}, fmt.Errorf("read the conversation: %w (predictor-gw's Redis user needs read access to "+
				"actloop:traj:*, or ACTLOOP_PREDICTOR_MESSAGES_BYTES=0 to send none)", err)
		case err != nil:
			return HTTPRequest{}, fmt.Errorf("read the conversation: %w", err)
		default:
			c := ConversationOf(t.Messages, req.Turns, req.ContextTokens, h.src.MessagesBytes, h.tokens)
			in.Conversation = &c
		}
	}
	if h.src.Redis != nil && req.GroupID != "" {
		if !schema.ValidID(req.GroupID) {
			return HTTPRequest{}, fmt.Errorf("group_id: invalid id %q", clip(req.GroupID, 80))
		}
		s, err := h.siblings(ctx, req)
		if err != nil {
			return HTTPRequest{}, err
		}
		in.Siblings = &s
	}
	return in, nil
}

func (h *HTTP) tokens(m schema.Message) int { return len(h.src.Template.Message(m.Role, m.Content)) }

func progressKey(group string) string { return keyPrefix + "progress:" + group }

// siblings records req's progress (after a model call) and reads its
// group's, in one round trip.
func (h *HTTP) siblings(ctx context.Context, req schema.PredictRequest) (Siblings, error) {
	pk := progressKey(req.GroupID)
	pipe := h.src.Redis.Pipeline()
	if req.Turns > 0 {
		pipe.HSet(ctx, pk, req.TrajID, entry(req.GenTokens, req.Turns))
		pipe.PExpire(ctx, pk, h.src.History.GroupTTL)
	}
	running := pipe.HGetAll(ctx, pk)
	finished := pipe.LRange(ctx, groupKey(req.GroupID), 0, MaxSiblings-1)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Siblings{}, fmt.Errorf("siblings of %s: %w", req.TrajID, err)
	}
	return SiblingsOf(req.TrajID, running.Val(), parseTotals(finished.Val())), nil
}

// SiblingsOf is the Siblings of trajectory self from its group's progress
// hash (traj_id -> "<gen_tokens> <turns>"; entries that do not parse are
// skipped) and its finished totals, newest first; each list holds at most
// MaxSiblings (the running ones first by traj_id).
func SiblingsOf(self string, progress map[string]string, finished []Total) Siblings {
	s := Siblings{Finished: []SiblingTotal{}, Running: []SiblingProgress{}}
	for _, t := range finished[:min(len(finished), MaxSiblings)] {
		s.Finished = append(s.Finished, SiblingTotal{GenTokens: t.Tokens, Turns: t.Turns})
	}
	for id, e := range progress {
		a, b, ok := strings.Cut(e, " ")
		if id == self || !ok || !schema.ValidID(id) {
			continue
		}
		tokens, err1 := strconv.Atoi(a)
		turns, err2 := strconv.Atoi(b)
		if err1 != nil || err2 != nil || tokens < 0 || turns < 0 {
			continue
		}
		s.Running = append(s.Running, SiblingProgress{TrajID: id, GenTokens: tokens, Turns: turns})
	}
	slices.SortFunc(s.Running, func(a, b SiblingProgress) int { return strings.Compare(a.TrajID, b.TrajID) })
	s.Running = s.Running[:min(len(s.Running), MaxSiblings)]
	return s
}

// Observe records a finished trajectory: its totals as History records
// them (a completed one, for its siblings' requests), and it is no longer
// running. Idempotent per traj_id; without HTTPSources.Redis it does
// nothing.
func (h *HTTP) Observe(ctx context.Context, r schema.ResultHead) error {
	if h.hist == nil {
		return nil
	}
	if err := h.hist.Observe(ctx, r); err != nil {
		return err
	}
	if r.GroupID == "" || !schema.ValidID(r.GroupID) {
		return nil
	}
	if err := h.src.Redis.HDel(ctx, progressKey(r.GroupID), r.TrajID).Err(); err != nil {
		return fmt.Errorf("observe %s: %w", r.TrajID, err)
	}
	return nil
}

// postJSON posts body to url (GETs when body is nil) and returns a 2xx
// answer's body.
func postJSON(ctx context.Context, hc *http.Client, url string, timeout time.Duration, body []byte) ([]byte, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	method, rd := http.MethodGet, io.Reader(nil)
	if body != nil {
		method, rd = http.MethodPost, bytes.NewReader(body)
	}
	hreq, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		hreq.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(hreq)
	if err != nil {
		return nil, err // names the method, the url and the cause (a deadline included)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxReplyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read answer of %s: %w", url, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, &StatusError{URL: url, Status: resp.StatusCode, Body: clip(string(b), 200)}
	}
	if len(b) > maxReplyBytes {
		return nil, fmt.Errorf("%s: answer larger than %d bytes: %w", url, maxReplyBytes, ErrBadReply)
	}
	return b, nil
}

// httpReply is what a model server answers.
type httpReply struct {
	RemainingTokens *float64 `json:"remaining_tokens"`
	RemainingTurns  *float64 `json:"remaining_turns"`
}

// decodeHTTPReply decodes a model server's answer. Every error wraps
// ErrBadReply and names the field.
func decodeHTTPReply(b []byte) (schema.PredictReply, error) {
	var in httpReply
	if err := json.Unmarshal(b, &in); err != nil {
		return schema.PredictReply{}, fmt.Errorf("%w: not a JSON object with numbers remaining_tokens and remaining_turns: %v (%q)",
			ErrBadReply, err, clip(string(b), 80))
	}
	for _, f := range []struct {
		name string
		v    *float64
	}{{"remaining_tokens", in.RemainingTokens}, {"remaining_turns", in.RemainingTurns}} {
		switch {
		case f.v == nil:
			return schema.PredictReply{}, fmt.Errorf("%w: %s missing", ErrBadReply, f.name)
		case *f.v < 0:
			return schema.PredictReply{}, fmt.Errorf("%w: %s must be >= 0, got %v", ErrBadReply, f.name, *f.v)
		}
	}
	return schema.PredictReply{V: schema.Version, RemainingTokens: *in.RemainingTokens,
		RemainingTurns: *in.RemainingTurns, Source: SourceHTTP}, nil
}

// clip shortens s for an error message.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
