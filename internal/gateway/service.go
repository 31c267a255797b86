package gateway

import (
	"context"
	"log/slog"
	"net"

	"github.com/actloop/actloop/internal/service"
)

// Name is the gateway's service name (`actloop serve gateway`), its NATS
// client name and its name in logs and traces.
const Name = "gateway"

// Main is the gateway's life as a service (service.Main, connected to NATS
// alone): it serves the API on ACTLOOP_GATEWAY_ADDR until SIGINT or SIGTERM.
func Main() error {
	var cfg Config
	return service.Main(Name, &cfg, func(ctx context.Context, d *service.Deps) error {
		return service.Serve(ctx, cfg.Addr, New(cfg, d).Handler(), d.Log)
	})
}

// Serve connects to NATS with cfg's credentials, declares the streams a
// trainer declares, and serves the API on l until ctx ends; then it drains
// the connection, so the last acks reach the server. It closes l.
func Serve(ctx context.Context, cfg Config, l net.Listener, log *slog.Logger) error {
	d, err := service.ConnectNATSOnly(ctx, cfg.Common, Name, log)
	if err != nil {
		_ = l.Close()
		return err
	}
	defer d.Close()
	return service.ServeListener(ctx, l, New(cfg, d).Handler(), log)
}
