package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/actloop/actloop/internal/devstack"
	"github.com/actloop/actloop/internal/genworker"
	"github.com/actloop/actloop/internal/sim"
	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/internal/workload"
	"github.com/actloop/actloop/pkg/schema"
)

// PipelineReport is what `actloop bench-pipeline` reports: the pipeline's
// own cost, with backends that answer at once.
type PipelineReport struct {
	Redis            string  `json:"redis"`
	GenWorkers       int     `json:"gen_workers"`
	EnvWorkers       int     `json:"env_workers"`
	Trajectories     int     `json:"trajectories"`
	Actions          int     `json:"actions"` // one gen step and one env step
	WallS            float64 `json:"wall_s"`
	ActionsPerS      float64 `json:"actions_per_s"`
	CPUSPer1000      float64 `json:"cpu_s_per_1000_actions"` // this process (NATS, services, simulators) plus redis-server
	DispatchP50MS    float64 `json:"dispatch_p50_ms"`
	DispatchP99MS    float64 `json:"dispatch_p99_ms"`
	RedisBytesPer1kT float64 `json:"redis_bytes_per_1000_tokens"`
	HeapMBPer1000    float64 `json:"heap_mb_per_1000_active"` // Go heap of the whole process at the end, per 1,000 trajectories held
	// Services: with Processes, each service process's peak resident
	// memory and CPU time.
	Services []ServiceUse `json:"services,omitempty"`
}

// ServiceUse is one service process's resources over a run.
type ServiceUse struct {
	Name                 string  `json:"name"`
	PeakRSSMB            float64 `json:"peak_rss_mb"`
	IdleRSSMB            float64 `json:"idle_rss_mb"`            // resident once ready, before any work
	RSSMBPer1000         float64 `json:"rss_mb_per_1000_active"` // (peak − idle) per 1,000 trajectories held
	CPUSPer1000          float64 `json:"cpu_s_per_1000_actions"`
	cpu                  time.Duration
	baseRSSKB, peakRSSKB int64
}

// Pipeline is what `actloop bench-pipeline` runs: a batch through the
// whole pipeline with backends that answer at once.
type Pipeline struct {
	Trajectories int
	Turns        int // turns per trajectory
	Tokens       int // tokens per reply
	GenWorkers   int // gen-workers, one replica each
	EnvWorkers   int
	Slots        int    // slots per gen-worker
	Redis        string // redis-server or in-process ("": redis-server when on PATH)
	// Processes runs each service as its own process ('actloop serve',
	// from this executable) and reports each one's memory and CPU.
	Processes bool
	JSON      bool // one JSON object instead of a summary
	Outputs   Outputs
}

// Validate joins every problem with p, each naming its flag.
func (p Pipeline) Validate() error {
	var errs []error
	for _, c := range []struct {
		flag string
		n    int
	}{{"--trajectories", p.Trajectories}, {"--turns", p.Turns}, {"--tokens", p.Tokens}, {"--gen-workers", p.GenWorkers},
		{"--env-workers", p.EnvWorkers}, {"--slots", p.Slots}} {
		if c.n < 1 {
			errs = append(errs, fmt.Errorf("%s: must be positive, got %d", c.flag, c.n))
		}
	}
	return errors.Join(errs...)
}

// RunPipeline runs p and writes its report to stdout.
func RunPipeline(ctx context.Context, p Pipeline, stdout io.Writer) error {
	if err := p.Validate(); err != nil {
		return err
	}
	log, closeLog, err := p.Outputs.logger()
	if err != nil {
		return err
	}
	defer closeLog()
	common := benchCommon()
	common.ResultTTL = time.Hour // keep the state to measure it
	st, sctx, stop, err := startBench(ctx, devstack.Options{RedisKind: p.Redis, Replicas: p.GenWorkers, Slots: p.Slots,
		EnvSlots: 4 * p.Slots * p.GenWorkers, Sim: sim.Config{MaxRunning: p.Slots}, Tokenizer: tokenize.TokenizerBytes, Common: common, Log: log})
	if err != nil {
		return err
	}
	defer stop()
	var children *serviceProcs
	if p.Processes {
		children = &serviceProcs{log: p.Outputs.Log}
		defer children.stop()
	}
	// launch runs a service in this process, or with --processes in a
	// child process serving on a free address (written to *addr, which
	// is in settings, before they are passed on).
	launch := func(svc, name string, addr *string, settings any, inProcess func() error) error {
		if children == nil {
			return inProcess()
		}
		a, err := freeAddr()
		if err != nil {
			return err
		}
		*addr = a
		return children.start(svc, name, a, settings)
	}
	cc := st.CoordinatorConfig()
	cc.PredictTimeout, cc.MaxActive, cc.MaxActiveCeiling = 0, p.Trajectories, p.Trajectories
	if err := launch("coordinator", "coordinator", &cc.Addr, &cc, func() error {
		_, err := st.StartCoordinator(sctx, cc)
		return err
	}); err != nil {
		return err
	}
	statsURLs := map[string]string{}
	for _, r := range st.Replicas {
		gc := st.GenWorkerConfig(r)
		gc.PredictTimeout = 0
		if err := launch("gen-worker", "gen-worker "+r, &gc.Addr, &gc, func() error {
			_, err := st.StartGenWorkerWith(sctx, gc, nil)
			return err
		}); err != nil {
			return err
		}
		statsURLs[r] = "http://" + gc.Addr + "/v1/stats"
	}
	for i := range p.EnvWorkers {
		ec := st.EnvWorkerConfig(fmt.Sprintf("env-%d", i))
		ec.SimStartLatency, ec.SimExecLatency, ec.SimEnvTimeScale = 0, 0, 0
		if err := launch("env-worker", "env-worker "+ec.ID, &ec.Addr, &ec, func() error {
			_, err := st.StartEnvWorker(sctx, ec)
			return err
		}); err != nil {
			return err
		}
	}
	d, err := st.Deps(ctx, "bench")
	if err != nil {
		return err
	}
	defer d.Close()
	rdb := st.RedisClient()
	stopProfile, err := p.Outputs.profile()
	if err != nil {
		return err
	}
	defer stopProfile()
	if children != nil {
		if err := children.ready(ctx); err != nil {
			return err
		}
	}
	cpu0, rcpu0 := processCPU(), redisCPU(ctx, rdb)
	start := time.Now()
	for i := range p.Trajectories {
		t := workload.Trajectory{ID: fmt.Sprintf("p%05d", i), GroupID: fmt.Sprintf("p%05d", i), GroupSize: 1}
		for k := range p.Turns {
			t.Tokens = append(t.Tokens, p.Tokens)
			if k < p.Turns-1 {
				t.Exec = append(t.Exec, 0)
			}
		}
		s := t.Sample()
		s.Env.Setup, s.Env.Eval = nil, "exit 0"
		if err := d.Pub.Publish(ctx, schema.SubjectSamples, s.ID, s); err != nil {
			return err
		}
	}
	results, err := CollectHeads(ctx, d.JS, p.Trajectories, func(int) {})
	if err != nil {
		return err
	}
	wall := time.Since(start)
	cpu := processCPU() - cpu0 + redisCPU(ctx, rdb) - rcpu0
	var stats map[string]genworker.Stats
	if children != nil {
		// The gen-workers' dispatch latencies, before they stop.
		if stats, err = fetchStats(ctx, statsURLs); err != nil {
			return err
		}
		children.stop()
	} else {
		stats = map[string]genworker.Stats{}
		for _, r := range st.Replicas {
			stats[r] = st.GenWorker(r).Stats()
		}
	}
	b := PipelineReport{Redis: st.Redis.Kind, GenWorkers: p.GenWorkers, EnvWorkers: p.EnvWorkers, Trajectories: p.Trajectories,
		WallS: wall.Seconds()}
	for _, r := range results {
		b.Actions += r.Turns
	}
	b.ActionsPerS = float64(b.Actions) / wall.Seconds()
	b.CPUSPer1000 = cpu.Seconds() / float64(b.Actions) * 1000
	for _, s := range stats {
		b.DispatchP50MS, b.DispatchP99MS = max(b.DispatchP50MS, s.DispatchP50MS), max(b.DispatchP99MS, s.DispatchP99MS)
	}
	// Redis: the stored state of every trajectory (kept for ResultTTL).
	var bytes, toks int64
	for id := range results {
		base := "actloop:traj:{" + id + "}"
		for _, k := range []string{base, base + ":msgs", base + ":tok", base + ":lp", base + ":mask", base + ":ver"} {
			n, err := rdb.MemoryUsage(ctx, k).Result()
			if err == nil {
				bytes += n
			}
		}
		n, _ := rdb.StrLen(ctx, base+":tok").Result()
		toks += n / 4
	}
	if toks > 0 {
		b.RedisBytesPer1kT = float64(bytes) / float64(toks) * 1000
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.HeapMBPer1000 = float64(ms.HeapInuse) / (1 << 20) / float64(p.Trajectories) * 1000
	if children != nil {
		for _, c := range children.procs {
			u := c.use
			u.PeakRSSMB, u.IdleRSSMB = float64(u.peakRSSKB)/1024, float64(u.baseRSSKB)/1024
			u.RSSMBPer1000 = (u.PeakRSSMB - u.IdleRSSMB) / float64(p.Trajectories) * 1000
			u.CPUSPer1000 = u.cpu.Seconds() / float64(b.Actions) * 1000
			b.CPUSPer1000 += u.CPUSPer1000
			b.Services = append(b.Services, u)
		}
	}
	if p.JSON {
		j, _ := json.Marshal(b)
		_, err := fmt.Fprintln(stdout, string(j))
		return err
	}
	fmt.Fprintf(stdout, "%d actions (%d trajectories × %d turns) in %.1f s: %.0f actions/s; %.2f CPU s per 1,000 actions (Redis: %s)\n",
		b.Actions, b.Trajectories, p.Turns, b.WallS, b.ActionsPerS, b.CPUSPer1000, b.Redis)
	fmt.Fprintf(stdout, "dispatch latency p50 %.2f ms, p99 %.2f ms; Redis %.0f bytes per 1,000 tokens; Go heap %.1f MB per 1,000 trajectories held\n",
		b.DispatchP50MS, b.DispatchP99MS, b.RedisBytesPer1kT, b.HeapMBPer1000)
	for _, u := range b.Services {
		fmt.Fprintf(stdout, "  %-16s resident %5.1f MB idle, %5.1f MB peak (+%.1f MB per 1,000 trajectories held); %.2f CPU s per 1,000 actions\n",
			u.Name, u.IdleRSSMB, u.PeakRSSMB, u.RSSMBPer1000, u.CPUSPer1000)
	}
	return nil
}

// processCPU is this process's user and system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisCPU is redis-server's CPU time from INFO cpu; 0 for the in-process
// server (its CPU is this process's).
func redisCPU(ctx context.Context, rdb redis.UniversalClient) time.Duration {
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			x, _ := strconv.ParseFloat(v, 64)
			total += x
		}
	}
	return time.Duration(total * float64(time.Second))
}
