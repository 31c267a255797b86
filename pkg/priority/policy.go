package priority

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// DefaultAgeLimit is the AgeLimit of ByName.
const DefaultAgeLimit = 2 * time.Minute

// Names of the policies New knows, in the order its error lists them.
const (
	NameFCFS = "fcfs"
	NameLPT  = "lpt"
	NameSJF  = "sjf"
)

// Names lists the valid policy names.
func Names() []string { return []string{NameFCFS, NameLPT, NameSJF} }

// ErrUnknownPolicy is wrapped by New's error for a name it does not know.
var ErrUnknownPolicy = errors.New("unknown policy")

// Fact is what a policy knows of one trajectory: an active one, or a waiting
// sample when ranking admission.
type Fact struct {
	TrajID  string
	Replica string // "" for a waiting sample: it is in no Snapshot
	GroupID string
	Family  string
	// AdmittedAt is when the trajectory was admitted; for a waiting sample,
	// when it arrived.
	AdmittedAt time.Time
	Turns      int // model calls so far
	Tokens     int // generated tokens so far
	// Predicted is the predicted remaining work the policies rank by: tokens
	// as predicted, or seconds (Pace.Seconds); 0 (or negative, NaN, Inf) =
	// unknown.
	Predicted float64
	// RemainingTurns is the predicted model calls to go (0: none or
	// unknown), for Pace.Seconds.
	RemainingTurns float64
	// WaitingSince is when it last started waiting for a generation (or, for
	// a waiting sample, for admission). The zero time means not waiting: such
	// a fact never ages.
	WaitingSince time.Time
}

// Config tunes every policy.
type Config struct {
	// AgeLimit bounds waiting: a trajectory that has waited at least AgeLimit
	// (now - WaitingSince) ranks ahead of every trajectory that has waited
	// less, oldest wait first, whatever the policy says. 0 = no ageing (only
	// for tests). For admission, AdmissionOrder passes the newest arrival as
	// now.
	AgeLimit time.Duration
}

// Validate reports a negative AgeLimit.
func (c Config) Validate() error {
	if c.AgeLimit < 0 {
		return fmt.Errorf("age limit: must be >= 0, got %v", c.AgeLimit)
	}
	return nil
}

// Policy orders trajectories, most urgent first.
type Policy interface {
	Name() string
	// Rank returns a new slice holding facts, most urgent first. The order
	// is total and depends only on facts and now.
	Rank(facts []Fact, now time.Time) []Fact
	// Order is Rank as indices into facts, which it leaves as they are:
	// facts[Order(facts, now)[0]] is the most urgent.
	Order(facts []Fact, now time.Time) []int
}

// New returns the policy called name ("" means fcfs) with cfg.
func New(name string, cfg Config) (Policy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	switch name {
	case NameFCFS, "":
		return FCFS{Config: cfg}, nil
	case NameLPT:
		return LPT{Config: cfg}, nil
	case NameSJF:
		return SJF{Config: cfg}, nil
	}
	return nil, fmt.Errorf("%w %q (valid: %v)", ErrUnknownPolicy, name, Names())
}

// ByName is New(name, Config{AgeLimit: DefaultAgeLimit}).
func ByName(name string) (Policy, error) {
	return New(name, Config{AgeLimit: DefaultAgeLimit})
}

// FCFS ranks by admission order.
type FCFS struct{ Config }

// Name implements Policy.
func (FCFS) Name() string { return NameFCFS }

// Rank implements Policy.
func (p FCFS) Rank(facts []Fact, now time.Time) []Fact { return gather(facts, p.Order(facts, now)) }

// Order implements Policy.
func (p FCFS) Order(facts []Fact, now time.Time) []int {
	return rank(facts, now, p.AgeLimit, nil)
}

// LPT ranks the longest predicted remaining work first.
type LPT struct{ Config }

// Name implements Policy.
func (LPT) Name() string { return NameLPT }

// Rank implements Policy.
func (p LPT) Rank(facts []Fact, now time.Time) []Fact { return gather(facts, p.Order(facts, now)) }

// Order implements Policy.
func (p LPT) Order(facts []Fact, now time.Time) []int {
	return rank(facts, now, p.AgeLimit, func(a, b *ranked) int { return cmp.Compare(b.pred, a.pred) })
}

// SJF ranks the shortest predicted remaining work first.
type SJF struct{ Config }

// Name implements Policy.
func (SJF) Name() string { return NameSJF }

// Rank implements Policy.
func (p SJF) Rank(facts []Fact, now time.Time) []Fact { return gather(facts, p.Order(facts, now)) }

// Order implements Policy.
func (p SJF) Order(facts []Fact, now time.Time) []int {
	return rank(facts, now, p.AgeLimit, func(a, b *ranked) int { return cmp.Compare(a.pred, b.pred) })
}

var (
	_ Policy = FCFS{}
	_ Policy = LPT{}
	_ Policy = SJF{}
)

// ranked is a fact's sort keys, computed once.
type ranked struct {
	aged     bool
	pred     float64 // effective prediction
	waiting  int64   // WaitingSince, Unix ns
	admitted int64   // AdmittedAt, Unix ns
	id       string
}

// rank orders facts: aged ones first, longest wait first; the rest by
// prefer (nil: no preference); ties by AdmittedAt, then TrajID, then input position (so even
// facts with the same id come out in one order). It returns indices into
// facts.
func rank(facts []Fact, now time.Time, ageLimit time.Duration, prefer func(a, b *ranked) int) []int {
	median := 0.0
	if prefer != nil { // a policy that reads predictions
		median = medianKnown(facts)
	}
	rs := make([]ranked, len(facts))
	for i := range facts {
		f := &facts[i]
		rs[i] = ranked{aged: Aged(*f, now, ageLimit), pred: effective(f.Predicted, median),
			waiting: f.WaitingSince.UnixNano(), admitted: f.AdmittedAt.UnixNano(), id: f.TrajID}
	}
	order := make([]int, len(rs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(i, j int) int {
		a, b := &rs[i], &rs[j]
		switch {
		case a.aged && !b.aged:
			return -1
		case !a.aged && b.aged:
			return 1
		case a.aged:
			if c := cmp.Compare(a.waiting, b.waiting); c != 0 {
				return c
			}
		case prefer != nil:
			if c := prefer(a, b); c != 0 {
				return c
			}
		}
		if c := cmp.Compare(a.admitted, b.admitted); c != 0 {
			return c
		}
		if c := cmp.Compare(a.id, b.id); c != 0 {
			return c
		}
		return cmp.Compare(i, j)
	})
	return order
}

// AdmissionOrder is p's order of waiting samples for admission: p.Order
// over facts whose WaitingSince is when each sample arrived, at the newest
// of those arrivals rather than the clock. A sample thus ages once a
// sample arrived AgeLimit or more after it, and is never passed over by
// one that arrived that much later; a batch that arrived together keeps
// p's order however long it waits (by the clock, the whole batch would age
// together and fall back to admission order, then TrajID).
func AdmissionOrder(p Policy, facts []Fact) []int {
	var newest time.Time
	for _, f := range facts {
		if f.WaitingSince.After(newest) {
			newest = f.WaitingSince
		}
	}
	return p.Order(facts, newest)
}

// gather is facts in order.
func gather(facts []Fact, order []int) []Fact {
	out := make([]Fact, len(order))
	for k, i := range order {
		out[k] = facts[i]
	}
	return out
}

// Aged reports whether f has waited at least ageLimit at now. A zero
// ageLimit or a zero WaitingSince never ages.
func Aged(f Fact, now time.Time, ageLimit time.Duration) bool {
	return ageLimit > 0 && !f.WaitingSince.IsZero() && now.Sub(f.WaitingSince) >= ageLimit
}

// known reports whether p is a usable prediction.
func known(p float64) bool { return p > 0 && !math.IsInf(p, 1) }

// effective is p, or median when p is unknown.
func effective(p, median float64) float64 {
	if known(p) {
		return p
	}
	return median
}

// medianKnown is the median of the known predictions in facts, or 0 when
// none is known (then every fact's effective prediction is 0 and the order
// falls to admission).
func medianKnown(facts []Fact) float64 {
	ps := make([]float64, 0, len(facts))
	for _, f := range facts {
		if known(f.Predicted) {
			ps = append(ps, f.Predicted)
		}
	}
	if len(ps) == 0 {
		return 0
	}
	slices.Sort(ps)
	m := len(ps) / 2
	if len(ps)%2 == 1 {
		return ps[m]
	}
	return ps[m-1]/2 + ps[m]/2
}
