package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/sim"
	"github.com/actloop/actloop/internal/tokenize"
)

// runSim serves the inference simulator (SGLang's HTTP API and OpenAI
// completions) until ctx ends: a stand-in for an inference server in a
// deployment without GPUs.
func runSim(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", ":30000", "listen address")
	timeScale := fs.Float64("time-scale", 1, "wall seconds per simulated second (0: answer at once)")
	slots := fs.Int("slots", sim.DefaultMaxRunning, "requests running at once; more wait in a queue")
	cacheTokens := fs.Int("cache-tokens", sim.DefaultCacheTokens, "prefix cache capacity in tokens (-1: no cache)")
	seed := fs.Int64("seed", 0, "varies the unscripted replies")
	tokenizer := fs.String("tokenizer", tokenize.TokenizerQwen, "the model's tokenizer: qwen or bytes (the gen-workers' ACTLOOP_TOKENIZER)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return &exitError{2, fmt.Errorf("sim: unexpected argument %q", fs.Arg(0))}
	}
	var errs []error
	if *timeScale < 0 {
		errs = append(errs, errors.New("--time-scale: must be >= 0"))
	}
	if *slots < 1 {
		errs = append(errs, errors.New("--slots: must be >= 1"))
	}
	if *cacheTokens == 0 || *cacheTokens < -1 {
		errs = append(errs, errors.New("--cache-tokens: must be > 0, or -1 for no cache"))
	}
	if *tokenizer != tokenize.TokenizerQwen && *tokenizer != tokenize.TokenizerBytes {
		errs = append(errs, fmt.Errorf("--tokenizer: %q: want %s or %s", *tokenizer, tokenize.TokenizerQwen, tokenize.TokenizerBytes))
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		errs = append(errs, fmt.Errorf("--log-level: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return &exitError{2, fmt.Errorf("sim: %w", err)}
	}
	tok, err := tokenize.OpenTokenizer(*tokenizer)
	if err != nil {
		return fmt.Errorf("sim: --tokenizer: %w", err)
	}
	if err := sim.CheckTokenizer(tok); err != nil {
		return fmt.Errorf("sim: --tokenizer: the simulator speaks ChatML: %w", err)
	}
	sv := sim.New(sim.Config{TimeScale: *timeScale, MaxRunning: *slots, CacheTokens: *cacheTokens,
		Seed: *seed, Tokenizer: tok})
	l, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("sim: listen %s: %w", *addr, err)
	}
	log := service.NewLogger(stderr, *logLevel).With("service", "sim")
	return service.ServeListener(ctx, l, sv, log)
}

// runProbe GETs a URL and succeeds when it answers 2xx within the timeout:
// a container health check for images without curl.
func runProbe(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for the answer")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return &exitError{2, errors.New("probe: name one URL")}
	}
	if *timeout <= 0 {
		return &exitError{2, errors.New("probe: --timeout: must be > 0")}
	}
	url := fs.Arg(0)
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return &exitError{2, fmt.Errorf("probe: %w", err)}
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
