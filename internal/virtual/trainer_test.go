package virtual

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/actloop/actloop/internal/workload"
)

// Throughput is counted after the warm-up only: the trajectories of the
// batches after it over the GPU-hours from the last warm-up batch to the
// last batch; staleness is their mean.
func TestMeasureCountsAfterTheWarmUp(t *testing.T) {
	batches := []Batch{
		{AtS: 100, Version: 0, Staleness: []int64{0, 0}},     // warm-up
		{AtS: 1900, Version: 1, Staleness: []int64{0, 1}},    // warm-up: ends at 1,900 s
		{AtS: 3700, Version: 2, Staleness: []int64{1, 1}},    // measured
		{AtS: 5500, Version: 3, Staleness: []int64{0, 0, 1}}, // measured
	}
	for _, c := range []struct {
		name             string
		warmup, replicas int
		perGPUHour, stal float64
	}{
		{"two warm-up batches", 2, 2, 5 / (3600.0 * 2 / 3600), 3.0 / 5},
		{"no warm-up", 0, 1, 9 / (5500.0 / 3600), 4.0 / 9},
		{"all warm-up", 4, 1, 0, 0},
	} {
		g, s := Measure(batches, c.warmup, c.replicas)
		if math.Abs(g-c.perGPUHour) > 1e-9 || math.Abs(s-c.stal) > 1e-9 {
			t.Errorf("%s: %.4f trainable per GPU-hour, staleness %.3f; want %.4f, %.3f", c.name, g, s, c.perGPUHour, c.stal)
		}
	}
	if Staleness(5, math.MaxInt64) != 0 || Staleness(5, 3) != 2 || Staleness(2, 3) != 0 {
		t.Errorf("staleness")
	}
}

// steadyConfig is an action-level run with a trainer taking batches of 16
// from a small scenario.
func steadyConfig(maxStaleness int64) Config {
	cfg := modes(2, 4, 200)["action-fcfs"]
	cfg.Trainer = &Trainer{BatchSize: 16, Batches: 5, WarmupBatches: 1, MaxStaleness: maxStaleness}
	cfg.SyncPauseS = 0.3
	return cfg
}

// A steady-state run stops when the trainer has its batches, with a weight
// sync after each batch but the last; every trajectory taken is within the
// staleness bound when taken; generations a sync interrupts continue under
// the next version (their tokens span versions) instead of starting over;
// admission never lets more than (bound + 1) batches be under way.
func TestTrainerTakesBatchesUnderTheBound(t *testing.T) {
	sc, _ := workload.Lookup("swe-longtail")
	plans := sc.Generate(4, 200)
	for _, mode := range []string{"action-fcfs", "trajectory", "async"} {
		cfg := modes(2, 4, 200)[mode]
		st := steadyConfig(1)
		cfg.Trainer, cfg.SyncPauseS = st.Trainer, st.SyncPauseS
		r, err := Run(cfg, plans)
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		tr := r.Trainer
		if tr == nil || len(tr.Batches) != 5 || r.Syncs != 4 {
			t.Fatalf("%s: trainer %+v, %d syncs; want 5 batches and 4 syncs", mode, tr, r.Syncs)
		}
		if r.Completed >= len(plans) || r.Completed < 5*16 {
			t.Errorf("%s: %d of %d finished: the run should stop with the supply not all used", mode, r.Completed, len(plans))
		}
		for k, b := range tr.Batches {
			if b.Version != int64(k) || len(b.Staleness) != 16 {
				t.Errorf("%s: batch %d at version %d with %d trajectories", mode, k, b.Version, len(b.Staleness))
			}
			for _, s := range b.Staleness {
				if s > 1 {
					t.Errorf("%s: batch %d took a trajectory %d versions behind", mode, k, s)
				}
			}
		}
		if r.PeakActive > 2*16 {
			t.Errorf("%s: %d trajectories under way at once, more than (bound + 1) × batch = 32", mode, r.PeakActive)
		}
		if tr.TrainablePerGPUHour <= 0 || r.MakespanS != tr.Batches[4].AtS {
			t.Errorf("%s: %.1f trainable per GPU-hour, stopped at %.1f s, last batch at %.1f s", mode, tr.TrainablePerGPUHour, r.MakespanS, tr.Batches[4].AtS)
		}
		if mode != "trajectory" && (r.ResumedTokens == 0 || r.VersionSpreadX < 1) {
			t.Errorf("%s: %d tokens kept across syncs, version spread %d: no partial carried over", mode, r.ResumedTokens, r.VersionSpreadX)
		}
	}
}

// When the trainer takes a batch, a finished trajectory whose oldest token
// is more than the bound behind the current version is dropped and the
// batch is filled with the fresh ones in finishing order; with fewer fresh
// ones than a batch, it waits.
func TestTrainerDropsStaleTrajectories(t *testing.T) {
	sc, _ := workload.Lookup("swe-longtail")
	cfg := steadyConfig(1)
	cfg.Trainer.BatchSize = 3
	e, err := newEngine(cfg, sc.Generate(4, 40))
	if err != nil {
		t.Fatal(err)
	}
	e.version = 3
	oldest := map[int]int64{10: 2, 11: 1, 12: 3, 13: 0, 14: 2} // 11 and 13 are 2 and 3 versions behind
	for _, i := range []int{10, 11, 12, 13} {
		e.ts[i].versions[0] = oldest[i]
		e.trainer.ready = append(e.trainer.ready, i)
	}
	e.train()
	if len(e.trainer.batches) != 0 || e.trainer.dropped != 2 || !e.ts[11].dropped || !e.ts[13].dropped || len(e.trainer.ready) != 2 {
		t.Fatalf("2 fresh of 4: batches %d, dropped %d, ready %v; want no batch, 11 and 13 dropped", len(e.trainer.batches), e.trainer.dropped, e.trainer.ready)
	}
	e.ts[14].versions[0] = oldest[14]
	e.trainer.ready = append(e.trainer.ready, 14)
	e.train()
	if len(e.trainer.batches) != 1 || len(e.trainer.ready) != 0 || !e.paused || e.res.Syncs != 1 {
		t.Fatalf("3 fresh: batches %d, ready %v, paused %v, syncs %d; want a batch and a sync", len(e.trainer.batches), e.trainer.ready, e.paused, e.res.Syncs)
	}
	if b := e.trainer.batches[0]; b.Version != 3 || !reflect.DeepEqual(b.Staleness, []int64{1, 0, 1}) {
		t.Fatalf("batch %+v, want version 3 and staleness [1 0 1] (10, 12, 14 in finishing order)", b)
	}
	if got := e.admittedLive(); got != int64(e.admitted-2) {
		t.Fatalf("the bound counts %d admitted, want %d: the dropped ones are given back", got, e.admitted-2)
	}
}

// A supply too small for the trainer's batches, and a trainer with
// settings out of range, are errors that say so.
func TestTrainerErrors(t *testing.T) {
	sc, _ := workload.Lookup("swe-longtail")
	if _, err := Run(steadyConfig(1), sc.Generate(4, 40)); err == nil || !strings.Contains(err.Error(), "ran out") {
		t.Errorf("40 trajectories for 5 batches of 16: %v", err)
	}
	cfg := steadyConfig(1)
	cfg.Trainer = &Trainer{BatchSize: 0, Batches: 2, WarmupBatches: 2, MaxStaleness: -1}
	cfg.SyncEvery = 10
	err := cfg.Validate()
	for _, want := range []string{"batch_size", "warmup_batches", "max_staleness", "sync_every"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("validate: %v, want it to name %s", err, want)
		}
	}
}

// A replica's GPU-hours count its server's GPUs: the same run on servers of
// tensor parallel 2 takes the same batches at the same times and counts
// half the trainable trajectories per GPU-hour.
func TestTrainablePerGPUHourCountsTensorParallelGPUs(t *testing.T) {
	sc, _ := workload.Lookup("swe-longtail")
	plans := sc.Generate(4, 200)
	one, err := Run(steadyConfig(1), plans)
	if err != nil {
		t.Fatal(err)
	}
	cfg := steadyConfig(1)
	cfg.Server.TP = 2
	two, err := Run(cfg, plans)
	if err != nil {
		t.Fatal(err)
	}
	if one.MakespanS != two.MakespanS {
		t.Fatalf("makespan %.1f s at TP 1, %.1f s with TP 2 set: the degree should only count GPUs", one.MakespanS, two.MakespanS)
	}
	if g1, g2 := one.Trainer.TrainablePerGPUHour, two.Trainer.TrainablePerGPUHour; g1 <= 0 || math.Abs(g2-g1/2) > 1e-9*g1 {
		t.Errorf("trainable per GPU-hour %.3f with one GPU a replica, %.3f with two; want half", g1, g2)
	}
}

// tailPlans are three trajectories on one replica: a short one whose end
// makes the trainer take its first batch (and sync), and two whose replies
// the sync aborts: one in its first turn, one in its second, after a whole
// first reply.
func tailPlans() []workload.Trajectory {
	return []workload.Trajectory{
		{ID: "a", GroupID: "ga", GroupSize: 1, Prompt: 500, Tokens: []int{300}},
		{ID: "b", GroupID: "gb", GroupSize: 1, Prompt: 500, Tokens: []int{1500}},
		{ID: "c", GroupID: "gc", GroupSize: 1, Prompt: 500, Tokens: []int{20, 3000}, Exec: []float64{0.01}, Obs: []int{10}},
	}
}

// With DiscardPartials the weight sync at a batch's end discards the
// partial output of the generations it aborts (a loop without partial
// rollout): the turn is generated again from its start, so the servers
// decode the discarded tokens twice, and the trajectory's tokens and
// weight versions are its whole replies' only. A trajectory aborted in its
// first turn is then all of the new version (not stale when taken); one
// with a whole reply of the old version keeps that reply and its version.
// Without it (the default) the partials are kept and continued, spanning
// both versions.
func TestDiscardPartialsRegeneratesTheAbortedTurn(t *testing.T) {
	plans := tailPlans()
	var replyTokens int64
	for _, p := range plans {
		for _, n := range p.Tokens {
			replyTokens += int64(n + replyEndTokens)
		}
	}
	for _, discard := range []bool{false, true} {
		cfg := Defaults(1, 4)
		cfg.Trainer = &Trainer{BatchSize: 1, Batches: 2, MaxStaleness: 2, DiscardPartials: discard} // room for all three
		cfg.SyncPauseS = 0.3
		e, err := newEngine(cfg, plans)
		if err != nil {
			t.Fatal(err)
		}
		for e.res.Syncs == 0 {
			if err := e.step(); err != nil {
				t.Fatal(err)
			}
		}
		a, b, c := e.ts[0], e.ts[1], e.ts[2]
		if !a.finished || b.finished || c.finished || c.turn != 1 || e.version != 0 {
			t.Fatalf("discard %v: at the sync a finished %v, b %v, c %v in turn %d, version %d; want a finished, b and c generating (c its second turn)",
				discard, a.finished, b.finished, c.finished, c.turn, e.version)
		}
		whole := c.plan.Tokens[0] + replyEndTokens
		if discard {
			if b.partial != 0 || c.partial != 0 || b.genTokens != 0 || c.genTokens != whole || e.res.DiscardedTokens == 0 || e.res.ResumedTokens != 0 {
				t.Fatalf("discard: partials %d and %d, tokens %d and %d, %d discarded, %d resumed; want no partial, c's first reply (%d) only",
					b.partial, c.partial, b.genTokens, c.genTokens, e.res.DiscardedTokens, e.res.ResumedTokens, whole)
			}
			if b.turnVersions != noVersions || c.turnVersions != noVersions || c.versions != [2]int64{0, 0} {
				t.Fatalf("discard: turn versions %v and %v, c's versions %v; want none, none and [0 0]", b.turnVersions, c.turnVersions, c.versions)
			}
		} else if b.partial == 0 || c.partial == 0 || b.genTokens != b.partial || c.genTokens != whole+c.partial || e.res.DiscardedTokens != 0 ||
			e.res.ResumedTokens != int64(b.partial+c.partial) {
			t.Fatalf("keep: partials %d and %d, tokens %d and %d, %d discarded, %d resumed; want both partials kept",
				b.partial, c.partial, b.genTokens, c.genTokens, e.res.DiscardedTokens, e.res.ResumedTokens)
		}
		discarded := e.res.DiscardedTokens
		for !b.finished || !c.finished {
			if err := e.step(); err != nil {
				t.Fatal(err)
			}
		}
		var decoded int64
		for _, w := range e.ws {
			decoded += w.generated
		}
		if decoded != replyTokens+discarded || e.res.DiscardedTokens != discarded {
			t.Errorf("discard %v: the server decoded %d tokens, want the replies' %d and the %d discarded", discard, decoded, replyTokens, discarded)
		}
		for _, x := range e.ts {
			if x.genTokens != int(replies([]workload.Trajectory{*x.plan})) {
				t.Errorf("discard %v: %s has %d tokens, want its replies' %d", discard, x.plan.ID, x.genTokens, replies([]workload.Trajectory{*x.plan}))
			}
		}
		wantB := [2]int64{0, 1} // kept: its partial of version 0, continued under 1
		if discard {
			wantB = [2]int64{1, 1} // all generated again under version 1
		}
		if b.versions != wantB || c.versions != [2]int64{0, 1} {
			t.Errorf("discard %v: versions b %v, c %v; want %v and [0 1]", discard, b.versions, c.versions, wantB)
		}
		if bt := e.trainer.batches; len(bt) != 2 || !reflect.DeepEqual(bt[1].Staleness, []int64{Staleness(1, wantB[0])}) {
			t.Errorf("discard %v: batches %+v; want b taken second, %d versions behind", discard, bt, Staleness(1, wantB[0]))
		}
	}
}
