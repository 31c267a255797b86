// Package control is the trainer's client for weight synchronisation: pause
// generation, resume it with a new weight version, read the control state.
// It talks to the coordinator by NATS request-reply on actloop.control.*.
package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/actloop/actloop/pkg/schema"
)

// Client calls the coordinator over NC.
type Client struct {
	NC *nats.Conn
	// Name is how the coordinator's audit of each call names this client;
	// "" is the NATS user (or "-") at this host.
	Name string
}

// Error is a call the coordinator refused or could not complete; Missing
// names the gen-workers a pause waited for in vain.
type Error struct {
	Op      string
	Message string
	Missing []string
}

func (e *Error) Error() string {
	if len(e.Missing) > 0 {
		return fmt.Sprintf("%s: %s (missing: %s)", e.Op, e.Message, strings.Join(e.Missing, ", "))
	}
	return e.Op + ": " + e.Message
}

// Pause pauses generation and returns once every live gen-worker has
// paused. ctx bounds the wait; the pause's own timeout (req.TimeoutMS, or
// the coordinator's default) should be shorter.
func (c *Client) Pause(ctx context.Context, req schema.PauseRequest) (schema.PauseReply, error) {
	var out schema.PauseReply
	err := c.call(ctx, "pause", schema.SubjectControlPause, req, &out)
	return out, err
}

// Resume resumes generation; a non-nil version becomes the current weight
// version.
func (c *Client) Resume(ctx context.Context, version *int64) (schema.Control, error) {
	var out schema.Control
	err := c.call(ctx, "resume", schema.SubjectControlResume, schema.ResumeRequest{WeightVersion: version}, &out)
	return out, err
}

// Abort ends the trajectories req names, and the waiting and running
// members of its groups, with results of status aborted.
func (c *Client) Abort(ctx context.Context, req schema.AbortRequest) (schema.AbortReply, error) {
	var out schema.AbortReply
	err := c.call(ctx, "abort", schema.SubjectControlAbort, req, &out)
	return out, err
}

// Get returns the control state and the gen-workers' newest reports.
func (c *Client) Get(ctx context.Context) (schema.ControlStatus, error) {
	var out schema.ControlStatus
	err := c.call(ctx, "control", schema.SubjectControlGet, struct{}{}, &out)
	return out, err
}

func (c *Client) call(ctx context.Context, op, subject string, req, out any) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Minute)
		defer cancel()
	}
	b, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	msg := nats.NewMsg(subject)
	msg.Data = b
	msg.Header.Set(schema.HeaderClient, c.name())
	m, err := c.NC.RequestMsgWithContext(ctx, msg)
	if errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("%s: no coordinator answers on %s: %w", op, subject, err)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	var e schema.APIError
	if json.Unmarshal(m.Data, &e) == nil && e.Error != "" {
		return &Error{Op: op, Message: e.Error, Missing: e.Missing}
	}
	if err := json.Unmarshal(m.Data, out); err != nil {
		return fmt.Errorf("%s: answer: %w", op, err)
	}
	return nil
}

// name is how the coordinator's audit names this client: Name, or its
// NATS user (or "-") at its host.
func (c *Client) name() string {
	if c.Name != "" {
		return c.Name
	}
	user := c.NC.Opts.User
	if user == "" {
		user = "-"
	}
	host, _ := os.Hostname()
	return user + "@" + host
}
