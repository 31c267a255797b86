package llm

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"
)

// SGLangOptions configure an SGLang client. Zero values take the defaults.
type SGLangOptions struct {
	// HTTPClient sends the requests; nil means a new client over a clone
	// of http.DefaultTransport keeping up to 1024 idle connections. Deadlines come from the context, so the
	// client's own Timeout should stay 0.
	HTTPClient *http.Client
	// Timeout bounds a Generate call, retries included, whose context has no
	// deadline. Default 10m.
	Timeout time.Duration
	// Retries is how many times a transient failure (connection error, 5xx)
	// is retried. Default 3; negative means none.
	Retries int
	// Backoff is the base delay between retries: attempt n waits a uniformly
	// random time in [0, Backoff·2ⁿ) ("full jitter"), at most 32·Backoff.
	// Default 200ms.
	Backoff time.Duration
}

// Defaults of SGLangOptions.
const (
	DefaultTimeout = 10 * time.Minute
	DefaultRetries = 3
	DefaultBackoff = 200 * time.Millisecond
	// controlTimeout bounds Abort and Health calls whose context has no
	// deadline.
	controlTimeout = 30 * time.Second
	// maxIdleConns is how many idle connections the default client keeps.
	maxIdleConns = 1024
	// maxResponse bounds a response body.
	maxResponse = 256 << 20
)

// SGLang is a client of SGLang's native HTTP API (/generate, /abort_request,
// /pause_generation, /continue_generation, /update_weight_version,
// /health). It is safe for concurrent use.
type SGLang struct {
	httpCore
	capacity atomic.Int64 // max_total_num_tokens from /get_server_info, once read
}

var (
	_ Generator     = (*SGLang)(nil)
	_ PrefixAborter = (*SGLang)(nil)
	_ VersionSetter = (*SGLang)(nil)
	_ HealthChecker = (*SGLang)(nil)
)

// NewSGLang returns a client of the SGLang server at baseURL
// (e.g. "http://10.0.0.5:30000").
func NewSGLang(baseURL string, opts SGLangOptions) *SGLang {
	return &SGLang{httpCore: newHTTPCore(baseURL, opts.HTTPClient, opts.Timeout, opts.Retries, opts.Backoff)}
}

// Generate implements Generator with POST /generate (non-streamed, with
// log-probs). It retries transient failures under the same rid.
func (c *SGLang) Generate(ctx context.Context, req Request) (Result, error) {
	if err := req.Validate(); err != nil {
		return Result{}, err
	}
	body, err := encodeGenerateRequest(req)
	if err != nil {
		return Result{}, fmt.Errorf("generate %s: encode: %w", req.RID, err)
	}
	ctx, cancel := withDefaultTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.call(ctx, http.MethodPost, "/generate", body)
	if err != nil {
		return Result{}, fmt.Errorf("generate %s: %w", req.RID, err)
	}
	res, id, err := decodeGenerate(resp)
	if err != nil {
		return Result{}, fmt.Errorf("generate %s: %w", req.RID, err)
	}
	if id != "" && id != req.RID {
		return Result{}, fmt.Errorf("generate %s: %w", req.RID, badResponse("meta_info.id: %q is not the request's rid", id))
	}
	return res, nil
}

// Abort implements Generator with POST /abort_request {"rid": rid}. SGLang
// aborts every request whose rid starts with rid, so rid must be a full,
// valid request id (an empty one would match everything).
func (c *SGLang) Abort(ctx context.Context, rid string) error {
	if !ValidRID(rid) {
		return fmt.Errorf("abort: %w: rid %q is not 32 lower-case hex digits", ErrInvalidRequest, rid)
	}
	body, err := json.Marshal(abortRequest{RID: rid})
	if err != nil {
		return fmt.Errorf("abort %s: encode: %w", rid, err)
	}
	ctx, cancel := withDefaultTimeout(ctx, controlTimeout)
	defer cancel()
	if _, err := c.call(ctx, http.MethodPost, "/abort_request", body); err != nil {
		return fmt.Errorf("abort %s: %w", rid, err)
	}
	return nil
}

// AbortPrefix implements PrefixAborter with POST /abort_request {"rid":
// prefix}: SGLang aborts every request whose rid starts with it.
func (c *SGLang) AbortPrefix(ctx context.Context, prefix string) error {
	if len(prefix) != RIDPrefixLen || !isHex(prefix) {
		return fmt.Errorf("abort prefix: %w: %q is not %d lower-case hex digits", ErrInvalidRequest, prefix, RIDPrefixLen)
	}
	body, err := json.Marshal(abortRequest{RID: prefix})
	if err != nil {
		return fmt.Errorf("abort prefix %s: encode: %w", prefix, err)
	}
	ctx, cancel := withDefaultTimeout(ctx, controlTimeout)
	defer cancel()
	if _, err := c.call(ctx, http.MethodPost, "/abort_request", body); err != nil {
		return fmt.Errorf("abort prefix %s: %w", prefix, err)
	}
	return nil
}

// SetWeightVersion implements VersionSetter with POST
// /update_weight_version, passing abort_all_requests false: the endpoint
// aborts every in-flight request by default.
func (c *SGLang) SetWeightVersion(ctx context.Context, version string) error {
	body, err := json.Marshal(updateWeightVersionRequest{NewVersion: version, AbortAllRequests: false})
	if err != nil {
		return fmt.Errorf("update weight version: encode: %w", err)
	}
	ctx, cancel := withDefaultTimeout(ctx, controlTimeout)
	defer cancel()
	if _, err := c.call(ctx, http.MethodPost, "/update_weight_version", body); err != nil {
		return fmt.Errorf("update weight version to %s: %w", version, err)
	}
	return nil
}

// Health checks GET /health once (no retries): nil means the server answered
// 200.
func (c *SGLang) Health(ctx context.Context) error { return c.health(ctx) }

// Pause modes of PauseGeneration (PauseGenerationReqInput.mode in
// python/sglang/srt/managers/io_struct.py).
const (
	// PauseModeAbort aborts every request in flight; each answers with
	// finish_reason abort and its partial output.
	PauseModeAbort = "abort"
	// PauseModeRetract sends running requests back to the waiting queue;
	// their KV cache is dropped and recomputed after ContinueGeneration.
	PauseModeRetract = "retract"
	// PauseModeInPlace holds requests where they are, KV cache kept.
	PauseModeInPlace = "in_place"
)

// PauseGeneration pauses the server's scheduler with POST /pause_generation
// {"mode": mode} (PauseModeAbort, PauseModeRetract or PauseModeInPlace). In
// abort mode SGLang answers once the aborted requests have.
func (c *SGLang) PauseGeneration(ctx context.Context, mode string) error {
	switch mode {
	case PauseModeAbort, PauseModeRetract, PauseModeInPlace:
	default:
		return fmt.Errorf("pause generation: %w: mode %q is not abort, retract or in_place", ErrInvalidRequest, mode)
	}
	body, err := json.Marshal(pauseGenerationRequest{Mode: mode})
	if err != nil {
		return fmt.Errorf("pause generation: encode: %w", err)
	}
	ctx, cancel := withDefaultTimeout(ctx, controlTimeout)
	defer cancel()
	if _, err := c.call(ctx, http.MethodPost, "/pause_generation", body); err != nil {
		return fmt.Errorf("pause generation (%s): %w", mode, err)
	}
	return nil
}

// ContinueGeneration resumes a paused scheduler with POST
// /continue_generation and an empty JSON object (ContinueGenerationReqInput's
// fields all have defaults; older servers read no body).
func (c *SGLang) ContinueGeneration(ctx context.Context) error {
	ctx, cancel := withDefaultTimeout(ctx, controlTimeout)
	defer cancel()
	if _, err := c.call(ctx, http.MethodPost, "/continue_generation", []byte("{}")); err != nil {
		return fmt.Errorf("continue generation: %w", err)
	}
	return nil
}
