package sim

import (
	"container/list"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/actloop/actloop/pkg/llm"
)

// job is one /generate request on its way through the simulated scheduler.
// Fields marked (mu) are guarded by Server.mu; the rest belong to the
// handler goroutine that runs the job.
type job struct {
	req   *genRequest
	plan  plan
	start time.Time

	abortCh chan struct{} // closed by abortLocked
	doneCh  chan struct{} // closed when the job has ended

	aborted   bool          // (mu)
	admitCh   chan struct{} // (mu) closed when the job is admitted from the queue
	elem      *list.Element // (mu) non-nil while in the queue
	front     bool          // (mu) queue at the front: retracted
	holdsSlot bool          // (mu)
	phase     Phase         // (mu)
	generated int           // (mu) output tokens generated, not counting the running segment
	segActive bool          // (mu) a decode segment is running
	segStart  time.Time     // (mu)
	perTok    time.Duration // (mu)
	cached    int           // (mu) cached tokens of the first prefill
	prefilled bool          // (mu) a prefill has started
	m         *modelJob     // (mu) its request in the server model (Config.Model)
}

// waitResult is how a wait ended.
type waitResult int

const (
	waitDone    waitResult = iota // the wait finished (or the job was admitted)
	waitAbort                     // the job was aborted
	waitPaused                    // generation was paused
	waitRetract                   // the job was retracted to the queue by a pause
	waitGone                      // the client went away
)

// endKind is how a job ended.
type endKind int

const (
	endFinished endKind = iota
	endAbortWaiting
	endAbortPrefill
	endAbortDecode
	endGone
)

// run drives j from the queue through prefill and decode to its end.
func (s *Server) run(ctx context.Context, j *job) endKind {
	for {
		switch s.admit(ctx, j) {
		case waitAbort:
			return endAbortWaiting
		case waitGone:
			return endGone
		}
		switch s.prefill(ctx, j) {
		case waitAbort:
			return endAbortPrefill
		case waitGone:
			return endGone
		case waitRetract:
			continue
		}
		switch s.decode(ctx, j) {
		case waitAbort:
			return endAbortDecode
		case waitGone:
			return endGone
		case waitRetract:
			continue
		}
		return endFinished
	}
}

// admit gives j a slot, waiting in the queue if none is free or generation
// is paused.
func (s *Server) admit(ctx context.Context, j *job) waitResult {
	s.mu.Lock()
	if j.aborted {
		s.mu.Unlock()
		return waitAbort
	}
	if !s.paused && s.running < s.cfg.MaxRunning && s.queue.Len() == 0 {
		s.takeSlotLocked(j)
		s.mu.Unlock()
		return waitDone
	}
	j.admitCh = make(chan struct{})
	if j.front {
		j.elem = s.queue.PushFront(j)
	} else {
		j.elem = s.queue.PushBack(j)
	}
	j.front = false
	j.phase = PhaseWaiting
	admitted := j.admitCh
	s.mu.Unlock()

	select {
	case <-admitted:
		return waitDone
	case <-j.abortCh:
		return waitAbort
	case <-ctx.Done():
		return waitGone
	}
}

func (s *Server) takeSlotLocked(j *job) {
	j.holdsSlot = true
	j.phase = PhasePrefill
	s.running++
}

// releaseLocked frees j's slot, if it holds one, for the next in the queue.
func (s *Server) releaseLocked(j *job) {
	if !j.holdsSlot {
		return
	}
	j.holdsSlot = false
	s.running--
	s.admitLocked()
}

// admitLocked admits queued jobs while slots are free.
func (s *Server) admitLocked() {
	for !s.paused && s.running < s.cfg.MaxRunning && s.queue.Len() > 0 {
		j := s.queue.Remove(s.queue.Front()).(*job)
		j.elem = nil
		s.takeSlotLocked(j)
		close(j.admitCh)
	}
}

// abortLocked marks j aborted and wakes it; it answers at once.
func (s *Server) abortLocked(j *job) {
	if j.aborted {
		return
	}
	j.aborted = true
	close(j.abortCh)
	if s.mdl != nil {
		s.abortModelLocked(j)
		return
	}
	if j.elem != nil {
		s.queue.Remove(j.elem)
		j.elem = nil
	}
}

// abortMatchingLocked aborts every live job whose rid starts with prefix
// (all of them if all is set) and returns their done channels.
func (s *Server) abortMatchingLocked(prefix string, all bool) []chan struct{} {
	var done []chan struct{}
	for j := range s.jobs {
		if all || strings.HasPrefix(j.req.RID, prefix) {
			s.abortLocked(j)
			done = append(done, j.doneCh)
		}
	}
	return done
}

// context is what a prefill of j computes: the prompt and the output so far.
func (j *job) context() []int32 {
	return slices.Concat(j.req.InputIDs, j.plan.ids[:j.generated])
}

func (s *Server) prefill(ctx context.Context, j *job) waitResult {
	s.mu.Lock()
	ctxIDs := j.context()
	cached := s.cache.match(ctxIDs)
	if !j.prefilled {
		j.prefilled, j.cached = true, cached
	}
	s.stats.PromptTokens += int64(len(ctxIDs))
	s.stats.CachedTokens += int64(cached)
	d := s.simTime(float64(len(ctxIDs)-cached) / s.cfg.PrefillTokensPerSec)
	s.mu.Unlock()

	for {
		res, elapsed := s.sleep(ctx, j, time.Now(), d)
		switch res {
		case waitDone:
			s.mu.Lock()
			s.cache.insert(ctxIDs)
			s.mu.Unlock()
			return waitDone
		case waitPaused:
			if r := s.onPause(ctx, j); r != waitDone {
				return r
			}
			d -= elapsed
		default:
			return res
		}
	}
}

func (s *Server) decode(ctx context.Context, j *job) waitResult {
	n := len(j.plan.ids)
	for {
		s.mu.Lock()
		if j.aborted {
			s.mu.Unlock()
			return waitAbort
		}
		slow := 1 + s.cfg.BatchSlowdown*float64(s.running-1)
		perTok := s.simTime(slow / s.cfg.DecodeTokensPerSec)
		remaining := n - j.generated
		start := time.Now()
		j.phase, j.perTok, j.segStart, j.segActive = PhaseDecode, perTok, start, true
		s.mu.Unlock()

		// Progress counts from the same start that RequestInfo reports from,
		// so an abort never returns fewer tokens than were reported.
		res, elapsed := s.sleep(ctx, j, start, perTok*time.Duration(remaining))

		s.mu.Lock()
		j.segActive = false
		if res == waitDone {
			j.generated = n
		} else {
			j.generated += progress(elapsed, perTok, remaining)
		}
		s.mu.Unlock()

		if res != waitPaused {
			return res
		}
		if r := s.onPause(ctx, j); r != waitDone {
			return r
		}
	}
}

// progress is how many of remaining tokens elapsed covers.
func progress(elapsed, perTok time.Duration, remaining int) int {
	if perTok <= 0 {
		return 0
	}
	return min(int(elapsed/perTok), remaining)
}

// sleep waits until d after start, or less if j is aborted, generation
// pauses or the client goes away; it returns how it ended and the time
// since start.
func (s *Server) sleep(ctx context.Context, j *job, start time.Time, d time.Duration) (waitResult, time.Duration) {
	s.mu.Lock()
	aborted, paused, pauseCh := j.aborted, s.paused, s.pauseCh
	s.mu.Unlock()
	switch {
	case aborted:
		return waitAbort, min(time.Since(start), d)
	case paused:
		return waitPaused, min(time.Since(start), d)
	case d <= 0:
		return waitDone, 0
	}
	t := time.NewTimer(d - time.Since(start))
	defer t.Stop()
	select {
	case <-t.C:
		return waitDone, d
	case <-j.abortCh:
		return waitAbort, min(time.Since(start), d)
	case <-pauseCh:
		return waitPaused, min(time.Since(start), d)
	case <-ctx.Done():
		return waitGone, min(time.Since(start), d)
	}
}

// onPause handles a pause that caught j holding a slot: in_place waits for
// generation to continue (waitDone); retract gives up the slot and sends j
// back to the front of the queue (waitRetract); abort mode has aborted j.
func (s *Server) onPause(ctx context.Context, j *job) waitResult {
	s.mu.Lock()
	if j.aborted {
		s.mu.Unlock()
		return waitAbort
	}
	if !s.paused {
		s.mu.Unlock()
		return waitDone
	}
	if s.pauseMode == pauseRetract {
		s.releaseLocked(j)
		j.front = true
		j.phase = PhaseWaiting
		s.mu.Unlock()
		return waitRetract
	}
	resumed := s.resumeCh
	s.mu.Unlock()
	select {
	case <-resumed:
		return waitDone
	case <-j.abortCh:
		return waitAbort
	case <-ctx.Done():
		return waitGone
	}
}

// end retires j and returns its answer (nil when the client is gone).
func (s *Server) end(j *job, kind endKind) *generateOutput {
	s.mu.Lock()
	s.releaseLocked(j)
	if j.elem != nil {
		s.queue.Remove(j.elem)
		j.elem = nil
	}
	delete(s.jobs, j)
	delete(s.byRID, j.req.RID) // before it answers, as SGLang frees a rid before its answer
	close(j.doneCh)
	gen := j.generated
	version := s.version
	cached := j.cached
	switch {
	case kind == endFinished && s.mdl == nil:
		s.cache.insert(slices.Concat(j.req.InputIDs, j.plan.ids))
	case kind == endFinished:
	case kind == endAbortDecode && s.mdl == nil:
		s.cache.insert(j.context())
		s.stats.Aborted++
	default:
		s.stats.Aborted++
	}
	s.stats.GeneratedTokens += int64(gen)
	s.mu.Unlock()

	if kind == endGone {
		return nil
	}
	req, p := j.req, &j.plan
	latency := time.Since(j.start).Seconds()
	out := &generateOutput{MetaInfo: metaOutput{ID: req.RID, WeightVersion: &version, E2ELatency: &latency}}
	ids := p.ids[:gen]
	if req.ReturnLogprob {
		out.MetaInfo.OutputTokenLogprobs = &logprobList{ids: ids, lps: p.lps[:gen]}
	}
	out.MetaInfo.CompletionTokens = gen
	prompt := len(req.InputIDs)

	if kind == endAbortPrefill && gen == 0 {
		// TokenizerManager's "Abort before prefill": no output_ids, no log-probs.
		zero := 0
		out.MetaInfo = metaOutput{
			ID:           req.RID,
			FinishReason: map[string]any{"type": "abort", "message": "Abort before prefill"},
			PromptTokens: &zero,
		}
		return out
	}
	out.OutputIDs = (*llm.TokenIDs)(&ids)
	out.Text = outputText(s.voc, req, p, ids, kind == endFinished)
	switch kind {
	case endAbortWaiting:
		// TokenizerManager._handle_abort_req: no prompt_tokens or cached_tokens.
		out.MetaInfo.FinishReason = map[string]any{"type": "abort", "message": "Abort in waiting queue"}
		return out
	case endAbortPrefill, endAbortDecode:
		out.MetaInfo.FinishReason = map[string]any{"type": "abort", "message": "Aborted", "status_code": nil, "err_type": nil}
	case endFinished:
		switch p.kind {
		case finishStopToken:
			out.MetaInfo.FinishReason = map[string]any{"type": "stop", "matched": p.matchedID}
		case finishStopString:
			out.MetaInfo.FinishReason = map[string]any{"type": "stop", "matched": p.matchedStr}
		default:
			out.MetaInfo.FinishReason = map[string]any{"type": "length", "length": p.length}
		}
	}
	out.MetaInfo.PromptTokens = &prompt
	out.MetaInfo.CachedTokens = &cached
	return out
}

// simTime converts simulated seconds to wall time.
func (s *Server) simTime(sec float64) time.Duration {
	if s.cfg.TimeScale <= 0 || sec <= 0 {
		return 0
	}
	return time.Duration(sec * s.cfg.TimeScale * float64(time.Second))
}

// info describes j now.
func (s *Server) infoLocked(j *job) RequestInfo {
	if s.mdl != nil {
		return s.modelInfoLocked(j)
	}
	info := RequestInfo{Phase: j.phase, Generated: j.generated}
	if j.segActive {
		info.Generated += progress(time.Since(j.segStart), j.perTok, len(j.plan.ids)-j.generated)
	}
	return info
}
