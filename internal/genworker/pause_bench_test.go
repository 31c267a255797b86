package genworker_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/devstack"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/sim"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/pkg/control"
	"github.com/actloop/actloop/pkg/schema"
)

// BenchmarkPause times a weight-sync pause in abort mode, the trainer's
// call (pkg/control, over NATS) until every gen-worker has reported paused,
// with that many generations in flight on four replicas; each iteration
// resumes first (untimed) and waits until they run again. Besides ns/op it
// reports own-ms/op, what actloop's own code spent: the pause less the
// servers' share on its path (server_ms of the worker whose report came
// last), and server-ms/op. in-flight=0 is the control path alone: the
// control state through NATS KV to the workers and their reports back.
//
//	go test ./internal/genworker -run '^$' -bench Pause -benchtime 20x
func BenchmarkPause(b *testing.B) {
	for _, n := range []int{0, 1000} {
		b.Run(fmt.Sprintf("in-flight=%d", n), func(b *testing.B) { benchPause(b, n) })
	}
}

func benchPause(b *testing.B, inFlight int) {
	const replicas, wait = 4, 5 * time.Minute
	common := service.CommonDefaults()
	common.PullWait, common.AckWait, common.ShutdownTimeout = 100*time.Millisecond, time.Minute, 5*time.Second
	ctx, cancel := context.WithCancel(context.Background())
	// Generations outlast the benchmark: 4,096 tokens at 50 a second.
	st, err := devstack.StartInfra(ctx, devstack.Options{Dir: testkit.SearchableTempDir(b), RedisKind: testkit.PreferredRedis(b),
		Replicas: replicas, Slots: inFlight/replicas + 64, EnvSlots: max(2*inFlight, 4), Common: common,
		Sim: sim.Config{TimeScale: 1}, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cancel()
		if err := st.Wait(); err != nil {
			b.Errorf("services: %v", err)
		}
		st.Close()
	})
	cc := st.CoordinatorConfig()
	// Admission by count: every sample is admitted, however long its
	// generations (the KV pools would bound it below the number asked for).
	cc.PredictTimeout, cc.MaxActive, cc.KVBudget = 0, max(2*inFlight, 1), 0
	if _, err := st.StartCoordinator(ctx, cc); err != nil {
		b.Fatal(err)
	}
	for _, r := range st.Replicas {
		if _, err := st.StartGenWorker(ctx, r, nil); err != nil {
			b.Fatal(err)
		}
	}
	ec := st.EnvWorkerConfig("env-0")
	ec.SimEnvTimeScale = 0
	if _, err := st.StartEnvWorker(ctx, ec); err != nil {
		b.Fatal(err)
	}
	d, err := st.Deps(ctx, "bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(d.Close)
	trainer, err := st.Deps(ctx, "trainer")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(trainer.Close)
	for i := range 2 * inFlight { // more than run at once: some are between generations
		s := schema.Sample{V: schema.Version, ID: fmt.Sprintf("p%05d", i), Family: "bench", Task: fmt.Sprintf("task %d", i),
			Env: schema.Env{Backend: schema.BackendSim, Eval: "exit 0"}, Sampling: schema.Sampling{MaxNewTokens: 4096}}
		s.Normalize()
		if err := d.Pub.Publish(ctx, schema.SubjectSamples, s.ID, s); err != nil {
			b.Fatal(err)
		}
	}
	running := func() int {
		n := 0
		for _, r := range st.Replicas {
			if w := st.GenWorker(r); w != nil {
				n += int(w.Stats().Running)
			}
		}
		return n
	}
	c := control.Client{NC: trainer.NC, Name: "benchmark"}
	testkit.Eventually(b, wait, "every gen-worker to answer the control state", func() bool {
		s, err := c.Get(ctx)
		return err == nil && len(s.Workers) == replicas
	})
	var own, server float64 // ms
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		v := int64(i + 1)
		if _, err := c.Resume(ctx, &v); err != nil {
			b.Fatal(err)
		}
		testkit.Eventually(b, wait, fmt.Sprintf("%d generations in flight", inFlight), func() bool { return running() >= inFlight })
		b.StartTimer()
		t0 := time.Now()
		reply, err := c.Pause(ctx, schema.PauseRequest{Mode: schema.PauseAbort})
		took := float64(time.Since(t0).Microseconds()) / 1000
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		s, err := c.Get(ctx)
		if err != nil {
			b.Fatal(err)
		}
		var last schema.PauseReport
		for _, r := range s.Workers {
			if r.Paused && r.Epoch == reply.Epoch && !r.At.Before(last.At) {
				last = r
			}
		}
		own += max(took-last.ServerMS, 0)
		server += last.ServerMS
		b.StartTimer()
	}
	b.ReportMetric(own/float64(b.N), "own-ms/op")
	b.ReportMetric(server/float64(b.N), "server-ms/op")
}
