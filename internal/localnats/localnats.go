// Package localnats runs an embedded NATS server with JetStream for
// `actloop dev` and tests.
package localnats

import (
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Sync is how JetStream's file store syncs to disk. The zero value is the
// server's default: an fsync every two minutes, so an operating-system
// crash or power loss can lose messages that were acknowledged within the
// last two minutes (a process crash loses nothing). Always syncs every
// write: nothing acknowledged is lost, at the cost of an fsync per write.
type Sync struct {
	Interval time.Duration // 0: the server's default
	Always   bool
}

// ParseSync reads "always", "" (the default) or a duration such as "10s".
func ParseSync(s string) (Sync, error) {
	switch s {
	case "":
		return Sync{}, nil
	case "always":
		return Sync{Always: true}, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return Sync{}, fmt.Errorf("sync %q: want always or a positive duration", s)
	}
	return Sync{Interval: d}, nil
}

// Start starts an embedded NATS server with JetStream storing under dir, on a
// free loopback port (port -1) or the given one, syncing as sync says. With
// users, only they may connect, each with its permissions; without, anyone.
func Start(dir string, port int, sync Sync, users ...*server.User) (*server.Server, error) {
	opts := &server.Options{
		Users:        users,
		SyncInterval: sync.Interval,
		SyncAlways:   sync.Always,
		Host:         "127.0.0.1",
		Port:         port,
		JetStream:    true,
		StoreDir:     dir,
		NoLog:        true,
		NoSigs:       true,
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded nats: not ready after 30s")
	}
	return s, nil
}
