package virtual

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Trainer is the trainer of a steady-state asynchronous RL run. It takes
// finished trajectories in the order they finish, BatchSize at a time,
// while no weight sync is under way; each batch is followed at once by a
// weight sync (the generations in flight are aborted and their partial
// output kept, the prefix caches flushed, generation resumed after
// SyncPauseS under the next weight version, as the engine's syncs do;
// DiscardPartials drops that partial output instead), so the trainer is
// never the bottleneck: what is measured is the rollout.
//
// Staleness follows actloop's rules (ACTLOOP_MAX_STALENESS,
// ACTLOOP_STALE_POLICY=keep): a partial generated under an older version
// continues under the new one; a trajectory's staleness when the trainer
// takes it is the current weight version minus the version of its oldest
// token, and one more than MaxStaleness behind is delivered flagged and
// dropped by the trainer (not trainable; its GPU time is spent for
// nothing). Admission is bounded by AReaL's rule (priority.StalenessRoom)
// over the trajectories admitted and not dropped, as AReaL counts accepted
// and running ones.
type Trainer struct {
	BatchSize, Batches, WarmupBatches int
	MaxStaleness                      int64
	// DiscardPartials is the ablation of actloop's partial rollout at a
	// batch's end (the tail): a loop without partial
	// rollout. A generation the weight sync after a batch aborts loses the
	// output of its turn so far: that turn's partial tokens (those of
	// earlier preemptions of the turn too) and their weight versions are
	// dropped, and the turn is generated again from its start under the
	// new version (more prefill and decode), so a trajectory whose only
	// old-version tokens were in that partial is not stale for them. The
	// trajectory itself carries over: its prompt, whole replies and
	// observations, their versions (and staleness) and its sandbox are
	// kept. A preemption's abort still keeps its partial. When false
	// (actloop as it runs), every aborted generation's partial is kept and
	// continued under the new version, as the gen-workers' pause does.
	DiscardPartials bool
}

func (tr *Trainer) validate(c Config) error {
	var errs []error
	if tr.BatchSize < 1 {
		errs = append(errs, fmt.Errorf("trainer: batch_size must be >= 1, got %d", tr.BatchSize))
	}
	if tr.Batches <= tr.WarmupBatches || tr.WarmupBatches < 0 {
		errs = append(errs, fmt.Errorf("trainer: batches (%d) must be more than warmup_batches (%d) >= 0", tr.Batches, tr.WarmupBatches))
	}
	if tr.MaxStaleness < 0 {
		errs = append(errs, fmt.Errorf("trainer: max_staleness must be >= 0, got %d", tr.MaxStaleness))
	}
	if c.SyncEvery > 0 {
		errs = append(errs, fmt.Errorf("trainer: sync_every must be 0 (a weight sync follows each batch), got %g", c.SyncEvery))
	}
	return errors.Join(errs...)
}

// Staleness is how many weight versions behind version a trajectory whose
// oldest token came from oldest is (0 for a trajectory with no tokens:
// oldest math.MaxInt64).
func Staleness(version, oldest int64) int64 {
	if oldest == math.MaxInt64 {
		return 0
	}
	return max(version-oldest, 0)
}

// Batch is one batch the trainer took.
type Batch struct {
	// AtS is when it was taken; Version the weight version then (the
	// batches taken before it).
	AtS     float64
	Version int64
	// Staleness is the staleness of each trajectory in it.
	Staleness []int64
}

// trainerState is the trainer's side of a run.
type trainerState struct {
	ready   []int // finished trajectories not taken yet, in finishing order
	batches []Batch
	dropped int
}

// train takes a batch if the trainer can: no weight sync under way, and
// BatchSize trajectories fresh enough among those finished. A taken batch
// starts a weight sync now.
func (e *engine) train() {
	tr, st := e.cfg.Trainer, &e.trainer
	if tr == nil || e.paused || e.trained() {
		return
	}
	st.ready = slices.DeleteFunc(st.ready, func(i int) bool {
		if Staleness(e.version, e.ts[i].versions[0]) > tr.MaxStaleness {
			e.ts[i].dropped = true
			st.dropped++
			return true
		}
		return false
	})
	if len(st.ready) < tr.BatchSize {
		return
	}
	b := Batch{AtS: e.now, Version: e.version}
	for _, i := range st.ready[:tr.BatchSize] {
		b.Staleness = append(b.Staleness, Staleness(e.version, e.ts[i].versions[0]))
	}
	st.ready = slices.Delete(st.ready, 0, tr.BatchSize)
	st.batches = append(st.batches, b)
	if !e.trained() {
		e.pause()
		e.q.push(e.now+e.cfg.SyncPauseS, evResume, 0)
	}
}

// trained reports whether the trainer has taken all its batches: the run
// is over.
func (e *engine) trained() bool {
	return e.cfg.Trainer != nil && len(e.trainer.batches) >= e.cfg.Trainer.Batches
}

// trainerResult is the trainer's figures at the end of the run.
func (e *engine) trainerResult() *TrainerResult {
	tr := e.cfg.Trainer
	if tr == nil {
		return nil
	}
	r := &TrainerResult{Batches: e.trainer.batches, Dropped: e.trainer.dropped}
	r.TrainablePerGPUHour, r.MeanStaleness = Measure(r.Batches, tr.WarmupBatches, e.cfg.Replicas*e.cfg.Server.GPUs())
	return r
}

// admittedLive is the trajectories admitted and not dropped by the
// trainer: what the staleness bound counts.
func (e *engine) admittedLive() int64 { return int64(e.admitted - e.trainer.dropped) }

// TrainerResult is what a steady-state run measured.
type TrainerResult struct {
	Batches []Batch
	Dropped int
	// TrainablePerGPUHour is the trainable trajectories the trainer took
	// after the warm-up over the GPU-hours between the end of the warm-up
	// (the taking of the last warm-up batch) and the last batch, each
	// replica its server's GPUs (batching.Config.GPUs); MeanStaleness is
	// the mean staleness of those trajectories.
	TrainablePerGPUHour, MeanStaleness float64
}

// Measure computes the steady-state figures of batches taken on gpus
// GPUs after warmup batches of warm-up.
func Measure(batches []Batch, warmup, gpus int) (perGPUHour, staleness float64) {
	if warmup < 0 || len(batches) <= warmup {
		return 0, 0
	}
	var n, sum float64
	for _, b := range batches[warmup:] {
		for _, s := range b.Staleness {
			n++
			sum += float64(s)
		}
	}
	start := 0.0 // without a warm-up, from the start
	if warmup > 0 {
		start = batches[warmup-1].AtS
	}
	span := batches[len(batches)-1].AtS - start
	if span <= 0 || n == 0 {
		return 0, 0
	}
	return n / (span * float64(gpus) / 3600), sum / n
}
