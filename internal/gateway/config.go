package gateway

import (
	"errors"
	"fmt"
	"time"

	"github.com/actloop/actloop/internal/service"
)

// Config is the gateway's settings (ACTLOOP_ prefix).
type Config struct {
	service.Common
	// Addr serves the HTTP trainer API, /healthz, /readyz and /metrics.
	Addr string `envconfig:"GATEWAY_ADDR" default:":8084"`
	// APIToken is the bearer token every call but /healthz, /readyz,
	// /metrics and GET /v1/openapi.yaml needs (Authorization: Bearer …),
	// the coordinator's ACTLOOP_API_TOKEN.
	APIToken string `envconfig:"API_TOKEN"`
	// CoordinatorURL is the coordinator's HTTP API, which GET /v1/status
	// reads ("" answers it 501).
	CoordinatorURL string `envconfig:"COORDINATOR_URL"`
	// MaxWait bounds how long a read of results or groups waits for the
	// first one (the request's wait_ms).
	MaxWait time.Duration `envconfig:"GATEWAY_MAX_WAIT" default:"60s"`
	// MaxBatch bounds how many results or groups one read returns (the
	// request's max).
	MaxBatch int `envconfig:"GATEWAY_MAX_BATCH" default:"256"`
}

// Validate joins every problem with c.
func (c *Config) Validate() error {
	errs := []error{c.Common.Validate()}
	if c.MaxWait <= 0 {
		errs = append(errs, fmt.Errorf("ACTLOOP_GATEWAY_MAX_WAIT: must be > 0, got %v", c.MaxWait))
	}
	if c.MaxBatch < 1 {
		errs = append(errs, fmt.Errorf("ACTLOOP_GATEWAY_MAX_BATCH: must be >= 1, got %d", c.MaxBatch))
	}
	return errors.Join(errs...)
}
