package virtual

import (
	"cmp"
	"math"
	"slices"

	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/stat"

	"github.com/actloop/actloop/internal/batching"
	"github.com/actloop/actloop/internal/workload"
)

// Result is what a run measured, in virtual seconds.
type Result struct {
	Trajectories, Completed int
	MakespanS               float64
	MeanLatencyS            float64
	P99LatencyS             float64
	GeneratedTokens         int64
	TokensPerS              float64
	Preemptions             int64
	ResumedTokens           int64 // output kept across interruptions
	DiscardedTokens         int64 // output a trainer's sync discarded (Trainer.DiscardPartials)
	Reprefilled             int64 // prompt tokens prefilled again (the gen-workers' count)
	Retractions             int64
	Holds                   int64 // trajectories held (priority.KVPools.Hold), each time
	Prefilled, Cached       int64 // input tokens computed, and served from the cache
	Evicted                 int64
	// With a host tier (hierarchical cache): input tokens loaded back from
	// host memory instead of prefilled, the seconds those loads took
	// (summed over the servers; they overlap their iterations' compute),
	// and tokens freed from host memory.
	Loaded, HostEvicted int64
	LoadS               float64
	Iterations          int64
	Syncs               int
	PeakActive          int     // most trajectories admitted at once
	InputPerCall        float64 // mean input tokens of a generation call
	// VersionSpread: per trajectory the spread of the weight versions its
	// tokens came from (max − min), mean and largest.
	VersionSpread  float64
	VersionSpreadX int64
	// KVUse is the mean share of the servers' token pools held by running
	// requests and the prefixes they lock, sampled every KVUseStepS
	// (KVUseSeries) and averaged over the makespan; BusyShare the share
	// of the makespan the servers spent in iterations.
	KVUse, BusyShare float64
	KVUseStepS       float64
	KVUseSeries      []float64
	// Where the makespan goes: the trajectory that finished last waited
	// LastAdmitS for admission and then ran LastRunS against its critical
	// path LastPathS; over all trajectories the mean admission wait, the
	// mean stretch (run time over critical path), and the mean seconds a
	// trajectory spent with its gen step queued at the gen-worker, at the
	// server (queued, prefilling, decoding), and in its sandbox (start-up,
	// commands, eval).
	LastAdmitS, LastRunS, LastPathS float64
	MeanAdmitWaitS, MeanStretch     float64
	MeanGenQueueS, MeanServerS      float64
	MeanEnvS                        float64
	// How good the predictions were: the share of the times asked that a
	// prediction came, and over those, the mean absolute error of the
	// remaining tokens and Spearman's rank correlation of predicted with
	// true remaining tokens (what lpt and sjf rank by).
	PredCoverage, PredMAE, PredRankCorr float64
	// Trainer is what a steady-state run's trainer took (nil without one).
	// Such a run stops when the trainer has its batches, so the figures
	// above are over the trajectories finished by then, and MakespanS is
	// when it stopped.
	Trainer *TrainerResult
}

func (e *engine) result() Result {
	r := e.res
	r.Trajectories, r.Completed = len(e.ts), e.done
	r.KVUseStepS = e.cfg.SampleEveryS
	var lat []float64
	var last *traj
	n := float64(e.done)
	for _, t := range e.ts {
		if !t.finished { // a steady-state run stops with some under way
			continue
		}
		lat = append(lat, t.finishedAt)
		if last == nil || t.finishedAt > last.finishedAt {
			last = t
		}
		r.GeneratedTokens += int64(t.genTokens)
		r.MeanAdmitWaitS += t.admittedAt / n
		r.MeanStretch += (t.finishedAt - t.admittedAt) / Path(t.plan, e.cfg.Server.Cost) / n
		r.MeanGenQueueS += t.genQueueS / n
		r.MeanServerS += t.serverS / n
		r.MeanEnvS += t.envS / n
		if t.versions[0] <= t.versions[1] {
			spread := t.versions[1] - t.versions[0]
			r.VersionSpread += float64(spread) / n
			r.VersionSpreadX = max(r.VersionSpreadX, spread)
		}
	}
	slices.Sort(lat)
	r.MakespanS = last.finishedAt
	r.LastAdmitS, r.LastRunS, r.LastPathS = last.admittedAt, last.finishedAt-last.admittedAt, Path(last.plan, e.cfg.Server.Cost)
	for _, l := range lat {
		r.MeanLatencyS += l / n
	}
	r.P99LatencyS = lat[min(len(lat)-1, len(lat)*99/100)]
	r.TokensPerS = float64(r.GeneratedTokens) / r.MakespanS
	r.KVUseSeries = r.KVUseSeries[:min(len(r.KVUseSeries), int(math.Ceil(r.MakespanS/r.KVUseStepS)))]
	var busy, usage float64
	for _, w := range e.ws {
		st := w.srv.Stats()
		busy += st.BusyS
		usage += st.UsageTokenS
		r.Prefilled += st.Prefilled
		r.Cached += st.Cached
		r.Evicted += st.Evicted
		r.Loaded += st.Loaded
		r.HostEvicted += st.HostEvicted
		r.LoadS += st.LoadS
		r.Iterations += st.Iterations
	}
	r.InputPerCall = float64(e.inputTokens) / float64(max(e.calls, 1))
	span := r.MakespanS * float64(len(e.ws))
	r.BusyShare = busy / span
	r.KVUse = usage / span / float64(e.cfg.Server.MaxTotalTokens)
	r.PredCoverage = float64(len(e.predErrs)) / float64(max(e.asked, 1))
	r.PredMAE, r.PredRankCorr = predictionError(e.predErrs)
	r.Trainer = e.trainerResult()
	return r
}

// predictionError is the mean absolute error of the pairs (predicted,
// true) and Spearman's rank correlation between the two (0 for fewer than
// two pairs or a constant side).
func predictionError(pairs [][2]float64) (mae, rho float64) {
	if len(pairs) == 0 {
		return 0, 0
	}
	pred, truth := make([]float64, len(pairs)), make([]float64, len(pairs))
	for i, p := range pairs {
		mae += math.Abs(p[0]-p[1]) / float64(len(pairs))
		pred[i], truth[i] = p[0], p[1]
	}
	a, b := ranks(pred), ranks(truth)
	if len(pairs) < 2 || floats.Max(a) == floats.Min(a) || floats.Max(b) == floats.Min(b) {
		return mae, 0
	}
	return mae, stat.Correlation(a, b, nil)
}

// ranks returns the rank of each of xs (1-based; ties share their mean
// rank).
func ranks(xs []float64) []float64 {
	idx := make([]int, len(xs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(i, j int) int { return cmp.Compare(xs[i], xs[j]) })
	out := make([]float64, len(xs))
	for i := 0; i < len(idx); {
		j := i
		for j < len(idx) && xs[idx[j]] == xs[idx[i]] {
			j++
		}
		for k := i; k < j; k++ {
			out[idx[k]] = float64(i+j+1) / 2
		}
		i = j
	}
	return out
}

// Path is t's critical path on an idle server under cost c: its sandbox's
// start-up; each turn's new input prefilled (in chunks of
// chunked_prefill_size) after a cached context, then its reply decoded
// alone; each command; the eval's sandbox start-up and the eval. No
// schedule finishes t sooner after admitting it.
func Path(t *workload.Trajectory, c batching.Cost) float64 {
	path := 2*t.Startup + t.Eval
	chunk := batching.DefaultConfig().ChunkedPrefill
	ctx, fresh := 0, t.Prompt
	for k, n := range t.Tokens {
		for done := 0; done < fresh; done += chunk {
			m := min(chunk, fresh-done)
			before := ctx + done
			path += c.Seconds(batching.Shape{PrefillTokens: m, PrefillAttn: batching.AttnPairs(m, before)})
		}
		ctx += fresh
		// The prefill gave the first token; each of the rest is a decode of
		// one request, whose time grows linearly with its context.
		reply := n + replyEndTokens
		m := float64(reply - 1)
		alone := c.Seconds(batching.Shape{DecodeBatch: 1})
		path += m*alone + c.PerKVToken*(m*float64(ctx)+m*(m+1)/2)
		ctx += reply
		if k < len(t.Exec) {
			path += t.Exec[k]
			fresh = t.Obs[k] + obsTemplateTokens
		}
	}
	return path
}

// Bound is a lower bound on a batch's makespan on a machine, in seconds:
// the larger of the work (every replica busy with the batch's decode and
// prefill work at the best the pool allows) and the longest critical path.
//
// Decode: each decode iteration costs at least the fixed and per-request
// terms, and reads each decoding request's context, so the decode work is
// at least (Fixed + DecodeFixed) × I + PerDecodeSeq × N + PerKVToken × K
// for N decoded tokens reading K KV tokens in all, where the iterations I
// are at least N / max_running_requests and K / max_total_num_tokens (an
// iteration reads no more KV than the pool holds). Prefill: every new token
// is prefilled at least once, in chunks of at most chunked_prefill_size,
// and its attention covers its context whatever the chunking; a group's
// shared prompt is new once for the whole group (its other rollouts find it
// in the radix cache, at best on the same replica). Prefill and
// decode run in separate iterations (SGLang's default), so their times add.
// Re-prefill, queueing and the iteration a request waits to join are left
// out, so the bound is below any schedule's makespan.
type Bound struct {
	DecodeS, PrefillS, WorkS, PathS, S float64
}

// LowerBound is the bound of plans on cfg's machine.
func LowerBound(plans []workload.Trajectory, cfg Config) Bound {
	c, srv := cfg.Server.Cost, cfg.Server
	var b Bound
	var decoded, kv, fresh, pairs float64
	prompted := map[string]bool{} // groups whose shared prompt is counted
	for i := range plans {
		t := &plans[i]
		b.PathS = max(b.PathS, Path(t, c))
		ctx, f := 0.0, float64(t.Prompt)
		if prompted[t.GroupID] {
			ctx, f = f, 0 // cached: only what follows the prompt is new
		}
		prompted[t.GroupID] = true
		for k, n := range t.Tokens {
			pairs += f * (ctx + (f+1)/2)
			fresh += f
			ctx += f
			m := float64(n + replyEndTokens - 1) // the prefill gave the first token
			decoded += m
			kv += m*ctx + m*(m+1)/2
			ctx += m + 1
			if k < len(t.Obs) {
				f = float64(t.Obs[k] + obsTemplateTokens)
			}
		}
	}
	iters := max(decoded/float64(srv.MaxRunning), kv/float64(srv.MaxTotalTokens))
	b.DecodeS = (c.Fixed+c.DecodeFixed)*iters + c.PerDecodeSeq*decoded + c.PerKVToken*kv
	b.PrefillS = c.Fixed*math.Ceil(fresh/float64(srv.ChunkedPrefill)) + c.PerPrefillToken*fresh + c.PerAttnPair*pairs
	b.WorkS = (b.DecodeS + b.PrefillS) / float64(cfg.Replicas)
	b.S = max(b.WorkS, b.PathS)
	return b
}
