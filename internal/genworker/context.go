package genworker

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/actloop/actloop/pkg/llm"
)

// serverContext is the context length of the replica's inference server,
// as the server says it (llm.ContextLengthReader): each generation's
// max_new_tokens is capped to fit it, and a trajectory whose next call
// leaves no room ends limit_exceeded (context_length).
type serverContext struct {
	n     atomic.Int64 // 0: unbounded (the server does not say, or not read yet)
	tried atomic.Bool  // the first read is done (or there is nothing to read)
}

// length is the context length to cap generations at; 0: none.
func (c *serverContext) length() int { return int(c.n.Load()) }

// ready reports whether the first read is done: the worker pulls no gen
// step before, so that even the first is capped (a read that failed leaves
// generations uncapped until a later one succeeds).
func (c *serverContext) ready() bool { return c.tried.Load() }

// contextReadTimeout bounds one read of the context length: the worker
// pulls nothing until the first has ended.
const contextReadTimeout = 10 * time.Second

// contextLoop reads the server's context length at start, again after a
// failed read (every ACTLOOP_LLM_HEALTH_INTERVAL) and whenever the server
// comes back after being down (it may have restarted with another
// --context-length), until ctx ends. What it read is logged; a server that
// does not say is unbounded, and said so once.
func (w *Worker) contextLoop(ctx context.Context) error {
	r, ok := w.gen.(llm.ContextLengthReader)
	if !ok {
		w.ctxLen.tried.Store(true)
		w.d.Log.Info("the inference client reads no context length: generations are not capped to fit one",
			"replica", w.cfg.Replica)
		return nil
	}
	var failed, unbounded bool
	for {
		rctx, cancel := context.WithTimeout(ctx, contextReadTimeout)
		n, err := r.ContextLength(rctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			if !failed {
				w.d.Log.Warn("read the inference server's context length (trying again; until it is read, generations "+
					"are capped by the length read before, if any)", "replica", w.cfg.Replica, "error", err)
			}
			failed = true
		case n > 0:
			if old := w.ctxLen.n.Swap(int64(n)); old != int64(n) {
				w.d.Log.Info("inference server's context length: max_new_tokens is capped to fit it",
					"replica", w.cfg.Replica, "context_length", n)
			}
			failed, unbounded = false, false
		default:
			w.ctxLen.n.Store(0)
			if !unbounded {
				w.d.Log.Info("the inference server does not say its context length: generations are not capped "+
					"(a call it refuses for its length ends the trajectory limit_exceeded)", "replica", w.cfg.Replica)
			}
			failed, unbounded = false, true
		}
		w.ctxLen.tried.Store(true)
		if !w.waitAgain(ctx, failed, w.health.up) {
			return nil
		}
	}
}

// waitAgain waits until a loop reading the server should read it again:
// after ACTLOOP_LLM_HEALTH_INTERVAL when its last read failed, and whenever
// the server comes back (up). It reports false once ctx has ended.
func (w *Worker) waitAgain(ctx context.Context, failed bool, up <-chan struct{}) bool {
	var retryC <-chan time.Time
	if failed {
		retry := time.NewTimer(w.cfg.LLMHealthInterval)
		defer retry.Stop()
		retryC = retry.C
	}
	select {
	case <-ctx.Done():
	case <-retryC:
	case <-up:
	}
	return ctx.Err() == nil
}
