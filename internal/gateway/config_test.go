package gateway

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/service"
)

func validConfig() Config {
	var c Config
	service.Defaults(&c)
	c.APIToken, c.CoordinatorURL = "t", "http://coordinator:8080"
	return c
}

// Each bad setting is refused at start, the error naming its variable.
func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{"defaults", func(*Config) {}, ""},
		{"no coordinator", func(c *Config) { c.CoordinatorURL = "" }, ""},
		{"https coordinator", func(c *Config) { c.CoordinatorURL = "https://coord.example:443" }, ""},
		{"no address", func(c *Config) { c.Addr = "" }, "ACTLOOP_GATEWAY_ADDR: missing"},
		{"address without port", func(c *Config) { c.Addr = "localhost" }, "ACTLOOP_GATEWAY_ADDR: \"localhost\""},
		{"coordinator without scheme", func(c *Config) { c.CoordinatorURL = "coordinator:8080" }, "ACTLOOP_COORDINATOR_URL"},
		{"coordinator not http", func(c *Config) { c.CoordinatorURL = "nats://coordinator:4222" }, "ACTLOOP_COORDINATOR_URL"},
		{"coordinator's password not shown", func(c *Config) { c.CoordinatorURL = "ftp://u:s3cret@coordinator" }, "ACTLOOP_COORDINATOR_URL"},
		{"no wait", func(c *Config) { c.MaxWait = 0 }, "ACTLOOP_GATEWAY_MAX_WAIT"},
		{"wait too long", func(c *Config) { c.MaxWait = MaxMaxWait + time.Second }, "ACTLOOP_GATEWAY_MAX_WAIT: must be in (0, 10m0s]"},
		{"no batch", func(c *Config) { c.MaxBatch = 0 }, "ACTLOOP_GATEWAY_MAX_BATCH"},
		{"common settings", func(c *Config) { c.NATSURL = "" }, "ACTLOOP_NATS_URL: missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.mutate(&c)
			err := c.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Validate: %v, want an error containing %q", err, tt.wantErr)
			case err != nil && strings.Contains(err.Error(), "s3cret"):
				t.Fatalf("Validate: %v shows the password", err)
			}
		})
	}
}

// The gateway counts NATS's credentials and its token, never Redis's: it
// does not connect to Redis.
func TestConfigUnauthenticated(t *testing.T) {
	c := validConfig()
	if got := c.Unauthenticated(); !slices.Equal(got, []string{c.Common.Unauthenticated()[0]}) || !strings.Contains(got[0], "ACTLOOP_NATS_USER") {
		t.Errorf("without NATS credentials: %q, want NATS named alone", got)
	}
	c.NATSUser, c.NATSPassword = "gateway", "p"
	if got := c.Unauthenticated(); len(got) != 0 {
		t.Errorf("with NATS credentials and a token: %q, want nothing (Redis's password does not count)", got)
	}
	c.APIToken = ""
	if got := c.Unauthenticated(); len(got) != 1 || !strings.Contains(got[0], "ACTLOOP_API_TOKEN") {
		t.Errorf("without a token: %q, want the token named", got)
	}
	if err := service.RequireAuth(false, c.Unauthenticated()); err == nil || strings.Contains(err.Error(), "REDIS") {
		t.Errorf("RequireAuth: %v, want a refusal that names no Redis setting", err)
	}
}
