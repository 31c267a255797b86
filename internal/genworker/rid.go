package genworker

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/actloop/actloop/pkg/llm"
)

// Retries of a generation whose request id the server still runs: the
// stale request is aborted before each, and an abort takes the server a
// moment (SGLang's scheduler frees the rid when its abort comes back), so
// they wait staleWait, doubling, at most staleWaitMax: about 3 s in all.
// Then the step fails transiently and is tried again later.
const (
	staleRetries = 8
	staleWait    = 20 * time.Millisecond
	staleWaitMax = time.Second
)

// generate runs req, first aborting a request under its id that the server
// still runs. A trajectory's generations share its request id, so a step
// run again (redelivered after a worker died mid-generation, or published
// again by the coordinator) can find the request an earlier run of it
// started still on the server, which refuses a second request under the
// same id while the first runs (duplicateRID). That earlier run never
// committed: its output is dropped, and the request is aborted by its id,
// whichever worker or prefix made it. A pause or preemption of g that comes
// meanwhile ends the wait with an abort before prefill, which commits
// nothing and resumes later.
func (w *Worker) generate(ctx context.Context, req llm.Request, g *generation) (llm.Result, error) {
	wait := staleWait
	for attempt := 0; ; attempt++ {
		res, err := w.gen.Generate(ctx, req)
		if !duplicateRID(err) || attempt == staleRetries {
			return res, err
		}
		if attempt == 0 {
			w.d.Log.Warn("request id still runs on the server (a stale run of this step): aborting it",
				"rid", req.RID, "replica", w.cfg.Replica)
		}
		if g.interrupted() {
			return abortedBeforePrefill(), nil
		}
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_ = w.gen.Abort(actx, req.RID) // a failed abort shows in the next attempt
		cancel()
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return res, err
		case <-t.C:
		}
		wait = min(2*wait, staleWaitMax)
		if g.interrupted() {
			return abortedBeforePrefill(), nil
		}
	}
}

// duplicateRID reports whether err is the server refusing a request whose
// id it runs already: SGLang's TokenizerManager ("Duplicate request ID
// detected: <rid>", answered 400), or vLLM's OutputProcessor ("Request id
// <id> already running.").
func duplicateRID(err error) bool {
	var he *llm.HTTPError
	return errors.As(err, &he) && he.Status == http.StatusBadRequest &&
		(strings.Contains(he.Body, "Duplicate request ID") || strings.Contains(he.Body, "already running"))
}

// interrupted reports whether g was aborted for a preemption or a pause.
func (g *generation) interrupted() bool { return g.preempted.Load() || g.paused.Load() }

// abortedBeforePrefill is the answer of a generation aborted before the
// server started it: no tokens.
func abortedBeforePrefill() llm.Result {
	return llm.Result{Finish: llm.Finish{Type: llm.FinishAbort, Matched: -1, Message: "Abort before prefill"}}
}
