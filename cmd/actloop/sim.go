package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/actloop/actloop/internal/batching"
	"github.com/actloop/actloop/internal/launch"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/sim"
	"github.com/actloop/actloop/internal/tokenize"
)

// simOptions are `actloop sim`'s flags.
type simOptions struct {
	addr                string
	timeScale           float64
	slots, cacheTokens  int
	seed                int64
	tokenizer, logLevel string
	serverModel         string
}

func newSimCmd() *cobra.Command {
	var o simOptions
	cmd := &cobra.Command{
		Use:   "sim [--addr ADDR] [flags]",
		Short: "Serve the inference simulator (SGLang's HTTP API and OpenAI completions)",
		Long: `Serve the inference simulator on --addr: SGLang's HTTP API (/generate,
/abort_request, /flush_cache, /update_weight_version, /health) and OpenAI
completions, answering in simulated time. A stand-in for an inference server
in a deployment without GPUs; SIGTERM stops it.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSim(cmd.Context(), o, cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.addr, "addr", ":30000", "listen address")
	f.Float64Var(&o.timeScale, "time-scale", 1, "wall seconds per simulated second (0: answer at once)")
	f.IntVar(&o.slots, "slots", sim.DefaultMaxRunning, "requests running at once; more wait in a queue")
	f.IntVar(&o.cacheTokens, "cache-tokens", sim.DefaultCacheTokens, "prefix cache capacity in tokens (-1: no cache)")
	f.Int64Var(&o.seed, "seed", 0, "varies the unscripted replies")
	f.StringVar(&o.tokenizer, "tokenizer", tokenize.TokenizerQwen, "the model's tokenizer: qwen or bytes (the gen-workers' ACTLOOP_TOKENIZER)")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&o.serverModel, "server-model", "", "\"\": the plain cost model above; "+batching.A100Llama8B.Name+
		": the benchmark's iteration-level model of SGLang's batching (one token pool, admission when a request fits, chunked prefill, retraction; --slots and --cache-tokens do not apply)")
	return cmd
}

// runSim serves the inference simulator until ctx ends.
func runSim(ctx context.Context, o simOptions, stderr io.Writer) error {
	var errs []error
	if o.timeScale < 0 {
		errs = append(errs, errors.New("--time-scale: must be >= 0"))
	}
	if o.slots < 1 {
		errs = append(errs, errors.New("--slots: must be >= 1"))
	}
	if o.cacheTokens == 0 || o.cacheTokens < -1 {
		errs = append(errs, errors.New("--cache-tokens: must be > 0, or -1 for no cache"))
	}
	if o.tokenizer != tokenize.TokenizerQwen && o.tokenizer != tokenize.TokenizerBytes {
		errs = append(errs, fmt.Errorf("--tokenizer: %q: want %s or %s", o.tokenizer, tokenize.TokenizerQwen, tokenize.TokenizerBytes))
	}
	if o.serverModel != "" && o.serverModel != batching.A100Llama8B.Name {
		errs = append(errs, fmt.Errorf("--server-model: %q: want %s or nothing", o.serverModel, batching.A100Llama8B.Name))
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		errs = append(errs, fmt.Errorf("--log-level: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return usageError(fmt.Errorf("sim: %w", err))
	}
	tok, err := tokenize.OpenTokenizer(o.tokenizer)
	if err != nil {
		return fmt.Errorf("sim: --tokenizer: %w", err)
	}
	if err := sim.CheckTokenizer(tok); err != nil {
		return fmt.Errorf("sim: --tokenizer: the simulator speaks ChatML: %w", err)
	}
	cfg := sim.Config{TimeScale: o.timeScale, MaxRunning: o.slots, CacheTokens: o.cacheTokens, Seed: o.seed, Tokenizer: tok}
	if o.serverModel != "" {
		m := batching.DefaultConfig()
		cfg.Model = &m
	}
	sv := sim.New(cfg)
	l, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fmt.Errorf("sim: listen %s: %w", o.addr, err)
	}
	log := service.NewLogger(stderr, o.logLevel).With("service", "sim")
	return service.ServeListener(ctx, l, sv, log)
}

func newProbeCmd() *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "probe [--timeout D] URL",
		Short: "GET a URL; exit 0 if it answers 2xx within --timeout, else 1 with the reason",
		Long: `GET a URL and exit 0 if it answers 2xx within --timeout; otherwise exit 1 and
say why (the first line of the answer, such as what a /readyz found down). A
container health check for images without curl.`,
		Example: "  actloop probe http://localhost:8080/readyz",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError(errors.New("probe: name one URL"))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout <= 0 {
				return usageError(errors.New("probe: --timeout: must be > 0"))
			}
			return runProbe(cmd.Context(), args[0], timeout)
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "how long to wait for the answer")
	return cmd
}

// runProbe GETs url and succeeds when it answers 2xx within timeout.
func runProbe(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return usageError(fmt.Errorf("probe: %w", err))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		return nil
	}
	// The first line of the body says why (a /readyz names what is down).
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	if line != "" {
		return fmt.Errorf("probe: GET %s: %s: %s", url, resp.Status, line)
	}
	return fmt.Errorf("probe: GET %s: %s", url, resp.Status)
}

func newServeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "serve SERVICE",
		Short: "Run one service (" + strings.Join(launch.Names, ", ") + ")",
		Long: `Run one service (` + strings.Join(launch.Names, ", ") + `) with its
ACTLOOP_* settings from the environment, as its own command under services/
does, until SIGINT or SIGTERM. The container images run their services this
way.`,
		Example:   "  actloop serve coordinator",
		ValidArgs: launch.Names,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 || !launch.Known(args[0]) {
				return usageError(fmt.Errorf("serve: name one service of %v", launch.Names))
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error { return launch.Run(args[0]) },
	}
}
