package predictor

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/actloop/actloop/internal/predict"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/tokenize"
)

// Backends of predictor-gw.
const (
	BackendHistory = "history" // learn from finished trajectories (Redis)
	BackendLearned = "learned" // a regression on the conversation, learned online (Redis)
	BackendHTTP    = "http"    // an external model server
	BackendOracle  = "oracle"  // the simulator's plan; benchmarks only
)

// Defaults of Config applied by New to fields left at zero.
const (
	DefaultBackend = BackendHistory
	DefaultTimeout = 200 * time.Millisecond
)

// Config is predictor-gw's settings (ACTLOOP_ prefix).
type Config struct {
	service.Common
	// Addr serves /healthz, /readyz and /metrics ("" = none).
	Addr string `envconfig:"PREDICTOR_ADDR" default:":8083"`
	// Backend is history (learned online from finished trajectories: a
	// trajectory's group siblings, then its task family, then every
	// trajectory, conditioned on how far it has come), learned (a
	// regression on what the conversation says — turns, tokens, context,
	// the last command's kind, the last observation's length and exit
	// code — and on history's answer, learned online from finished
	// trajectories; history answers until it has 200 examples), http (an
	// external model server) or oracle (the simulator's planned lengths;
	// for benchmarks only, refused by anything but the simulator).
	Backend string `envconfig:"PREDICTOR" default:"history"`
	// URL is the http backend's model server: it gets a JSON POST of the
	// PredictRequest's fields, the last exit code, the tail of the
	// trajectory's conversation and its group siblings' progress (protocol
	// 2: docs/architecture.md, examples/predictor) and answers
	// {"remaining_tokens", "remaining_turns"}.
	URL string `envconfig:"PREDICTOR_URL"`
	// MessagesBytes bounds the conversation the http backend sends: the
	// newest messages whose contents add up to at most this many bytes
	// (the newest one's end alone when it is longer), with the count and
	// tokens of the rest. 0 sends none, and predictor-gw then reads no
	// trajectory (otherwise its Redis user needs read access to
	// actloop:traj:*, which the users actloop creates have). At most 4 MiB.
	MessagesBytes int `envconfig:"PREDICTOR_MESSAGES_BYTES" default:"65536"`
	// OracleURL is the oracle backend's simulator (its base URL).
	OracleURL     string `envconfig:"ORACLE_URL"`
	tokenize.Chat        // ACTLOOP_TOKENIZER, ACTLOOP_CHAT_TEMPLATE: the same in every service
	// Timeout is the deadline of each request; past it the caller gets an
	// error reply and falls back to fcfs.
	Timeout time.Duration `envconfig:"PREDICTOR_TIMEOUT" default:"200ms"`
}

// Validate joins every problem with c.
func (c *Config) Validate() error {
	return errors.Join(c.Common.Validate(), c.validateOwn())
}

// validateOwn checks predictor-gw's own settings.
func (c *Config) validateOwn() error {
	var errs []error
	switch c.Backend {
	case BackendHistory, BackendLearned:
	case BackendHTTP:
		if err := checkURL(c.URL); err != nil {
			errs = append(errs, fmt.Errorf("ACTLOOP_PREDICTOR_URL: %w (required with ACTLOOP_PREDICTOR=http)", err))
		}
		if c.MessagesBytes < 0 || c.MessagesBytes > predict.MaxMessagesBytes {
			errs = append(errs, fmt.Errorf("ACTLOOP_PREDICTOR_MESSAGES_BYTES: must be 0 to %d, got %d", predict.MaxMessagesBytes, c.MessagesBytes))
		}
		if c.MessagesBytes > 0 {
			errs = append(errs, c.Chat.Validate())
		}
	case BackendOracle:
		if err := checkURL(c.OracleURL); err != nil {
			errs = append(errs, fmt.Errorf("ACTLOOP_ORACLE_URL: %w (required with ACTLOOP_PREDICTOR=oracle: a simulator's base URL)", err))
		}
		errs = append(errs, c.Chat.Validate())
	default:
		errs = append(errs, fmt.Errorf("ACTLOOP_PREDICTOR: unknown backend %q (want history, learned, http or oracle)", c.Backend))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("ACTLOOP_PREDICTOR_TIMEOUT: must be > 0, got %v", c.Timeout))
	}
	return errors.Join(errs...)
}

func checkURL(s string) error {
	if s == "" {
		return errors.New("missing")
	}
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an http(s) URL", s)
	}
	return nil
}

// withDefaults fills fields left at zero, for code that builds a Config
// without the environment.
func (c Config) withDefaults() Config {
	if c.Backend == "" {
		c.Backend = DefaultBackend
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	return c // an unset tokenizer and template: tokenize.Chat's defaults
}
