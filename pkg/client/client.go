package client

import (
	"context"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/pkg/control"
	"github.com/actloop/actloop/pkg/schema"
)

// Client is a trainer's connection to actloop over NATS. It is safe for
// concurrent use.
type Client struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	ctl    control.Client
	bodies *Bodies

	mu   sync.Mutex
	seen map[string]*dedupe // by consumer name and subject: what was acknowledged
}

// New returns a Client over nc. The caller keeps nc and closes it after
// the Client's last call.
func New(nc *nats.Conn) (*Client, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	return &Client{nc: nc, js: js, ctl: control.Client{NC: nc}, bodies: NewBodies(js), seen: map[string]*dedupe{}}, nil
}

// Pause pauses generation for a weight update and returns once every live
// gen-worker has paused (in req.Mode: schema.PauseAbort or
// schema.PauseDrain). ctx bounds the wait (a minute when it has no
// deadline); req.TimeoutMS, or the coordinator's default, should be
// shorter.
func (c *Client) Pause(ctx context.Context, req schema.PauseRequest) (schema.PauseReply, error) {
	return c.ctl.Pause(ctx, req)
}

// Resume resumes generation; a non-nil version becomes the current weight
// version.
func (c *Client) Resume(ctx context.Context, version *int64) (schema.Control, error) {
	return c.ctl.Resume(ctx, version)
}

// Abort ends the trajectories req names, and the waiting and running
// members of its groups, each with a result of status aborted.
func (c *Client) Abort(ctx context.Context, req schema.AbortRequest) (schema.AbortReply, error) {
	return c.ctl.Abort(ctx, req)
}

// Control returns the control state and each gen-worker's newest pause
// report.
func (c *Client) Control(ctx context.Context) (schema.ControlStatus, error) {
	return c.ctl.Get(ctx)
}
