package devstack_test

import (
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/devstack"
	"github.com/actloop/actloop/internal/localredis"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/pkg/schema"
	"github.com/nats-io/nats.go/jetstream"
)

// On a Redis Cluster of three masters with a replica each
// (ACTLOOP_REDIS_CLUSTER), a batch runs through — each trajectory's keys
// share a hash slot, the coordinator's indexes another — and a master
// killed mid-run is failed over to its replica: every sample still ends in
// exactly one result, each consistent with the chat template.
func TestRedisClusterFailover(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not installed (Debian package redis-server; CI installs it): a Redis Cluster needs it")
	}
	cl, err := localredis.StartCluster(t.Context(), t.TempDir(), 3, 1, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close) // after the stack's cleanup
	e := newEnvWith(t, 1, func(o *devstack.Options) { o.RedisCluster = cl.URL() })
	startOneOfEach(t, e, e.stack.CoordinatorConfig(), nil)
	const n = 24
	var samples []schema.Sample
	for i := range n {
		id := fmt.Sprintf("cl-%02d", i)
		samples = append(samples, simSample(id, clusterScript(id)...))
	}
	start := time.Now()
	stop := logProgress(t, e, start)
	e.submit(samples...)
	testkit.Eventually(t, wait, "a third of the batch to finish", func() bool { return finished(e) >= n/3 })
	t.Logf("%v: killing master %s", time.Since(start).Round(time.Millisecond), cl.Masters[0].Addr)
	cl.Masters[0].Kill()
	got := e.results(n)
	stop()
	for _, s := range samples {
		r, ok := got[s.ID]
		if !ok || r.Status != schema.StatusSubmitted {
			t.Fatalf("%s: %+v", s.ID, r.ResultHead)
		}
		checkConsistent(t, r)
	}
	stream, err := e.js.Stream(e.ctx, schema.StreamResults)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(e.ctx, jetstream.WithSubjectFilter(schema.SubjectResults))
	if err != nil || len(info.State.Subjects) != n {
		t.Fatalf("result subjects %v (%v): want one result for each of %d samples", info.State.Subjects, err, n)
	}
	for subj, k := range info.State.Subjects {
		if k != 1 {
			t.Fatalf("%s holds %d results", subj, k)
		}
	}
}
