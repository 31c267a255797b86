package coordinator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/pkg/client"
)

// errLeaseLost ends a term whose lease could not be renewed.
var errLeaseLost = errors.New("leader lease lost")

// Elected runs a coordinator only while it holds the leader lease, so that
// several may run (one leads, the others stand by). A standby campaigns
// for the lease; the winner builds a Coordinator (which loads its view from
// Redis) and runs it until its context ends or the lease is lost, then
// campaigns again. The HTTP API is the leader's; a standby answers /healthz
// but not /readyz, so a load balancer sends requests to the leader.
type Elected struct {
	cfg Config
	d   *service.Deps
	id  string

	cur    atomic.Pointer[term]   // the current term; nil while standing by
	leader atomic.Pointer[string] // the last leader id seen
	terms  atomic.Int64           // terms won
}

// term is one term's coordinator and its HTTP API.
type term struct {
	c *Coordinator
	h http.Handler
}

// NewElected returns an Elected; cfg.CoordinatorID names it in the lease
// (default the host name and process id).
func NewElected(cfg Config, d *service.Deps) *Elected {
	id := cfg.CoordinatorID
	if id == "" {
		host, _ := os.Hostname()
		id = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	return &Elected{cfg: cfg, d: d, id: id}
}

// Current returns the coordinator of the current term, nil while standing
// by.
func (e *Elected) Current() *Coordinator {
	if t := e.cur.Load(); t != nil {
		return t.c
	}
	return nil
}

// Terms is how many times this process won the lease.
func (e *Elected) Terms() int64 { return e.terms.Load() }

// Run campaigns and leads until ctx ends; on a clean stop the leader
// deletes the lease, so a standby takes over at once.
func (e *Elected) Run(ctx context.Context) error {
	kv, err := e.d.Topo.LeaderKV(ctx, e.d.JS, e.cfg.LeaderLease)
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	hctx, stopHTTP := context.WithCancel(ctx)
	defer func() {
		stopHTTP()
		<-served
	}()
	go func() { served <- service.Serve(hctx, e.cfg.Addr, e.handler(), e.d.Log) }()

	for ctx.Err() == nil {
		rev, err := e.campaign(ctx, kv)
		if err != nil {
			return nil // ctx ended
		}
		if err := e.lead(ctx, kv, rev); err != nil {
			return err
		}
	}
	return nil
}

// campaign waits until this process holds the lease, and returns its
// revision; it fails only when ctx ends.
func (e *Elected) campaign(ctx context.Context, kv jetstream.KeyValue) (uint64, error) {
	logged := "" // the leader or error last logged, so each is logged once
	// A lease handed over (deleted) shows in a watch at once; one that ran
	// out (expired) does not, so look again every tenth of the lease, at
	// least every second.
	t := time.NewTicker(min(max(e.cfg.LeaderLease/10, 10*time.Millisecond), time.Second))
	defer t.Stop()
	var handedOver <-chan jetstream.KeyValueEntry
	if w, err := kv.Watch(ctx, bus.KeyLeader, jetstream.UpdatesOnly()); err == nil {
		defer func() { _ = w.Stop() }()
		handedOver = w.Updates()
	}
	for {
		rev, err := kv.Create(ctx, bus.KeyLeader, []byte(e.id))
		if err == nil {
			return rev, nil
		}
		if ent, gerr := kv.Get(ctx, bus.KeyLeader); gerr == nil {
			leader := string(ent.Value())
			e.leader.Store(&leader)
			if leader == e.id {
				// Our own lease from an earlier term (or process) not yet
				// expired: take it back.
				if rev, err := kv.Update(ctx, bus.KeyLeader, []byte(e.id), ent.Revision()); err == nil {
					return rev, nil
				}
			} else if leader != logged {
				e.d.Log.Info("standing by", "leader", leader)
				logged = leader
			}
		} else if msg := gerr.Error(); msg != logged && ctx.Err() == nil {
			e.d.Log.Warn("campaign for the leader lease; will try again", "error", gerr)
			logged = msg
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-t.C:
		case _, ok := <-handedOver:
			if !ok {
				handedOver = nil // the watch ended under us: the ticker alone paces the campaign
			}
		}
	}
}

// lead runs one term: a coordinator under a context that ends with ctx or
// when the lease is lost. It returns nil when the term ended because of
// either, and the coordinator's error otherwise.
func (e *Elected) lead(ctx context.Context, kv jetstream.KeyValue, rev uint64) error {
	e.terms.Add(1)
	id := e.id
	e.leader.Store(&id)
	e.d.Log.Info("leading", "lease", e.cfg.LeaderLease)
	tctx, end := context.WithCancelCause(ctx)
	defer end(nil)
	renewed := make(chan uint64, 1)
	go func() { renewed <- e.renew(tctx, kv, rev, end) }()

	cfg := e.cfg
	cfg.Addr = "" // the Elected serves the API
	c, err := newTerm(tctx, cfg, e.d, rev)
	if err == nil {
		e.cur.Store(&term{c: c, h: c.Handler()})
		err = c.Run(tctx)
		e.cur.Store(nil)
	}
	cause := context.Cause(tctx)
	end(nil)
	last := <-renewed
	switch {
	case ctx.Err() != nil:
		if last > 0 {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			derr := kv.Delete(dctx, bus.KeyLeader, jetstream.LastRevision(last))
			if derr != nil {
				// A renewal cut off by the stop may have landed after all:
				// if the lease is still ours, hand over the revision it has.
				if ent, gerr := kv.Get(dctx, bus.KeyLeader); gerr == nil && string(ent.Value()) == e.id {
					derr = kv.Delete(dctx, bus.KeyLeader, jetstream.LastRevision(ent.Revision()))
				}
			}
			if derr != nil {
				e.d.Log.Warn("hand over the leader lease", "error", derr)
			}
		}
		return nil
	case errors.Is(cause, errLeaseLost):
		e.d.Log.Warn("stepped down: the leader lease was lost", "error", cause)
		return nil
	case errors.Is(err, ErrFenced):
		e.d.Log.Warn("stepped down: a coordinator of a later term leads", "error", err)
		return nil
	case client.Unanswered(err):
		// The term could not start or go on (JetStream not answering: a
		// node restarting, leaders being elected): campaign again, which
		// takes the lease back while it holds, and start over.
		e.d.Log.Warn("the term ended: JetStream does not answer; will try again", "error", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
		return nil
	case err != nil:
		return err
	}
	return nil
}

// renew renews the lease every third of it until ctx ends, and returns the
// last revision it holds (0 if lost). When a renewal is refused (another
// process holds the key) or none has succeeded for most of the lease, it
// ends the term with errLeaseLost before the key can expire at the server.
func (e *Elected) renew(ctx context.Context, kv jetstream.KeyValue, rev uint64, end context.CancelCauseFunc) uint64 {
	lease := e.cfg.LeaderLease
	every := max(lease/3, 10*time.Millisecond)
	// A renewal counts from when it was sent, and the term ends a fifth of
	// the lease before the server could expire the key.
	deadline := time.Now().Add(lease - lease/5)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return rev
		case <-t.C:
		}
		sent := time.Now()
		rctx, cancel := context.WithTimeout(ctx, every)
		next, err := kv.Update(rctx, bus.KeyLeader, []byte(e.id), rev)
		cancel()
		switch {
		case err == nil:
			rev, deadline = next, sent.Add(lease-lease/5)
		case ctx.Err() != nil:
			return rev
		case isRefused(err):
			end(fmt.Errorf("%w: %w", errLeaseLost, err))
			return 0
		case time.Now().After(deadline):
			end(fmt.Errorf("%w: no renewal for %v: %w", errLeaseLost, lease-lease/5, err))
			return 0
		default:
			e.d.Log.Warn("renew the leader lease; will try again", "error", err)
		}
	}
}

// isRefused reports whether err says the key moved on (another revision:
// someone else holds it, or it expired).
func isRefused(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyExists) ||
		(errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence)
}

// handler serves the leader's API while leading; a standby answers
// /healthz and /metrics, and 503 naming the leader to everything else.
func (e *Elected) handler() http.Handler {
	health := service.HealthMux(e.d)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if t := e.cur.Load(); t != nil {
			t.h.ServeHTTP(w, r)
			return
		}
		if r.URL.Path == "/healthz" || r.URL.Path == "/metrics" {
			health.ServeHTTP(w, r)
			return
		}
		leader := "none yet"
		if l := e.leader.Load(); l != nil {
			leader = *l
		}
		http.Error(w, fmt.Sprintf("coordinator %s is standing by (leader: %s)", e.id, leader), http.StatusServiceUnavailable)
	})
}
