// Package telemetry sets up OpenTelemetry tracing for a service from the
// standard OTEL_* environment variables (the OpenTelemetry specification's
// "Environment Variable Specification"): the span exporter
// (go.opentelemetry.io/contrib/exporters/autoexport), the resource, the
// sampler and the propagators (go.opentelemetry.io/contrib/propagators/autoprop)
// that carry traces across services in NATS headers.
//
// One departure from the specification's defaults: with OTEL_TRACES_EXPORTER
// unset, spans go over OTLP only when an OTLP endpoint is set
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), and
// nowhere otherwise, so a service without a collector does not log export
// errors. OTEL_TRACES_EXPORTER=otlp exports to the default endpoint
// (localhost:4318) as the specification says.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/contrib/propagators/autoprop"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// The standard variables that Setup checks or reads itself. autoexport,
// the OTLP exporters, the resource detector and the SDK read them too,
// and the rest (OTEL_EXPORTER_OTLP_HEADERS and the other
// OTEL_EXPORTER_OTLP_* settings, OTEL_BSP_*).
const (
	EnvSDKDisabled        = "OTEL_SDK_DISABLED"
	EnvTracesExporter     = "OTEL_TRACES_EXPORTER"
	EnvOTLPEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvOTLPTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvOTLPProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvOTLPTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	EnvTracesSampler      = "OTEL_TRACES_SAMPLER"
	EnvTracesSamplerArg   = "OTEL_TRACES_SAMPLER_ARG"
	EnvPropagators        = "OTEL_PROPAGATORS"
	EnvResourceAttributes = "OTEL_RESOURCE_ATTRIBUTES"
	EnvServiceName        = "OTEL_SERVICE_NAME"
)

// Values of the variables.
const (
	exporterOTLP           = "otlp"
	exporterConsole        = "console"
	exporterNone           = "none"
	protocolGRPC           = "grpc"
	protocolHTTPProtobuf   = "http/protobuf"
	samplerTraceIDRatio    = "traceidratio"
	samplerParentBasedRate = "parentbased_traceidratio"
)

// Setup installs the global propagator and tracer provider of service as
// the OTEL_* variables say, and returns the function that flushes and stops
// them. service is the default service.name (OTEL_SERVICE_NAME and a
// service.name in OTEL_RESOURCE_ATTRIBUTES win); every span's resource
// carries service.version (Version) and the SDK's telemetry.sdk.*
// attributes. OTEL_TRACES_EXPORTER=console writes spans to w (os.Stdout
// when nil). A value Setup does not understand is an error that names its
// variable.
//
// With no exporter (OTEL_TRACES_EXPORTER=none, OTEL_SDK_DISABLED=true, or
// neither it nor an OTLP endpoint set) no tracer provider is installed:
// spans cost nothing, and a trace context that arrives (a trainer's) still
// passes through.
func Setup(ctx context.Context, service string, w io.Writer) (shutdown func(context.Context) error, err error) {
	noop := func(context.Context) error { return nil }
	if err := checkEnv(); err != nil {
		return nil, err
	}
	prop, err := propagators()
	if err != nil {
		return nil, err
	}
	otel.SetTextMapPropagator(prop)
	if disabled() {
		return noop, nil
	}
	exp, err := exporter(ctx, w)
	if err != nil || exp == nil {
		return noop, err
	}
	res, err := newResource(ctx, service)
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, err
	}
	// The SDK reads OTEL_TRACES_SAMPLER(_ARG) and OTEL_BSP_* itself.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}

// checkEnv reports the OTEL_* values Setup does not understand, each
// naming its variable.
func checkEnv() error {
	var errs []error
	switch v := strings.ToLower(strings.TrimSpace(os.Getenv(EnvSDKDisabled))); v {
	case "", "true", "false":
	default:
		errs = append(errs, fmt.Errorf("%s: %q: want true or false", EnvSDKDisabled, v))
	}
	switch v := strings.TrimSpace(os.Getenv(EnvTracesExporter)); v {
	case "", exporterOTLP, exporterConsole, exporterNone:
	default:
		errs = append(errs, fmt.Errorf("%s: %q: want otlp, console or none", EnvTracesExporter, v))
	}
	for _, k := range []string{EnvOTLPProtocol, EnvOTLPTracesProtocol} {
		switch v := os.Getenv(k); v {
		case "", protocolGRPC, protocolHTTPProtobuf:
		default:
			errs = append(errs, fmt.Errorf("%s: %q: want grpc or http/protobuf", k, v))
		}
	}
	sampler := strings.ToLower(strings.TrimSpace(os.Getenv(EnvTracesSampler)))
	switch sampler {
	case "", "always_on", "always_off", "parentbased_always_on", "parentbased_always_off", samplerTraceIDRatio, samplerParentBasedRate:
	default:
		errs = append(errs, fmt.Errorf("%s: %q: want always_on, always_off, traceidratio, parentbased_always_on, "+
			"parentbased_always_off or parentbased_traceidratio", EnvTracesSampler, sampler))
	}
	if arg := strings.TrimSpace(os.Getenv(EnvTracesSamplerArg)); arg != "" && (sampler == samplerTraceIDRatio || sampler == samplerParentBasedRate) {
		if r, err := strconv.ParseFloat(arg, 64); err != nil || r < 0 || r > 1 {
			errs = append(errs, fmt.Errorf("%s: %q: want a ratio in [0, 1]", EnvTracesSamplerArg, arg))
		}
	}
	if _, err := propagators(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// disabled reports OTEL_SDK_DISABLED=true.
func disabled() bool {
	return strings.EqualFold(strings.TrimSpace(os.Getenv(EnvSDKDisabled)), "true")
}

// propagators is what OTEL_PROPAGATORS names, comma-separated (blanks
// around names allowed), or by default W3C trace context and baggage.
func propagators() (propagation.TextMapPropagator, error) {
	v := os.Getenv(EnvPropagators)
	if strings.TrimSpace(v) == "" {
		return autoprop.NewTextMapPropagator(), nil
	}
	var names []string
	for _, n := range strings.Split(v, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	p, err := autoprop.TextMapPropagator(names...)
	if err != nil {
		return nil, fmt.Errorf("%s: %q: %w (known: tracecontext, baggage, b3, b3multi, jaeger, xray, ottrace, none)",
			EnvPropagators, v, err)
	}
	return p, nil
}

// exporter returns the span exporter OTEL_TRACES_EXPORTER names, or nil for
// none. console is the SDK's stdout exporter writing to w; the others are
// autoexport's, whose fallback (OTEL_TRACES_EXPORTER unset) is OTLP when
// an OTLP endpoint is set and none otherwise.
func exporter(ctx context.Context, w io.Writer) (sdktrace.SpanExporter, error) {
	name := strings.TrimSpace(os.Getenv(EnvTracesExporter))
	if name == exporterConsole {
		if w == nil {
			w = os.Stdout
		}
		return stdouttrace.New(stdouttrace.WithWriter(w))
	}
	exp, err := autoexport.NewSpanExporter(ctx, autoexport.WithFallbackSpanExporter(
		func(ctx context.Context) (sdktrace.SpanExporter, error) {
			if os.Getenv(EnvOTLPEndpoint) == "" && os.Getenv(EnvOTLPTracesEndpoint) == "" {
				return noExporter{}, nil
			}
			return otlpExporter(ctx)
		}))
	if err != nil {
		return nil, fmt.Errorf("trace exporter (%s=%q): %w", EnvTracesExporter, name, err)
	}
	if _, off := exp.(noExporter); off || autoexport.IsNoneSpanExporter(exp) {
		return nil, nil
	}
	return exp, nil
}

// otlpExporter is the OTLP exporter over the protocol
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL names
// (default http/protobuf), as autoexport builds it for
// OTEL_TRACES_EXPORTER=otlp; the exporter reads its endpoint, headers,
// timeout and TLS settings from the environment.
func otlpExporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	proto := os.Getenv(EnvOTLPTracesProtocol)
	if proto == "" {
		proto = os.Getenv(EnvOTLPProtocol)
	}
	if proto == protocolGRPC {
		return otlptracegrpc.New(ctx)
	}
	return otlptracehttp.New(ctx)
}

// noExporter stands for no exporter: Setup then installs no provider.
type noExporter struct{}

func (noExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (noExporter) Shutdown(context.Context) error                             { return nil }

// newResource is service's resource: service.name and service.version,
// telemetry.sdk.*, and host.name, then what OTEL_RESOURCE_ATTRIBUTES and
// OTEL_SERVICE_NAME say, which win.
func newResource(ctx context.Context, service string) (*resource.Resource, error) {
	res, err := resource.New(ctx,
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithAttributes(semconv.ServiceName(service), semconv.ServiceVersion(Version())),
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithFromEnv(), // last: it wins
	)
	if err != nil {
		return nil, fmt.Errorf("resource (%s, %s): %w", EnvResourceAttributes, EnvServiceName, err)
	}
	return res, nil
}
