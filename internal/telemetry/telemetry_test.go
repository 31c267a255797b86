package telemetry

import (
	"bytes"
	"context"
	"encoding/hex"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/actloop/actloop/internal/telemetry/telemetrytest"
	"github.com/actloop/actloop/internal/testkit"
)

// otelVars are every OTEL_* variable the tests set; each test starts with
// them unset, whatever the environment it runs in says.
var otelVars = []string{EnvSDKDisabled, EnvTracesExporter, EnvOTLPEndpoint, EnvOTLPTracesEndpoint, EnvOTLPProtocol,
	EnvOTLPTracesProtocol, EnvTracesSampler, EnvTracesSamplerArg, EnvPropagators, EnvResourceAttributes, EnvServiceName,
	"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"}

// cleanEnv unsets the OTEL_* variables, sets env, and puts the global
// tracer provider and propagator back at the end of t.
func cleanEnv(t *testing.T, env map[string]string) {
	t.Helper()
	for _, k := range otelVars {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	tp, prop := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	t.Cleanup(func() {
		otel.SetTracerProvider(tp)
		otel.SetTextMapPropagator(prop)
	})
}

// A value Setup does not understand stops the start, naming its variable.
func TestSetupRefusesWhatItDoesNotUnderstand(t *testing.T) {
	for _, tt := range []struct{ key, value string }{
		{EnvTracesExporter, "jaeger"},
		{EnvTracesExporter, "otlp,console"},
		{EnvOTLPProtocol, "http/json"},
		{EnvOTLPTracesProtocol, "udp"},
		{EnvTracesSampler, "sometimes"},
		{EnvTracesSamplerArg, "2"}, // with traceidratio below
		{EnvPropagators, "tracecontext,carrier-pigeon"},
		{EnvSDKDisabled, "yes"},
		{EnvResourceAttributes, "deployment.environment.name"}, // no value
	} {
		t.Run(tt.key+"="+tt.value, func(t *testing.T) {
			env := map[string]string{tt.key: tt.value}
			if tt.key == EnvTracesSamplerArg {
				env[EnvTracesSampler] = "traceidratio"
			}
			if tt.key == EnvResourceAttributes {
				env[EnvTracesExporter] = "console" // the resource is built only for an exporter
			}
			cleanEnv(t, env)
			shutdown, err := Setup(context.Background(), "gen-worker", &bytes.Buffer{})
			if err == nil {
				_ = shutdown(context.Background())
				t.Fatalf("Setup with %s=%q: no error", tt.key, tt.value)
			}
			if !strings.Contains(err.Error(), tt.key) {
				t.Fatalf("Setup with %s=%q: %v; want it to name %s", tt.key, tt.value, err, tt.key)
			}
		})
	}
}

// With OTEL_TRACES_EXPORTER unset, spans go over OTLP when an OTLP
// endpoint is set and nowhere otherwise (no provider, no export errors);
// none and OTEL_SDK_DISABLED install none either.
func TestSetupExportsOnlyWhereTold(t *testing.T) {
	rec := telemetrytest.NewReceiver(t)
	for _, tt := range []struct {
		name   string
		env    map[string]string
		export bool
	}{
		{"nothing set", nil, false},
		{"an endpoint", map[string]string{EnvOTLPEndpoint: rec.URL}, true},
		{"a traces endpoint", map[string]string{EnvOTLPTracesEndpoint: rec.URL + "/v1/traces"}, true},
		{"otlp", map[string]string{EnvTracesExporter: "otlp", EnvOTLPEndpoint: rec.URL, EnvOTLPProtocol: "http/protobuf"}, true},
		{"none", map[string]string{EnvTracesExporter: "none", EnvOTLPEndpoint: rec.URL}, false},
		{"disabled", map[string]string{EnvSDKDisabled: "TRUE", EnvOTLPEndpoint: rec.URL}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cleanEnv(t, tt.env)
			shutdown, err := Setup(context.Background(), "coordinator", nil)
			if err != nil {
				t.Fatal(err)
			}
			_, sdk := otel.GetTracerProvider().(*sdktrace.TracerProvider)
			if sdk != tt.export {
				t.Fatalf("an SDK tracer provider installed: %v, want %v", sdk, tt.export)
			}
			if !tt.export {
				return
			}
			before := len(rec.Spans())
			_, span := otel.Tracer("test").Start(context.Background(), tt.name)
			span.End()
			if err := shutdown(context.Background()); err != nil { // flushes
				t.Fatal(err)
			}
			testkit.Eventually(t, time.Minute, "the span at the receiver", func() bool { return len(rec.Spans()) > before })
			if bad := rec.Refused(); len(bad) > 0 {
				t.Fatalf("refused exports: %v", bad)
			}
		})
	}
}

// Every span's resource names the service (OTEL_SERVICE_NAME winning over
// the default), its version and the SDK, plus OTEL_RESOURCE_ATTRIBUTES.
func TestResourceFromTheEnvironment(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  map[string]string
		want map[string]string
	}{
		{"defaults", nil, map[string]string{"service.name": "env-worker", "service.version": Version(),
			"telemetry.sdk.language": "go", "telemetry.sdk.name": "opentelemetry"}},
		{"overridden", map[string]string{EnvServiceName: "rollouts", EnvResourceAttributes: "deployment.environment.name=test,service.version=v9"},
			map[string]string{"service.name": "rollouts", "service.version": "v9", "deployment.environment.name": "test"}},
		{"named in the attributes", map[string]string{EnvResourceAttributes: "service.name=from-attrs"},
			map[string]string{"service.name": "from-attrs", "service.version": Version()}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cleanEnv(t, tt.env)
			res, err := newResource(context.Background(), "env-worker")
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, kv := range res.Attributes() {
				got[string(kv.Key)] = kv.Value.Emit()
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q (resource %v)", k, got[k], v, got)
				}
			}
		})
	}
}

// console writes to the writer Setup is given (actloop dev's log file),
// as JSON carrying the span and its resource.
func TestConsoleWritesToTheWriter(t *testing.T) {
	cleanEnv(t, map[string]string{EnvTracesExporter: "console"})
	var buf bytes.Buffer
	shutdown, err := Setup(context.Background(), "actloop-dev", &buf)
	if err != nil {
		t.Fatal(err)
	}
	_, span := otel.Tracer("test").Start(context.Background(), "console-span")
	span.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); !strings.Contains(out, `"console-span"`) || !strings.Contains(out, "actloop-dev") {
		t.Fatalf("console output %q: want the span and the service", out)
	}
}

// OTEL_PROPAGATORS picks the propagators; unset, W3C trace context and
// baggage.
func TestPropagatorsFromTheEnvironment(t *testing.T) {
	for _, tt := range []struct {
		value string
		want  []string // header fields
	}{
		{"", []string{"baggage", "traceparent", "tracestate"}},
		{"tracecontext", []string{"traceparent", "tracestate"}},
		{" b3 , tracecontext ", []string{"b3", "traceparent", "tracestate"}},
		{"none", nil},
	} {
		t.Run(tt.value, func(t *testing.T) {
			cleanEnv(t, map[string]string{EnvPropagators: tt.value})
			if _, err := Setup(context.Background(), "coordinator", nil); err != nil {
				t.Fatal(err)
			}
			got := fieldsOf(otel.GetTextMapPropagator())
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("OTEL_PROPAGATORS=%q: fields %v, want %v", tt.value, got, tt.want)
			}
		})
	}
}

func fieldsOf(p propagation.TextMapPropagator) []string {
	f := p.Fields()
	out := make([]string, 0, len(f))
	for _, k := range f {
		out = append(out, strings.ToLower(k))
	}
	slices.Sort(out)
	return out
}

func TestVersionOf(t *testing.T) {
	rev := hex.EncodeToString(make([]byte, 20))
	for _, tt := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"a release", debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, "v1.2.3"},
		{"a revision", debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "false"}}}, rev},
		{"a changed checkout", debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev},
			{Key: "vcs.modified", Value: "true"}}}, rev + "+dirty"},
		{"nothing known", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "(devel)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := versionOf(&tt.bi); got != tt.want {
				t.Fatalf("versionOf = %q, want %q", got, tt.want)
			}
		})
	}
}

// A version stamped at link time wins over the toolchain's.
func TestStampedVersionWins(t *testing.T) {
	old := stamped
	t.Cleanup(func() { stamped = old })
	stamped = "v9.9.9"
	if got := Version(); got != "v9.9.9" {
		t.Fatalf("Version() = %q, want the stamped v9.9.9", got)
	}
}
