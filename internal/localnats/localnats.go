// Package localnats runs an embedded NATS server with JetStream for
// `actloop dev` and tests.
package localnats

import (
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Start starts an embedded NATS server with JetStream storing under dir, on a
// free loopback port (port -1) or the given one.
func Start(dir string, port int) (*server.Server, error) {
	opts := &server.Options{
		Host:      "127.0.0.1",
		Port:      port,
		JetStream: true,
		StoreDir:  dir,
		NoLog:     true,
		NoSigs:    true,
		// Results carry whole trajectories; NATS's default 1 MiB payload
		// limit is too small for long ones.
		MaxPayload: 8 << 20,
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
