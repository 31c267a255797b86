package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/internal/metrics"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/telemetry"
	"github.com/actloop/actloop/pkg/client"
)

// Name is the gateway's service name (`actloop serve gateway`), its NATS
// client name and its name in logs and traces.
const Name = "gateway"

// Main is the gateway's life as a service, as service.Main is the others'
// but without Redis: settings from the environment (refused when they leave
// anything unauthenticated, unless ACTLOOP_INSECURE=true), logging,
// tracing, then Serve until SIGINT or SIGTERM.
func Main() (err error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var cfg Config
	if err := envconfig.Process("ACTLOOP", &cfg); err != nil {
		return fmt.Errorf("settings: %w", err)
	}
	missing := cfg.Unauthenticated()
	if err := errors.Join(cfg.Validate(), service.RequireAuth(cfg.Insecure, missing)); err != nil {
		return fmt.Errorf("settings: %w", err)
	}
	log := service.NewLogger(os.Stderr, cfg.LogLevel).With("service", Name)
	if len(missing) > 0 {
		log.Error(service.InsecureWarning, "unauthenticated", missing)
	}
	shutdownTel, err := telemetry.Setup(ctx, Name, os.Stdout) // the standard OTEL_* variables
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = errors.Join(err, shutdownTel(sctx))
	}()
	l, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("ACTLOOP_GATEWAY_ADDR: listen %s: %w", cfg.Addr, err)
	}
	log.Info("started")
	err = Serve(ctx, cfg, l, log)
	log.Info("stopped", "error", err)
	return err
}

// Serve connects to NATS with cfg's credentials, declares the streams a
// trainer declares (waiting, as long as ctx allows, for a JetStream that
// does not answer yet), and serves the API on l until ctx ends; then it
// drains the connection, so the last acks reach the server. It closes l.
func Serve(ctx context.Context, cfg Config, l net.Listener, log *slog.Logger) error {
	nc, err := cfg.ConnectNATS(Name, nats.MaxReconnects(-1))
	if err != nil {
		_ = l.Close()
		return err
	}
	defer drain(nc)
	js, err := jetstream.New(nc)
	if err != nil {
		_ = l.Close()
		return fmt.Errorf("jetstream: %w", err)
	}
	topo := cfg.Topology()
	for wait := time.Second; ; wait = min(2*wait, 10*time.Second) {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = topo.EnsureStreams(actx, js)
		cancel()
		if err == nil || ctx.Err() != nil || !client.Unanswered(err) {
			break
		}
		log.Warn("declare the streams: JetStream does not answer; will try again", "error", err, "retry_in", wait)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	if err != nil {
		_ = l.Close()
		return err
	}
	d := &service.Deps{NC: nc, JS: js, Topo: topo, Common: cfg.Common, Log: log, Now: time.Now, Metrics: metrics.NewRegistry()}
	return service.ServeListener(ctx, l, New(cfg, d).Handler(), log)
}

// drain flushes and drains nc, waiting up to 10s for it to close.
func drain(nc *nats.Conn) {
	_ = nc.FlushTimeout(5 * time.Second)
	if err := nc.Drain(); err != nil {
		nc.Close()
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for !nc.IsClosed() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	nc.Close()
}
