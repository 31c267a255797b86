package service_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/actloop/actloop/internal/service"
)

// A service names every server it would reach unauthenticated, and refuses
// to start then unless ACTLOOP_INSECURE says it may.
func TestUnauthenticated(t *testing.T) {
	tests := []struct {
		name string
		set  func(c *service.Common)
		want []string // settings named; none: authenticated
	}{
		{"nothing set", func(*service.Common) {}, []string{"ACTLOOP_NATS_USER", "ACTLOOP_REDIS_PASSWORD"}},
		{"NATS user only", func(c *service.Common) { c.NATSUser, c.NATSPassword = "u", "p" }, []string{"ACTLOOP_REDIS_PASSWORD"}},
		{"Redis password only", func(c *service.Common) { c.RedisPassword = "p" }, []string{"ACTLOOP_NATS_USER"}},
		{"token and Redis URL password", func(c *service.Common) {
			c.NATSToken, c.RedisURL = "t", "redis://:p@127.0.0.1:6379/0"
		}, nil},
		{"NATS URL user and Redis ACL user", func(c *service.Common) {
			c.NATSURL, c.RedisUsername, c.RedisPassword = "nats://u:p@127.0.0.1:4222", "actloop", "p"
		}, nil},
		{"NATS client certificate", func(c *service.Common) {
			c.NATSTLSCert, c.NATSTLSKey, c.RedisPassword = "cert.pem", "key.pem", "p"
		}, nil},
		{"creds file", func(c *service.Common) { c.NATSCreds, c.RedisPassword = "x.creds", "p" }, nil},
		{"nkey", func(c *service.Common) { c.NATSNKey, c.RedisPassword = "x.nk", "p" }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := service.CommonDefaults()
			tt.set(&c)
			missing := c.Unauthenticated()
			err := service.RequireAuth(false, missing)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, service.ErrUnauthenticated) || len(missing) != len(tt.want) {
				t.Fatalf("got %v (missing %q), want %v", err, missing, tt.want)
			}
			for _, w := range append(tt.want, "ACTLOOP_INSECURE=true") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
			if err := service.RequireAuth(true, missing); err != nil {
				t.Errorf("with ACTLOOP_INSECURE: %v", err)
			}
		})
	}
}
