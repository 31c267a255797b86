package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"github.com/actloop/actloop/internal/devstack"
	"github.com/actloop/actloop/internal/sim"
	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/pkg/control"
	"github.com/actloop/actloop/pkg/schema"
)

// SyncRun is one run of the weight-sync bench.
type SyncRun struct {
	Syncs        int     `json:"syncs"`
	MakespanS    float64 `json:"makespan_s"` // simulated seconds
	TokensPerS   float64 `json:"generated_tokens_per_s"`
	Reprefilled  int64   `json:"reprefilled_tokens"`
	Completed    int     `json:"completed"`
	Trajectories int     `json:"trajectories"`
	WallS        float64 `json:"wall_s"`
}

// SyncReport is what `actloop bench-sync` reports.
type SyncReport struct {
	InFlightAtPause []int     `json:"in_flight_at_pause"`
	PauseMS         []float64 `json:"pause_ms"` // trainer side: call to answer
	PauseP50MS      float64   `json:"pause_p50_ms"`
	PauseP99MS      float64   `json:"pause_p99_ms"`
	// PauseOwnMS is each pause less the servers' share on its path, what
	// actloop's own code spent: the server_ms (its abort call until the
	// last aborted answer came in) of the worker whose report came last,
	// the one the pause waited for. (The other workers' waits for their
	// servers overlap it; PauseReply's server_ms is the largest of all.)
	PauseOwnMS    []float64 `json:"pause_own_ms"`
	PauseOwnP50MS float64   `json:"pause_own_p50_ms"`
	PauseOwnP99MS float64   `json:"pause_own_p99_ms"`
	Aborted       int       `json:"aborted"`
	KeptTokens    int64     `json:"kept_tokens"`
	// RegeneratedTokens is output thrown away and generated again: none,
	// since a resumed generation continues from its partial output; what a
	// sync costs is re-prefilling the contexts its cache flush evicted.
	RegeneratedTokens int64   `json:"regenerated_tokens"`
	WithSyncs         SyncRun `json:"with_syncs"`
	WithoutSyncs      SyncRun `json:"without_syncs"`
	// LostPerSyncS is the makespan added per sync, in simulated seconds.
	LostPerSyncS float64 `json:"lost_per_sync_s"`
}

// Sync is what `actloop bench-sync` runs: pause and resume many times with
// generations in flight, then the same workload without syncs.
type Sync struct {
	Tasks     int    // trajectories (more than slots, so queued steps keep the slots busy)
	Replicas  int    // inference replicas
	Slots     int    // generation slots per replica
	InFlight  int    // pause once this many generations are in flight
	Pauses    int    // weight syncs
	Mode      string // pause mode: schema.PauseAbort or schema.PauseDrain
	MaxTurns  int    // the simulator's most turns for a trajectory
	TimeScale float64
	Seed      int64 // simulator seed
	JSON      bool  // one JSON object instead of a summary
	Outputs   Outputs
}

// Validate joins every problem with s, each naming its flag.
func (s Sync) Validate() error {
	var errs []error
	for _, c := range []struct {
		flag string
		ok   bool
	}{{"--tasks", s.Tasks >= 1}, {"--replicas", s.Replicas >= 1}, {"--slots", s.Slots >= 1}, {"--in-flight", s.InFlight >= 1},
		{"--max-turns", s.MaxTurns >= 1}, {"--time-scale", s.TimeScale > 0}} {
		if !c.ok {
			errs = append(errs, fmt.Errorf("%s: must be positive", c.flag))
		}
	}
	if s.Pauses < 0 {
		errs = append(errs, errors.New("--pauses: must be >= 0"))
	}
	if s.InFlight > min(s.Tasks, s.Replicas*s.Slots) {
		errs = append(errs, fmt.Errorf("--in-flight: %d exceeds min(tasks, replicas x slots)", s.InFlight))
	}
	if s.Mode != schema.PauseAbort && s.Mode != schema.PauseDrain {
		errs = append(errs, fmt.Errorf("--mode: %q: want abort or drain", s.Mode))
	}
	return errors.Join(errs...)
}

// RunSync runs s and writes its report to stdout and its progress to
// stderr.
func RunSync(ctx context.Context, s Sync, stdout, stderr io.Writer) error {
	if err := s.Validate(); err != nil {
		return err
	}
	log, closeLog, err := s.Outputs.logger()
	if err != nil {
		return err
	}
	defer closeLog()
	run := func(syncs int, out *SyncReport) (SyncRun, error) {
		return syncOnce(ctx, s, syncs, log, out)
	}
	var b SyncReport
	if !s.JSON {
		fmt.Fprintf(stderr, "bench-sync: %d trajectories, %d x %d slots, %d pauses at %d in flight ...\n",
			s.Tasks, s.Replicas, s.Slots, s.Pauses, s.InFlight)
	}
	stopProfile, err := s.Outputs.profile()
	if err != nil {
		return err
	}
	b.WithSyncs, err = run(s.Pauses, &b)
	stopProfile()
	if err != nil {
		return err
	}
	if b.WithoutSyncs, err = run(0, nil); err != nil {
		return err
	}
	if len(b.PauseMS) < s.Pauses {
		// Too little CPU for the pipeline to keep that many generations
		// running: a larger --time-scale slows the simulated servers down.
		fmt.Fprintf(stderr, "bench-sync: %d of %d pauses: fewer than %d generations were in flight the rest of the run\n",
			len(b.PauseMS), s.Pauses, s.InFlight)
	}
	if len(b.PauseMS) > 0 {
		b.PauseP50MS, b.PauseP99MS = p50p99(b.PauseMS)
		b.PauseOwnP50MS, b.PauseOwnP99MS = p50p99(b.PauseOwnMS)
		b.LostPerSyncS = (b.WithSyncs.MakespanS - b.WithoutSyncs.MakespanS) / float64(len(b.PauseMS))
	}
	if s.JSON {
		j, _ := json.Marshal(b)
		_, err := fmt.Fprintln(stdout, string(j))
		return err
	}
	fmt.Fprintf(stdout, "pause (trainer side) over %d syncs with %v generations in flight: p50 %.1f ms, p99 %.1f ms; "+
		"less the servers' share (abort call to the last aborted answer): p50 %.1f ms, p99 %.1f ms\n",
		len(b.PauseMS), b.InFlightAtPause, b.PauseP50MS, b.PauseP99MS, b.PauseOwnP50MS, b.PauseOwnP99MS)
	fmt.Fprintf(stdout, "aborted %d generations; kept %d tokens, regenerated %d\n", b.Aborted, b.KeptTokens, b.RegeneratedTokens)
	for _, r := range []struct {
		name string
		r    SyncRun
	}{{"with syncs", b.WithSyncs}, {"without", b.WithoutSyncs}} {
		fmt.Fprintf(stdout, "%-10s  %d/%d completed  makespan %.0f s  %.0f tok/s  re-prefilled %d tok  wall %.1f s\n",
			r.name, r.r.Completed, r.r.Trajectories, r.r.MakespanS, r.r.TokensPerS, r.r.Reprefilled, r.r.WallS)
	}
	fmt.Fprintf(stdout, "makespan lost per sync: %.1f simulated s\n", b.LostPerSyncS)
	return nil
}

// syncOnce runs the workload of cfg on a fresh stack; with syncs > 0 it
// pauses (flushing every simulator's cache, as new weights do) and resumes
// that many times, each once cfg.InFlight generations run, recording into out.
func syncOnce(ctx context.Context, cfg Sync, syncs int, log *slog.Logger, out *SyncReport) (SyncRun, error) {
	tasks, replicas, slots, inFlight, mode, timeScale := cfg.Tasks, cfg.Replicas, cfg.Slots, cfg.InFlight, cfg.Mode, cfg.TimeScale
	st, sctx, stop, err := startBench(ctx, devstack.Options{Replicas: replicas, Slots: slots, EnvSlots: 4 * tasks,
		Sim: sim.Config{TimeScale: timeScale, MaxTurns: cfg.MaxTurns, Seed: cfg.Seed}, Tokenizer: tokenize.TokenizerBytes,
		Common: benchCommon(), Log: log})
	if err != nil {
		return SyncRun{}, err
	}
	defer stop()
	cc := st.CoordinatorConfig()
	cc.PredictTimeout = 0
	cc.MaxActive = tasks
	if _, err := st.StartCoordinator(sctx, cc); err != nil {
		return SyncRun{}, err
	}
	for _, r := range st.Replicas {
		if _, err := st.StartGenWorker(sctx, r, nil); err != nil {
			return SyncRun{}, err
		}
	}
	ec := st.EnvWorkerConfig("env-0")
	if _, err := st.StartEnvWorker(sctx, ec); err != nil {
		return SyncRun{}, err
	}
	d, err := st.Deps(ctx, "bench")
	if err != nil {
		return SyncRun{}, err
	}
	defer d.Close()
	// The trainer's own connection: d's carries the results.
	td, err := st.Deps(ctx, "trainer")
	if err != nil {
		return SyncRun{}, err
	}
	defer td.Close()
	running := func() int {
		n := 0
		for _, r := range st.Replicas {
			if w := st.GenWorker(r); w != nil {
				n += int(w.Stats().Running)
			}
		}
		return n
	}
	start := time.Now()
	for i := range tasks {
		s := schema.Sample{V: schema.Version, ID: fmt.Sprintf("s%05d", i), GroupID: fmt.Sprintf("g%04d", i/4),
			GroupIndex: i % 4, GroupSize: 4, Family: "bench", Task: fmt.Sprintf("benchmark task %d", i/4),
			Env:      schema.Env{Backend: schema.BackendSim, Eval: "exit 0"},
			Sampling: schema.Sampling{MaxNewTokens: 4096}}
		s.Normalize()
		if err := d.Pub.Publish(ctx, schema.SubjectSamples, s.ID, s); err != nil {
			return SyncRun{}, err
		}
	}
	syncErr := make(chan error, 1)
	go func() {
		c := control.Client{NC: td.NC}
		for v := int64(1); v <= int64(syncs); v++ {
			for running() < inFlight {
				if sctx.Err() != nil {
					syncErr <- nil
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
			n := running()
			t0 := time.Now()
			reply, err := c.Pause(sctx, schema.PauseRequest{Mode: mode})
			took := time.Since(t0)
			if err != nil {
				syncErr <- err
				return
			}
			server, err := serverShare(sctx, &c, reply)
			if err != nil {
				syncErr <- err
				return
			}
			for _, url := range st.SimURLs {
				if err := FlushCache(sctx, url); err != nil {
					syncErr <- err
					return
				}
			}
			if _, err := c.Resume(sctx, &v); err != nil {
				syncErr <- err
				return
			}
			out.InFlightAtPause = append(out.InFlightAtPause, n)
			out.PauseMS = append(out.PauseMS, float64(took.Microseconds())/1000)
			out.PauseOwnMS = append(out.PauseOwnMS, max(float64(took.Microseconds())/1000-server, 0))
			out.Aborted += reply.Aborted
			out.KeptTokens += reply.KeptTokens
		}
		syncErr <- nil
	}()
	results, err := CollectHeads(ctx, d.JS, tasks, func(int) {})
	stop()
	if serr := <-syncErr; serr != nil && ctx.Err() == nil {
		return SyncRun{}, fmt.Errorf("weight sync: %w", serr)
	}
	if err != nil {
		return SyncRun{}, err
	}
	r := SyncRun{Trajectories: tasks, WallS: time.Since(start).Seconds()}
	if out != nil {
		r.Syncs = len(out.PauseMS)
	}
	var last time.Time
	tokens := 0
	for _, res := range results {
		if schema.Trainable(res.Status) {
			r.Completed++
		}
		tokens += res.GenTokens
		if res.FinishedAt.After(last) {
			last = res.FinishedAt
		}
	}
	r.MakespanS = last.Sub(start).Seconds() / timeScale
	r.TokensPerS = float64(tokens) / r.MakespanS
	for _, rep := range st.Replicas {
		if w := st.GenWorker(rep); w != nil {
			s := w.Stats()
			r.Reprefilled += s.ReprefilledTokens
			if out != nil {
				out.RegeneratedTokens += s.WastedTokens
			}
		}
	}
	return r, nil
}

// serverShare is the servers' share of the pause reply answered: the
// server_ms of the worker whose report came last, the one the pause
// waited for.
func serverShare(ctx context.Context, c *control.Client, reply schema.PauseReply) (float64, error) {
	st, err := c.Get(ctx)
	if err != nil {
		return 0, err
	}
	var last schema.PauseReport
	for _, r := range st.Workers {
		if r.Paused && r.Epoch == reply.Epoch && !r.At.Before(last.At) {
			last = r
		}
	}
	return last.ServerMS, nil
}

// p50p99 returns the median and 99th percentile of xs (not empty).
func p50p99(xs []float64) (p50, p99 float64) {
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2], s[min(len(s)-1, len(s)*99/100)]
}
