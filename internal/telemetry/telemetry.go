// Package telemetry sets up OpenTelemetry tracing for a service: an exporter
// chosen by setting (none, stdout or OTLP over HTTP) and the W3C trace-context
// propagator that carries traces across services in NATS headers.
package telemetry

import (
	"context"
	"fmt"
	"io"
	"os"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
)

// Exporters.
const (
	ExporterNone   = "none"
	ExporterStdout = "stdout"
	ExporterOTLP   = "otlp"
)

// Config selects the trace exporter.
type Config struct {
	// Exporter is where trace spans go: none, stdout or otlp. OTLP reads
	// the standard `OTEL_EXPORTER_OTLP_*` variables (endpoint, headers).
	Exporter string `envconfig:"OTEL_EXPORTER" default:"none"`
}

// Validate reports an unknown exporter.
func (c Config) Validate() error {
	switch c.Exporter {
	case ExporterNone, ExporterStdout, ExporterOTLP:
		return nil
	}
	return fmt.Errorf("ACTLOOP_OTEL_EXPORTER: unknown exporter %q (want none, stdout or otlp)", c.Exporter)
}

// Setup installs the global tracer provider and propagator for service and
// returns the function that flushes and stops them. stdout writes to w.
func Setup(ctx context.Context, cfg Config, service string, w io.Writer) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(propagation.TraceContext{})
	var exp sdktrace.SpanExporter
	switch cfg.Exporter {
	case ExporterNone, "":
		return func(context.Context) error { return nil }, nil
	case ExporterStdout:
		if w == nil {
			w = os.Stdout
		}
		exp, err = stdouttrace.New(stdouttrace.WithWriter(w))
	case ExporterOTLP:
		exp, err = otlptracehttp.New(ctx)
	default:
		return nil, cfg.Validate()
	}
	if err != nil {
		return nil, fmt.Errorf("trace exporter %s: %w", cfg.Exporter, err)
	}
	res := resource.NewSchemaless(semconv.ServiceName(service))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}
