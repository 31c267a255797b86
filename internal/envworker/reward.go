package envworker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/actloop/actloop/pkg/schema"
)

// rewardKey is the field of an eval's JSON reward line, and of a reward
// endpoint's answer, that holds the reward.
const rewardKey = "reward"

// reward is a reward and its named components.
type reward struct {
	value      float64
	components map[string]float64
}

// errNoReward: a JSON object without a "reward" field.
var errNoReward = errors.New(`no "reward" field`)

// decodeReward reads a reward from a JSON object: its "reward" field, a
// finite number, and every other field whose value is a number, a
// component. A field given twice counts once, as its last value (as
// encoding/json reads it). Fields of other types are ignored. An object
// without "reward" is errNoReward; a "reward" that is not a finite number,
// a component that is not one (past float64's range), or components past
// schema.CheckRewardComponents's bounds are errors naming the field.
func decodeReward(b []byte) (reward, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return reward{}, fmt.Errorf("not a JSON object: %w", err)
	}
	if fields == nil {
		return reward{}, errors.New("not a JSON object: null")
	}
	raw, ok := fields[rewardKey]
	if !ok {
		return reward{}, errNoReward
	}
	v, isNum, err := jsonNumber(raw)
	switch {
	case !isNum:
		return reward{}, fmt.Errorf(`field "reward" is not a number: %s`, clipBytes(raw))
	case err != nil:
		return reward{}, fmt.Errorf(`field "reward" is not a finite number: %s`, clipBytes(raw))
	}
	r := reward{value: v}
	for name, raw := range fields {
		if name == rewardKey {
			continue
		}
		v, isNum, err := jsonNumber(raw)
		switch {
		case !isNum:
			continue
		case err != nil:
			return reward{}, fmt.Errorf("field %q is not a finite number: %s", clip(name), clipBytes(raw))
		}
		if r.components == nil {
			r.components = map[string]float64{}
		}
		r.components[name] = v
	}
	if err := schema.CheckRewardComponents(r.components); err != nil {
		return reward{}, err
	}
	return r, nil
}

// jsonNumber reads raw, one JSON value, as a float64: isNum says whether
// it is a number at all, err whether that number is past float64's range.
func jsonNumber(raw json.RawMessage) (v float64, isNum bool, err error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
		return 0, false, nil
	}
	// A JSON number is a Go float literal; one past the range reads as ±Inf
	// with ErrRange.
	v, err = strconv.ParseFloat(string(raw), 64)
	if err == nil && (math.IsInf(v, 0) || math.IsNaN(v)) {
		err = errors.New("not finite")
	}
	return v, true, err
}

// evalRewardLine finds the eval's JSON reward line in output: the last
// line that, with the white space around it trimmed, is a JSON object
// with a "reward" field. ok is false when there is none; err says why the
// line found gives no reward (decodeReward), and then no earlier line is
// read instead.
func evalRewardLine(output string) (r reward, ok bool, err error) {
	for rest := output; rest != ""; {
		i := strings.LastIndexByte(rest, '\n')
		line := strings.TrimSpace(rest[i+1:])
		rest = rest[:max(i, 0)]
		if !strings.HasPrefix(line, "{") || !strings.HasSuffix(line, "}") {
			continue
		}
		r, err := decodeReward([]byte(line))
		if errors.Is(err, errNoReward) || (err != nil && !json.Valid([]byte(line))) {
			continue
		}
		return r, true, err
	}
	return reward{}, false, nil
}

// checkRewardPrefix says what is wrong with p as a prefix of
// ACTLOOP_REWARD_URLS: it must be an http or https URL that names its host
// and ends the host with "/", so that no other host's URL starts with it.
func checkRewardPrefix(p string) error {
	if err := schema.CheckRewardURL(p); err != nil {
		return fmt.Errorf("%q: %w", p, err)
	}
	u, _ := url.Parse(p)
	scheme, rest, _ := strings.Cut(p, "://")
	if !strings.EqualFold(scheme, u.Scheme) || !strings.HasPrefix(rest, u.Host+"/") {
		return fmt.Errorf("%q must be written scheme://host[:port]/…, the host followed by \"/\" "+
			"(without it, http://judge would allow http://judge.evil.example)", p)
	}
	return nil
}

// endpoint is where and how to ask for a trajectory's reward.
type endpoint struct {
	url     string
	timeout time.Duration
	retries int
}

// rewardEndpoint is the reward endpoint of sample s: its reward.url, or
// the deployment's ACTLOOP_REWARD_URL, with its timeout and retries or the
// deployment's. ok is false when neither names one; err says why a sample's
// URL may not be called (not allowed by ACTLOOP_REWARD_URLS).
func (w *Worker) rewardEndpoint(s *schema.Sample) (e endpoint, ok bool, err error) {
	c := w.cfg
	e = endpoint{url: c.RewardURL, timeout: c.RewardTimeout, retries: c.RewardRetries}
	r := s.Reward
	if r == nil {
		return e, e.url != "", nil
	}
	if r.TimeoutMS > 0 {
		e.timeout = r.Timeout()
	}
	if r.Retries != nil {
		e.retries = *r.Retries
	}
	switch {
	case r.URL == "" && e.url == "":
		return e, true, errors.New("the sample's reward names no url, and ACTLOOP_REWARD_URL is not set")
	case r.URL == "" || r.URL == c.RewardURL:
		return e, true, nil
	case len(c.RewardURLs) == 0:
		return e, true, fmt.Errorf("reward.url %q is not allowed: ACTLOOP_REWARD_URLS is empty, so a sample may name "+
			"no reward url but ACTLOOP_REWARD_URL", clip(r.URL))
	}
	for _, p := range c.RewardURLs {
		if strings.HasPrefix(r.URL, p) {
			e.url = r.URL
			return e, true, nil
		}
	}
	return e, true, fmt.Errorf("reward.url %q is not allowed: it is not ACTLOOP_REWARD_URL and starts with no prefix "+
		"in ACTLOOP_REWARD_URLS", clip(r.URL))
}

// tail is the end of s, at most n bytes, starting at a character.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	for i := 0; i < utf8.UTFMax && i < len(s); i++ {
		if utf8.RuneStart(s[i]) {
			return s[i:]
		}
	}
	return s
}

// clip is s, or its first 64 bytes and "…".
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

func clipBytes(b []byte) string { return clip(string(b)) }
