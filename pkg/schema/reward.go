package schema

import (
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"sort"
	"time"
	"unicode/utf8"
)

// Bounds of a sample's reward endpoint (Sample.Reward) and of a reward's
// components (ResultHead.RewardComponents).
const (
	// MaxRewardURLBytes bounds reward.url.
	MaxRewardURLBytes = 2048
	// MaxRewardTimeout bounds reward.timeout_ms, one attempt: a judge
	// model's answer takes seconds to minutes, and the trajectory's finish
	// step waits for it.
	MaxRewardTimeout = time.Hour
	// MaxRewardRetries bounds reward.retries, the attempts after the first.
	MaxRewardRetries = 10
	// MaxRewardComponents bounds the named components of a reward (an
	// eval's JSON reward line, a reward endpoint's answer): they travel in
	// the result's head, a NATS message.
	MaxRewardComponents = 64
	// MaxRewardComponentBytes bounds a component's name.
	MaxRewardComponentBytes = 128
)

// RewardEndpoint names a reward endpoint: after the eval, the env-worker
// POSTs the finished trajectory to URL and takes the reward from its
// answer (docs/agent.md, "Reward"). The env-worker calls only a URL its
// deployment allows (ACTLOOP_REWARD_URL, or one starting with a prefix in
// ACTLOOP_REWARD_URLS).
type RewardEndpoint struct {
	// URL is the endpoint; "" means the deployment's ACTLOOP_REWARD_URL.
	URL string `json:"url,omitempty"`
	// TimeoutMS bounds one attempt; 0 means the deployment's
	// ACTLOOP_REWARD_TIMEOUT.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// Retries is the attempts after the first, on a connection error, a
	// 5xx answer or a timeout; absent means the deployment's
	// ACTLOOP_REWARD_RETRIES.
	Retries *int `json:"retries,omitempty"`
}

// Timeout is the time one attempt may take, 0 for the deployment's.
func (r *RewardEndpoint) Timeout() time.Duration { return ms(r.TimeoutMS) }

// validate adds r's problems to p, each naming its field under "reward".
func (r *RewardEndpoint) validate(p *problems) {
	if r == nil {
		return
	}
	if r.URL != "" {
		if err := CheckRewardURL(r.URL); err != nil {
			p.add("reward.url", "%v", err)
		}
	}
	inDuration(p, "reward.timeout_ms", r.TimeoutMS, MaxRewardTimeout)
	if r.Retries != nil {
		inRange(p, "reward.retries", int64(*r.Retries), MaxRewardRetries, "")
	}
}

// CheckRewardURL says what is wrong with u as a reward endpoint's URL: it
// must be an absolute http or https URL with a host, at most
// MaxRewardURLBytes long.
func CheckRewardURL(u string) error {
	switch {
	case len(u) > MaxRewardURLBytes:
		return fmt.Errorf("longer than %d bytes", MaxRewardURLBytes)
	case !utf8.ValidString(u):
		return fmt.Errorf("invalid UTF-8 at byte %d", invalidAt([]byte(u)))
	}
	pu, err := url.Parse(u)
	switch {
	case err != nil:
		return fmt.Errorf("not a URL: %q", clip(u))
	case pu.Scheme != "http" && pu.Scheme != "https":
		return fmt.Errorf("must be an http or https URL, got %q", clip(u))
	case pu.Host == "" || pu.Opaque != "":
		return fmt.Errorf("must name a host (http://host[:port]/path), got %q", clip(u))
	}
	return nil
}

// CheckRewardComponents says what is wrong with a reward's components: at
// most MaxRewardComponents, each named by 1 to MaxRewardComponentBytes
// bytes of UTF-8 and a finite number.
func CheckRewardComponents(c map[string]float64) error {
	if len(c) > MaxRewardComponents {
		return fmt.Errorf("%d components, more than %d", len(c), MaxRewardComponents)
	}
	names := make([]string, 0, len(c))
	for name := range c {
		names = append(names, name)
	}
	sort.Strings(names) // the same error for the same components
	for _, name := range names {
		switch v := c[name]; {
		case name == "" || len(name) > MaxRewardComponentBytes:
			return fmt.Errorf("component name %q is not 1 to %d bytes", clip(name), MaxRewardComponentBytes)
		case !utf8.ValidString(name):
			return fmt.Errorf("component name %q is not valid UTF-8", clip(name))
		case math.IsNaN(v) || math.IsInf(v, 0):
			return fmt.Errorf("component %q is not a finite number", clip(name))
		}
	}
	return nil
}

// MaxRewardEvalOutputBytes bounds RewardEval.Output: the end of the eval's
// output, where a test runner's summary and a JSON reward line are.
const MaxRewardEvalOutputBytes = 16 << 10

// RewardRequest is what the env-worker POSTs to a reward endpoint, as
// JSON, once a trajectory's eval has run (or would have: Eval is nil when
// the sample has no eval command or its eval sandbox could not be set up).
// The endpoint answers 200 with a JSON object holding "reward", a finite
// number, and any other numeric fields, the reward's components
// (docs/agent.md, "Reward"). It may be asked more than once for one
// trajectory (a finish step delivered again): it should answer alike.
type RewardRequest struct {
	V        int    `json:"v"`
	TrajID   string `json:"traj_id"`
	SampleID string `json:"sample_id"`
	GroupID  string `json:"group_id"`
	// Status is how the trajectory ended (StatusSubmitted, …), Reason why
	// in words, with any note on its eval.
	Status   string      `json:"status"`
	Reason   string      `json:"reason"`
	Messages []Message   `json:"messages"`
	Diff     string      `json:"diff"`
	Eval     *RewardEval `json:"eval"`
	// Tests holds each listed test's outcome (PASSED, FAILED, ERROR,
	// SKIPPED, MISSING), for samples that list tests.
	Tests    map[string]string `json:"tests,omitempty"`
	Metadata json.RawMessage   `json:"metadata,omitempty"`
}

// RewardEval is the eval's run, as a RewardRequest holds it.
type RewardEval struct {
	ExitCode int  `json:"exit_code"`
	TimedOut bool `json:"timed_out,omitempty"`
	// Output is the end of the eval's output (stdout and stderr together,
	// as the sandbox kept it), at most MaxRewardEvalOutputBytes.
	Output string `json:"output"`
	// Reward is the eval's own verdict (exit code, listed tests or JSON
	// reward line), Components its JSON reward line's.
	Reward     float64            `json:"reward"`
	Components map[string]float64 `json:"components,omitempty"`
}
