package envworker

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/actloop/actloop/pkg/sandbox"
	"github.com/actloop/actloop/pkg/schema"
)

// Span names of the sandbox operations, each a child of the env step's
// span (an eval's start and command are children of its eval span).
const (
	spanStart = "sandbox.start" // create a sandbox and run its setup, retries included
	spanExec  = "sandbox.exec"  // run one command: an action, a replayed one, the eval
	spanEval  = "sandbox.eval"  // score a diff: a fresh sandbox, the eval command, the verdict
	// spanReward: ask the reward endpoint for a trajectory's reward, retries included.
	spanReward = "reward.endpoint"
)

// Attributes of the sandbox spans.
const (
	attrBackend   = attribute.Key("sandbox.backend")    // sim, local or docker
	attrID        = attribute.Key("sandbox.id")         // the name it was started under
	attrAttempts  = attribute.Key("sandbox.attempts")   // creations tried
	attrImage     = attribute.Key("sandbox.image")      // docker's image, when the sample names one
	attrTimeoutMS = attribute.Key("sandbox.timeout_ms") // the command's timeout (0: none)
	attrTimedOut  = attribute.Key("sandbox.timed_out")
	attrTruncated = attribute.Key("sandbox.truncated") // the output lost bytes in the middle
	attrLimit     = attribute.Key("sandbox.limit")     // the resource limit that stopped the command
	attrReplay    = attribute.Key("sandbox.replay")    // a command run again to rebuild a lost sandbox
	attrReward    = attribute.Key("actloop.reward")
	attrNote      = attribute.Key("actloop.eval.note") // why a 0 is not the eval's verdict
)

// tracer is looked up per use so that a tracer provider installed after
// start-up (or replaced in tests) takes effect.
func tracer() trace.Tracer { return otel.Tracer("github.com/actloop/actloop/internal/envworker") }

// backendName names b as the sandbox spans do.
func (w *Worker) backendName(b sandbox.Backend) string {
	if b == w.backends[schema.BackendSim] {
		return schema.BackendSim
	}
	return w.cfg.SandboxBackend
}

// endSpan ends span, recording err.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// exec runs cmd in sb under a sandbox.exec span.
func (w *Worker) exec(ctx context.Context, b sandbox.Backend, sb sandbox.Sandbox, cmd string, timeout time.Duration,
	attrs ...attribute.KeyValue) (sandbox.ExecResult, error) {
	ctx, span := tracer().Start(ctx, spanExec, trace.WithAttributes(append(attrs, attrBackend.String(w.backendName(b)),
		attrTimeoutMS.Int64(timeout.Milliseconds()))...))
	res, err := sb.Exec(ctx, cmd, timeout)
	if err == nil {
		span.SetAttributes(semconv.ProcessExitCode(res.ReturnCode), attrTimedOut.Bool(res.TimedOut),
			attrTruncated.Bool(res.Truncated))
		if res.Limit != "" {
			span.SetAttributes(attrLimit.String(res.Limit))
		}
	}
	endSpan(span, err)
	return res, err
}
