package localnats

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ClusterName is the NATS cluster name of a Cluster's servers.
const ClusterName = "actloop"

// ClusterReadyTimeout bounds how long StartCluster and Restart wait for a
// server to listen and for the cluster's JetStream meta group to form.
const ClusterReadyTimeout = 60 * time.Second

// Cluster is n in-process NATS servers with JetStream, clustered on
// loopback: a JetStream cluster for tests of what happens when servers go
// away and come back. Node i is named "n<i>" and stores under <dir>/n<i>.
// Every node keeps its client and cluster ports for the cluster's life, so
// a restarted node rejoins where it was and clients given ClientURLs find it
// again.
type Cluster struct {
	dir   string
	cfg   clusterConfig
	mu    sync.Mutex
	nodes []*clusterNode
}

type clusterNode struct {
	name        string
	clientPort  int
	clusterPort int
	srv         *server.Server // nil while killed
}

type clusterConfig struct {
	sync   Sync
	logger server.Logger
}

// ClusterOption configures StartCluster.
type ClusterOption func(*clusterConfig)

// WithSync makes every node's JetStream store sync as s says (default: the
// server's default).
func WithSync(s Sync) ClusterOption { return func(c *clusterConfig) { c.sync = s } }

// WithLogger makes the servers log (notices, warnings, errors; no debug or
// trace) to l instead of not at all. A server's fatal error goes to
// l.Errorf: it never exits the process.
func WithLogger(l server.Logger) ClusterOption { return func(c *clusterConfig) { c.logger = l } }

// StartCluster starts n (>= 2) clustered servers with JetStream storing
// under dir, on free loopback ports, and waits until every one has joined
// the JetStream meta group, it has a leader and every node is current.
func StartCluster(dir string, n int, opts ...ClusterOption) (*Cluster, error) {
	if n < 2 {
		// One server with routes to itself only waits for peers that never
		// come: it is no cluster (use Start).
		return nil, fmt.Errorf("nats cluster: want at least two nodes, got %d", n)
	}
	c := &Cluster{dir: dir}
	for _, o := range opts {
		o(&c.cfg)
	}
	// The ports are picked free, then released before the servers bind
	// them; another process may take one meanwhile. Then start again on
	// new ports: nothing is stored yet.
	for attempt := 1; ; attempt++ {
		err := c.start(n)
		if err == nil {
			return c, nil
		}
		c.Shutdown()
		var fatal *fatalError
		if !errors.As(err, &fatal) || attempt == 3 {
			return nil, err
		}
		for i := range n {
			_ = os.RemoveAll(c.storeDir(i))
		}
	}
}

func (c *Cluster) start(n int) error {
	ports, err := freePorts(2 * n)
	if err != nil {
		return fmt.Errorf("nats cluster: %w", err)
	}
	c.mu.Lock()
	c.nodes = make([]*clusterNode, n)
	for i := range n {
		c.nodes[i] = &clusterNode{name: fmt.Sprintf("n%d", i), clientPort: ports[2*i], clusterPort: ports[2*i+1]}
	}
	c.mu.Unlock()
	// Start them all, then wait for the meta group: a server accepts
	// clients before its JetStream has peers.
	for i := range n {
		if err := c.launch(i); err != nil {
			return err
		}
	}
	return c.WaitReady(ClusterReadyTimeout)
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func (c *Cluster) storeDir(i int) string { return filepath.Join(c.dir, fmt.Sprintf("n%d", i)) }

// options are node i's server options; a fresh copy for every start (the
// server keeps and changes what it is given).
func (c *Cluster) options(i int) *server.Options {
	var routes []*url.URL
	for _, nd := range c.nodes {
		// Every node, itself too (a server ignores a route to itself): the
		// number of routes is the meta group's expected size.
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", nd.clusterPort)})
	}
	nd := c.nodes[i]
	return &server.Options{
		ServerName:   nd.name,
		SyncInterval: c.cfg.sync.Interval,
		SyncAlways:   c.cfg.sync.Always,
		Host:         "127.0.0.1",
		Port:         nd.clientPort,
		JetStream:    true,
		StoreDir:     c.storeDir(i),
		NoSigs:       true,
		Cluster: server.ClusterOpts{
			Name: ClusterName,
			Host: "127.0.0.1",
			Port: nd.clusterPort,
		},
		Routes: routes,
	}
}

// launch starts node i (not running) and waits until it accepts clients and
// routes, or fails (a port taken meanwhile).
func (c *Cluster) launch(i int) error {
	c.mu.Lock()
	opts := c.options(i)
	c.mu.Unlock()
	s, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("nats cluster: node n%d: %w", i, err)
	}
	log := &fatalLogger{Logger: c.cfg.logger, fatal: make(chan string, 1)}
	s.SetLogger(log, false, false)
	go s.Start()
	err = poll(ClusterReadyTimeout, func() error {
		select {
		case msg := <-log.fatal:
			return &fatalError{msg}
		default:
		}
		if !s.ReadyForConnections(50 * time.Millisecond) { // > 25ms: it sleeps between looks
			return errors.New("not accepting connections")
		}
		return nil
	})
	if err != nil {
		s.Shutdown()
		s.WaitForShutdown()
		return fmt.Errorf("nats cluster: node n%d (client port %d, cluster port %d): %w",
			i, opts.Port, opts.Cluster.Port, err)
	}
	c.mu.Lock()
	c.nodes[i].srv = s
	c.mu.Unlock()
	return nil
}

// fatalLogger passes a server's log to Logger (nil: nowhere) and reports
// its fatal error (it cannot listen), which would otherwise leave it never
// ready, without exiting.
type fatalLogger struct {
	server.Logger
	fatal chan string
}

func (l *fatalLogger) Noticef(format string, v ...any) { l.pass(server.Logger.Noticef, format, v) }
func (l *fatalLogger) Warnf(format string, v ...any)   { l.pass(server.Logger.Warnf, format, v) }
func (l *fatalLogger) Errorf(format string, v ...any)  { l.pass(server.Logger.Errorf, format, v) }
func (l *fatalLogger) Debugf(format string, v ...any)  { l.pass(server.Logger.Debugf, format, v) }
func (l *fatalLogger) Tracef(format string, v ...any)  { l.pass(server.Logger.Tracef, format, v) }

func (l *fatalLogger) Fatalf(format string, v ...any) {
	l.pass(server.Logger.Errorf, format, v)
	select {
	case l.fatal <- fmt.Sprintf(format, v...):
	default:
	}
}

func (l *fatalLogger) pass(f func(server.Logger, string, ...any), format string, v []any) {
	if l.Logger != nil {
		f(l.Logger, format, v...)
	}
}

// fatalError is a server's fatal error: no use waiting longer.
type fatalError struct{ msg string }

func (e *fatalError) Error() string { return e.msg }

// N is the number of nodes, running or not.
func (c *Cluster) N() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.nodes)
}

// Server is node i's running server, or nil while it is killed.
func (c *Cluster) Server(i int) *server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i].srv
}

// ClientURL is node i's client URL (the same across restarts).
func (c *Cluster) ClientURL(i int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("nats://127.0.0.1:%d", c.nodes[i].clientPort)
}

// ClientURLs is every node's client URL, comma-separated, as nats.Connect
// takes a server list: a client fails over to the others when its server
// goes.
func (c *Cluster) ClientURLs() string {
	urls := make([]string, c.N())
	for i := range urls {
		urls[i] = c.ClientURL(i)
	}
	return strings.Join(urls, ",")
}

// Kill shuts node i down at once, without lame-duck mode; its store stays
// for Restart. In one process there is no kill -9: this is the server's
// Shutdown, which first steps down the Raft groups it leads (without
// waiting for a successor), then closes its connections and files.
func (c *Cluster) Kill(i int) error {
	c.mu.Lock()
	s := c.nodes[i].srv
	c.nodes[i].srv = nil
	c.mu.Unlock()
	if s == nil {
		return fmt.Errorf("nats cluster: node n%d is not running", i)
	}
	s.Shutdown()
	s.WaitForShutdown()
	return nil
}

// Restart starts killed node i again on its ports and store, so it rejoins
// the cluster, and waits until it accepts clients. It does not wait for
// the node to catch up: see WaitCurrent.
func (c *Cluster) Restart(i int) error {
	if c.Server(i) != nil {
		return fmt.Errorf("nats cluster: node n%d is running", i)
	}
	return c.launch(i)
}

// Running lists the indexes of the running nodes.
func (c *Cluster) Running() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int
	for i, nd := range c.nodes {
		if nd.srv != nil {
			out = append(out, i)
		}
	}
	return out
}

// Leader is the index of the running node that leads the JetStream meta
// group, or -1.
func (c *Cluster) Leader() int {
	for _, i := range c.Running() {
		if s := c.Server(i); s != nil && s.JetStreamIsLeader() {
			return i
		}
	}
	return -1
}

// WaitReady waits up to timeout until the JetStream meta group has a leader
// that sees every node as a live peer and every running node is current.
// With a node killed it cannot succeed: use WaitCurrent on the others.
func (c *Cluster) WaitReady(timeout time.Duration) error {
	n := c.N()
	return poll(timeout, func() error {
		l := c.Leader()
		if l < 0 {
			return errors.New("no JetStream meta leader")
		}
		s := c.Server(l)
		if s == nil {
			return errors.New("meta leader stopped")
		}
		if peers := s.JetStreamClusterPeers(); len(peers) != n {
			return fmt.Errorf("meta leader n%d sees peers %v, want %d", l, peers, n)
		}
		for _, i := range c.Running() {
			if s := c.Server(i); s != nil && !s.JetStreamIsCurrent() {
				return fmt.Errorf("node n%d not current", i)
			}
		}
		return nil
	})
}

// WaitCurrent waits up to timeout until running node i reports healthy:
// connected to the meta group and current with its leader, and a current
// member of every stream and consumer it holds a replica of.
func (c *Cluster) WaitCurrent(i int, timeout time.Duration) error {
	return poll(timeout, func() error {
		s := c.Server(i)
		if s == nil {
			return fmt.Errorf("node n%d is not running", i)
		}
		if h := s.Healthz(nil); h.Status != "ok" || h.Error != "" {
			return fmt.Errorf("node n%d: healthz %s: %s", i, h.Status, h.Error)
		}
		return nil
	})
}

// poll calls cond every 10ms until it returns nil, or a *fatalError, or
// timeout has passed; then it returns cond's last error.
func poll(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		var fatal *fatalError
		if errors.As(err, &fatal) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nats cluster: not ready after %v: %w", timeout, err)
		}
		<-t.C
	}
}

// Shutdown stops every running node. Their stores stay under dir.
func (c *Cluster) Shutdown() {
	c.mu.Lock()
	var srvs []*server.Server
	for _, nd := range c.nodes {
		if nd.srv != nil {
			srvs = append(srvs, nd.srv)
			nd.srv = nil
		}
	}
	c.mu.Unlock()
	for _, s := range srvs {
		s.Shutdown()
	}
	for _, s := range srvs {
		s.WaitForShutdown()
	}
}
