package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/actloop/actloop/internal/service"
)

// MaxMaxWait bounds ACTLOOP_GATEWAY_MAX_WAIT: a poll held open longer
// outlives the idle timeouts of the proxies between a trainer and the
// gateway, and only delays what the trainer sees of a lost connection.
const MaxMaxWait = 10 * time.Minute

// Config is the gateway's settings (ACTLOOP_ prefix). It reads the NATS
// settings of service.Common and its stream settings (the gateway declares
// the trainer's streams, as the CLI does); it does not connect to Redis.
type Config struct {
	service.Common
	// Addr serves the HTTP trainer API, /healthz, /readyz and /metrics.
	Addr string `envconfig:"GATEWAY_ADDR" default:":8084"`
	// APIToken is the bearer token every call but /healthz, /readyz,
	// /metrics and GET /v1/openapi.yaml needs (Authorization: Bearer …),
	// the coordinator's ACTLOOP_API_TOKEN, which GET /v1/status passes on
	// to it. The gateway does not start without it unless
	// ACTLOOP_INSECURE=true.
	APIToken string `envconfig:"API_TOKEN"`
	// CoordinatorURL is the coordinator's HTTP API (http:// or https://),
	// which GET /v1/status reads ("" answers it 501).
	CoordinatorURL string `envconfig:"COORDINATOR_URL"`
	// MaxWait bounds how long a read of results or groups waits for the
	// first one (the request's wait_ms); at most 10m.
	MaxWait time.Duration `envconfig:"GATEWAY_MAX_WAIT" default:"60s"`
	// MaxBatch bounds how many results or groups one read returns (the
	// request's max).
	MaxBatch int `envconfig:"GATEWAY_MAX_BATCH" default:"256"`
}

// Unauthenticated names what leaves the gateway unauthenticated: NATS
// without credentials, and the HTTP API without a token. Redis does not
// count: the gateway does not connect to it.
func (c *Config) Unauthenticated() []string {
	missing := c.Common.NATSUnauthenticated()
	if c.APIToken == "" {
		missing = append(missing, "the HTTP trainer API has no token: set ACTLOOP_API_TOKEN")
	}
	return missing
}

// NATSOnly: the gateway connects to NATS alone (service.Main).
func (c *Config) NATSOnly() bool { return true }

// Validate joins every problem with c.
func (c *Config) Validate() error {
	errs := []error{c.Common.Validate()}
	if c.Addr == "" {
		errs = append(errs, errors.New("ACTLOOP_GATEWAY_ADDR: missing"))
	} else if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		errs = append(errs, fmt.Errorf("ACTLOOP_GATEWAY_ADDR: %q: want host:port or :port: %w", c.Addr, err))
	}
	if c.CoordinatorURL != "" {
		u, err := url.Parse(c.CoordinatorURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("ACTLOOP_COORDINATOR_URL: %q: want http://host:port or https://host:port", service.RedactURL(c.CoordinatorURL)))
		}
	}
	if c.MaxWait <= 0 || c.MaxWait > MaxMaxWait {
		errs = append(errs, fmt.Errorf("ACTLOOP_GATEWAY_MAX_WAIT: must be in (0, %v], got %v", MaxMaxWait, c.MaxWait))
	}
	if c.MaxBatch < 1 {
		errs = append(errs, fmt.Errorf("ACTLOOP_GATEWAY_MAX_BATCH: must be >= 1, got %d", c.MaxBatch))
	}
	return errors.Join(errs...)
}
