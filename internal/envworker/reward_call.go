package envworker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/schema"
)

// Bounds of a reward endpoint's answer.
const (
	maxRewardAnswerBytes = 1 << 20 // a 200's body
	maxRewardErrorBytes  = 512     // what an error names of another answer's body
	// rewardBackoff is the wait before the second attempt, doubled before
	// each next (up to 32×), each drawn from (0, 2×] its step: pkg/llm's
	// policy for its servers.
	rewardBackoff = 500 * time.Millisecond
)

// rewardCaller asks reward endpoints for rewards.
type rewardCaller struct {
	hc      *http.Client
	backoff time.Duration
}

// newRewardCaller is a rewardCaller whose client follows no redirect: an
// allowed endpoint cannot send the env-worker on to a URL that is not.
func newRewardCaller() *rewardCaller {
	t := http.DefaultTransport.(*http.Transport).Clone()
	return &rewardCaller{backoff: rewardBackoff, hc: &http.Client{Transport: t,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// rewardHTTPError is an answer other than 200.
type rewardHTTPError struct {
	status int
	body   string
}

func (e *rewardHTTPError) Error() string {
	if b := strings.TrimSpace(e.body); b != "" {
		return fmt.Sprintf("http status %d: %s", e.status, b)
	}
	return fmt.Sprintf("http status %d", e.status)
}

// errAttemptTimeout: an attempt got no whole answer within its timeout.
var errAttemptTimeout = errors.New("no answer within the timeout")

// call POSTs body to e.url and decodes the answer (decodeReward),
// trying again, after a back-off, on a connection error, a 5xx answer or
// an attempt's timeout, e.retries times at most; a 4xx (any answer but 200
// and 5xx) or an answer that holds no reward is final. An error of ctx's
// own (the worker stopping) is returned as ctx's, for the caller to hand
// the step back rather than score it.
func (c *rewardCaller) call(ctx context.Context, e endpoint, body []byte) (reward, int, error) {
	attempts := 0
	var last error
	r, err := backoff.Retry(ctx, func() (reward, error) {
		attempts++
		r, err := c.once(ctx, e, body)
		last = err
		if err != nil && (ctx.Err() != nil || !retryable(err)) {
			return reward{}, backoff.Permanent(err)
		}
		return r, err
	}, backoff.WithBackOff(&backoff.ExponentialBackOff{InitialInterval: c.backoff, RandomizationFactor: 1,
		Multiplier: 2, MaxInterval: c.backoff << 5}),
		backoff.WithMaxTries(uint(e.retries)+1), backoff.WithMaxElapsedTime(0))
	switch {
	case err == nil:
		return r, attempts, nil
	case ctx.Err() != nil:
		return reward{}, attempts, ctx.Err()
	case attempts > 1:
		return reward{}, attempts, fmt.Errorf("POST %s: after %d attempts: %w", redacted(e.url), attempts, last)
	}
	return reward{}, attempts, fmt.Errorf("POST %s: %w", redacted(e.url), last)
}

// redacted is u with any password replaced, for errors, logs and spans.
func redacted(u string) string {
	if pu, err := url.Parse(u); err == nil {
		return pu.Redacted()
	}
	return u
}

// retryable reports whether an attempt's err may go away on the next: a
// connection error, a 5xx answer, a timeout.
func retryable(err error) bool {
	var he *rewardHTTPError
	if errors.As(err, &he) {
		return he.status >= 500
	}
	var te *transportError
	return errors.As(err, &te) || errors.Is(err, errAttemptTimeout)
}

// transportError is a failure to exchange a request and an answer.
type transportError struct{ err error }

func (e *transportError) Error() string { return e.err.Error() }
func (e *transportError) Unwrap() error { return e.err }

// decodeError is a 200 whose body holds no reward.
type decodeError struct{ err error }

func (e *decodeError) Error() string { return "answer: " + e.err.Error() }
func (e *decodeError) Unwrap() error { return e.err }

// once is one attempt, within e.timeout.
func (c *rewardCaller) once(ctx context.Context, e endpoint, body []byte) (reward, error) {
	actx, cancel := context.WithTimeoutCause(ctx, e.timeout, errAttemptTimeout)
	defer cancel()
	timedOut := func(err error) error {
		if ctx.Err() == nil && errors.Is(context.Cause(actx), errAttemptTimeout) {
			return fmt.Errorf("%w (%v: ACTLOOP_REWARD_TIMEOUT or the sample's reward.timeout_ms)", errAttemptTimeout, e.timeout)
		}
		return err
	}
	req, err := http.NewRequestWithContext(actx, http.MethodPost, e.url, bytes.NewReader(body))
	if err != nil {
		return reward{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return reward{}, timedOut(&transportError{err})
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxRewardErrorBytes))
		he := &rewardHTTPError{status: resp.StatusCode, body: string(b)}
		if resp.StatusCode/100 == 3 {
			he.body = "redirects are not followed"
		}
		return reward{}, he
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxRewardAnswerBytes+1))
	if err != nil {
		return reward{}, timedOut(&transportError{fmt.Errorf("read answer: %w", err)})
	}
	if len(b) > maxRewardAnswerBytes {
		return reward{}, &decodeError{fmt.Errorf("longer than %d bytes", maxRewardAnswerBytes)}
	}
	r, err := decodeReward(b)
	if err != nil {
		return reward{}, &decodeError{err}
	}
	return r, nil
}

// endpointReward asks t's reward endpoint, if it has one, for the reward
// of the trajectory f finishes, after its eval ev, and sets f's reward from
// its answer: the answer's reward and components, or reward 0, no
// components and the reward_error that says why there is none (a URL
// the deployment does not allow, no answer, an error answer). It returns
// an error only when ctx ends: the step is then handed back.
func (w *Worker) endpointReward(ctx context.Context, t *traj.Trajectory, ev evaluation, f *traj.Finished) error {
	e, ok, err := w.rewardEndpoint(&t.Sample)
	if !ok {
		return nil
	}
	var r reward
	if err == nil {
		s := t.Sample
		req := schema.RewardRequest{V: schema.Version, TrajID: t.ID, SampleID: s.ID, GroupID: s.GroupID,
			Status: t.ResultStatus(), Reason: f.Reason, Messages: t.Messages, Diff: f.Diff, Eval: ev.run, Tests: ev.tests,
			Metadata: s.Metadata}
		if req.Messages == nil {
			req.Messages = []schema.Message{}
		}
		body, merr := json.Marshal(req)
		if merr != nil {
			return fmt.Errorf("reward request: %w", merr)
		}
		r, err = w.askReward(ctx, e, body)
	}
	if err != nil && ctx.Err() != nil {
		return err
	}
	if err != nil {
		w.d.Log.WarnContext(ctx, "no reward from the reward endpoint: reward 0", "traj_id", t.ID, "url", redacted(e.url), "error", err)
		f.Reward, f.RewardComponents, f.RewardError = 0, nil, "reward endpoint: "+err.Error()
		f.Reason = joinNote(f.Reason, "reward 0: the reward endpoint gave none (reward_error)")
		return nil
	}
	f.Reward, f.RewardComponents = r.value, r.components
	return nil
}

// askReward asks e for the reward of the trajectory req describes, in a
// span of its own.
func (w *Worker) askReward(ctx context.Context, e endpoint, body []byte) (reward, error) {
	ctx, span := tracer().Start(ctx, spanReward, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("url.full", redacted(e.url))))
	r, attempts, err := w.rewards.call(ctx, e, body)
	span.SetAttributes(attrAttempts.Int(attempts))
	if err == nil {
		span.SetAttributes(attrReward.Float64(r.value))
	}
	endSpan(span, err)
	return r, err
}
