package localnats

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// clusterWait bounds every wait of these tests: a leader election takes
// seconds, and more on a loaded machine.
const clusterWait = time.Minute

// testServerLogger passes the servers' warnings and errors to t until the
// test's cleanup stops it (a server may log after its Shutdown returned).
type testServerLogger struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func newTestServerLogger(t testing.TB) *testServerLogger {
	l := &testServerLogger{t: t}
	t.Cleanup(func() {
		l.mu.Lock()
		l.done = true
		l.mu.Unlock()
	})
	return l
}

func (l *testServerLogger) log(level, format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.done {
		l.t.Logf("nats %s: %s", level, fmt.Sprintf(format, v...))
	}
}

func (l *testServerLogger) Noticef(string, ...any)         {}
func (l *testServerLogger) Debugf(string, ...any)          {}
func (l *testServerLogger) Tracef(string, ...any)          {}
func (l *testServerLogger) Warnf(format string, v ...any)  { l.log("warn", format, v...) }
func (l *testServerLogger) Errorf(format string, v ...any) { l.log("error", format, v...) }
func (l *testServerLogger) Fatalf(format string, v ...any) { l.log("fatal", format, v...) }
func (l *testServerLogger) String() string                 { return "test" }

var _ server.Logger = (*testServerLogger)(nil)

func startTestCluster(t *testing.T, n int) *Cluster {
	t.Helper()
	c, err := StartCluster(t.TempDir(), n, WithLogger(newTestServerLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	return c
}

// retry calls f until it succeeds or clusterWait passes: JetStream calls
// fail while a stream elects a leader.
func retry(t *testing.T, what string, f func(ctx context.Context) error) {
	t.Helper()
	deadline := time.NewTimer(clusterWait)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := f(ctx)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-deadline.C:
			t.Fatalf("%s: still failing after %v: %v", what, clusterWait, err)
		case <-tick.C:
		}
	}
}

// A 3-node cluster keeps an R3 stream through the loss of the node that
// leads it: the client fails over, publishes go on, nothing is lost, and the
// node, restarted on its ports and store, rejoins and catches up.
func TestClusterSurvivesNodeLoss(t *testing.T) {
	c := startTestCluster(t, 3)
	if c.N() != 3 || len(c.Running()) != 3 || c.Leader() < 0 {
		t.Fatalf("%d nodes, running %v, meta leader %d", c.N(), c.Running(), c.Leader())
	}
	for i := range 3 {
		if s := c.Server(i); s.Name() != fmt.Sprintf("n%d", i) || s.ClusterName() != ClusterName || !s.JetStreamIsClustered() {
			t.Fatalf("node %d: name %q cluster %q clustered %v", i, s.Name(), s.ClusterName(), s.JetStreamIsClustered())
		}
		if got := c.Server(i).ClientURL(); got != c.ClientURL(i) {
			t.Fatalf("node %d: client URL %s, cluster says %s", i, got, c.ClientURL(i))
		}
	}
	if urls := strings.Split(c.ClientURLs(), ","); len(urls) != 3 {
		t.Fatalf("ClientURLs %q", c.ClientURLs())
	}

	nc, err := nats.Connect(c.ClientURLs(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var stream jetstream.Stream
	retry(t, "create stream", func(ctx context.Context) (err error) {
		stream, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"},
			Replicas: 3, Storage: jetstream.FileStorage, Duplicates: time.Minute})
		return err
	})
	const n = 20
	publish := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			// A message id: a publish retried after a lost ack is stored once.
			retry(t, fmt.Sprintf("publish %d", i), func(ctx context.Context) error {
				_, err := js.Publish(ctx, "t.x", fmt.Appendf(nil, "m%03d", i), jetstream.WithMsgID(fmt.Sprint(i)))
				return err
			})
		}
	}
	publish(0, n)

	// Kill the stream's leader (not a follower): the stream must elect.
	var info *jetstream.StreamInfo
	retry(t, "stream info", func(ctx context.Context) (err error) {
		info, err = stream.Info(ctx)
		if err == nil && (info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != 2) {
			err = fmt.Errorf("cluster info %+v", info.Cluster)
		}
		return err
	})
	var victim int
	if _, err := fmt.Sscanf(info.Cluster.Leader, "n%d", &victim); err != nil {
		t.Fatalf("stream leader %q: %v", info.Cluster.Leader, err)
	}
	if err := c.Kill(victim); err != nil {
		t.Fatal(err)
	}
	if c.Server(victim) != nil || len(c.Running()) != 2 {
		t.Fatalf("after killing n%d: running %v", victim, c.Running())
	}
	if err := c.Kill(victim); err == nil {
		t.Fatal("killed a node twice")
	}
	publish(n, 2*n)
	if !nc.IsConnected() || nc.ConnectedUrl() == c.ClientURL(victim) {
		t.Fatalf("client connected %v to %s, killed n%d", nc.IsConnected(), nc.ConnectedUrl(), victim)
	}
	readAll(t, js, 2*n)
	retry(t, "stream info", func(ctx context.Context) (err error) {
		info, err = stream.Info(ctx)
		if err == nil && (info.Cluster == nil || info.Cluster.Leader == "" || info.Cluster.Leader == fmt.Sprintf("n%d", victim)) {
			err = fmt.Errorf("cluster info %+v", info.Cluster)
		}
		return err
	})
	if info.State.Msgs != 2*n {
		t.Fatalf("stream holds %d messages, want %d", info.State.Msgs, 2*n)
	}

	if err := c.Restart(victim); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(victim); err == nil {
		t.Fatal("restarted a running node")
	}
	if got := c.Server(victim).ClientURL(); got != c.ClientURL(victim) {
		t.Fatalf("restarted on %s, was %s", got, c.ClientURL(victim))
	}
	if err := c.WaitCurrent(victim, clusterWait); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(clusterWait); err != nil {
		t.Fatal(err)
	}
	// Its own replica of the stream caught up with what it missed.
	if err := poll(clusterWait, func() error {
		ad, err := c.Server(victim).JszAccount(&server.JSzOptions{Account: server.DEFAULT_GLOBAL_ACCOUNT, Streams: true})
		if err != nil {
			return err
		}
		for _, sd := range ad.Streams {
			if sd.Name == "T" {
				if sd.State.Msgs != 2*n || sd.State.LastSeq != 2*n {
					return fmt.Errorf("n%d's replica: %d messages, last seq %d", victim, sd.State.Msgs, sd.State.LastSeq)
				}
				return nil
			}
		}
		return fmt.Errorf("n%d holds no replica of T", victim)
	}); err != nil {
		t.Fatal(err)
	}
	// A client of the restarted node alone reads everything.
	nc2, err := nats.Connect(c.ClientURL(victim))
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	js2, err := jetstream.New(nc2)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, js2, 2*n)
}

// readAll reads stream T from the start and checks it holds m000..m<n-1>,
// each once, in order.
func readAll(t *testing.T, js jetstream.JetStream, n int) {
	t.Helper()
	var got []string
	retry(t, "read stream", func(ctx context.Context) error {
		got = got[:0]
		cons, err := js.OrderedConsumer(ctx, "T", jetstream.OrderedConsumerConfig{})
		if err != nil {
			return err
		}
		for len(got) < n {
			m, err := cons.Next(jetstream.FetchMaxWait(time.Second))
			if err != nil {
				return fmt.Errorf("after %d messages: %w", len(got), err)
			}
			got = append(got, string(m.Data()))
		}
		return nil
	})
	for i, m := range got {
		if want := fmt.Sprintf("m%03d", i); m != want {
			t.Fatalf("message %d is %q, want %q (all: %q)", i, m, want, got)
		}
	}
}

// A node whose port was taken while it was down fails to restart at once,
// saying why, and restarts once the port is free again.
func TestClusterRestartOnTakenPort(t *testing.T) {
	c := startTestCluster(t, 3)
	if err := c.Kill(2); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", strings.TrimPrefix(c.ClientURL(2), "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	err = c.Restart(2)
	if err == nil || !strings.Contains(err.Error(), "Error listening") || c.Server(2) != nil {
		t.Fatalf("restart on a taken port: %v", err)
	}
	if d := time.Since(begin); d > ClusterReadyTimeout/2 {
		t.Fatalf("restart on a taken port took %v to fail", d)
	}
	_ = l.Close()
	if err := c.Restart(2); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(clusterWait); err != nil {
		t.Fatal(err)
	}
}

func TestStartClusterRejectsOneNode(t *testing.T) {
	for _, n := range []int{-1, 0, 1} {
		if _, err := StartCluster(t.TempDir(), n); err == nil {
			t.Fatalf("started a cluster of %d nodes", n)
		}
	}
}
