package priority

import "math"

// Pace turns a prediction of remaining work (tokens to decode, model calls
// to make) into remaining time, so that policies rank by time rather than
// tokens: a trajectory with few tokens left but many commands and a long
// eval to go is long, and one on a replica that decodes slowly is longer.
// The coordinator and the virtual engine keep one each, from what they
// observe; Seconds is a pure function of it.
type Pace struct {
	// TokenS is, per replica, the seconds a request's next decoded token
	// takes at the replica's current load (its gen-workers' measure:
	// generation time over output tokens); DefaultTokenS where a replica
	// has none yet.
	TokenS        map[string]float64
	DefaultTokenS float64
	// TurnS is the time a model call's turn spends outside generation, its
	// command and its share of the sandbox start-up and the eval, learnt
	// from finished trajectories (ObserveFinished); 0 until one finished.
	TurnS float64
	turnN float64
}

// Default pace values before any measure: 30 ms a token (about an 8B
// model's decode at a moderate batch), nothing outside generation.
const DefaultTokenS = 0.03

// tokenS is replica's seconds per token.
func (p *Pace) tokenS(replica string) float64 {
	if s, ok := p.TokenS[replica]; ok && s > 0 {
		return s
	}
	if p.DefaultTokenS > 0 {
		return p.DefaultTokenS
	}
	return DefaultTokenS
}

// Seconds is the predicted remaining time of a trajectory on replica with
// remTokens tokens and remTurns model calls to go: the tokens at the
// replica's pace and each turn's time outside generation. Unknown (not
// positive) remaining tokens give 0, which policies treat as unknown.
func (p *Pace) Seconds(replica string, remTokens, remTurns float64) float64 {
	if !(remTokens > 0) || math.IsInf(remTokens, 1) {
		return 0
	}
	return remTokens*p.tokenS(replica) + max(remTurns, 0)*p.TurnS
}

// ObserveFinished learns TurnS from a finished trajectory that took
// seconds in all on replica over turns model calls generating tokens: its
// time less its generation at the replica's pace, per call; a running mean
// over the newest paceWindow or so.
func (p *Pace) ObserveFinished(replica string, seconds float64, tokens, turns int) {
	if turns < 1 || !(seconds > 0) {
		return
	}
	per := max(seconds-float64(tokens)*p.tokenS(replica), 0) / float64(turns)
	p.turnN = min(p.turnN+1, paceWindow)
	p.TurnS += (per - p.TurnS) / p.turnN
}

// SetTokenS records replica's measured seconds per token (ignored unless
// positive and finite).
func (p *Pace) SetTokenS(replica string, s float64) {
	if !(s > 0) || math.IsInf(s, 1) {
		return
	}
	if p.TokenS == nil {
		p.TokenS = map[string]float64{}
	}
	p.TokenS[replica] = s
}

// What policies rank by (ACTLOOP_RANK_BY).
const (
	RankByTime   = "time"   // Pace.Seconds of the prediction
	RankByTokens = "tokens" // the predicted remaining tokens
)

// NextTokenS folds a generation that took seconds for tokens output
// tokens into a measure of seconds per token: an exponentially weighted
// mean (weight tokenSWeight), the first one whole; a generation of no
// tokens changes nothing.
func NextTokenS(prev, seconds float64, tokens int) float64 {
	if tokens < 1 || !(seconds >= 0) {
		return prev
	}
	s := seconds / float64(tokens)
	if prev <= 0 {
		return s
	}
	return prev + tokenSWeight*(s-prev)
}

// tokenSWeight is the weight of each new generation in NextTokenS.
const tokenSWeight = 0.05

// paceWindow is about how many finished trajectories TurnS averages.
const paceWindow = 256
