package priority

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// The starvation bound.
//
// Model: time moves in ticks of dt (now_t = t0 + t·dt). At each tick new
// facts join the waiting set, the policy ranks it, and the top K are served
// (their generations start) and leave it; a served fact may come back later
// with a new WaitingSince. A fact's keys do not change while it waits.
//
// Claim: let f start waiting at w and let Ta be the first tick with
// now_Ta - w >= AgeLimit (so now_Ta < w + AgeLimit + dt). Let B be the number
// of facts ranked ahead of f at Ta. Then f is served at a tick
// t <= Ta + floor(B/K), i.e. it waits less than AgeLimit + (1 + floor(B/K))·dt.
//
// Proof: from Ta on f is aged, so only aged facts whose (WaitingSince,
// AdmittedAt, TrajID) is smaller rank ahead of it. A fact joining at a tick
// t > Ta started waiting after now_{t-1} >= now_Ta >= w + AgeLimit > w, so it
// ranks behind f; hence the set ahead of f never gains a member. While f is
// not served, the K served facts all come from that set, which therefore
// shrinks by K per tick: after j such ticks at most B - jK remain, and f is
// within the top K once B - jK < K, at j = floor(B/K) at the latest.
//
// For a fact present from the start, with arrivals all starting to wait
// after it, B is at most the number of other facts present at the start,
// whatever the arrivals are. The simulation below checks the bound for every
// fact that ages within its horizon, against an adversary that adds, every
// tick, more new facts than there are slots, each preferred by the policy
// over everything before it; and checks that without ageing the same
// adversary starves the victim.

type waitState struct {
	fact     Fact
	ageTick  int // -1 until aged
	ahead    int // facts ranked ahead of it at ageTick
	deadline int // ageTick + ahead/K
}

type simResult struct {
	victimAgeTick, victimAhead, victimServed int // victimServed -1 if never
}

// simulate runs the adversarial scheduler for horizon ticks and fails t on a
// fact served after its deadline.
func simulate(t *testing.T, r *rand.Rand, p Policy, limit time.Duration, k, n0, horizon int) simResult {
	t.Helper()
	const dt = time.Second
	name := p.Name()
	victim := Fact{TrajID: "x", Replica: "r0", AdmittedAt: t0, WaitingSince: t0.Add(-5 * dt)}
	switch name {
	case NameLPT:
		victim.Predicted = 1 // shorter than anything else
	case NameSJF:
		victim.Predicted = 1e9 // longer than anything else
	}
	waiting := map[string]*waitState{"x": {fact: victim, ageTick: -1}}
	for i := range n0 {
		f := Fact{
			TrajID:       fmt.Sprintf("i%03d", i),
			Replica:      "r0",
			AdmittedAt:   t0.Add(-time.Duration(1+r.IntN(600)) * time.Second), // before the victim: fcfs prefers them
			WaitingSince: t0.Add(-time.Duration(r.IntN(30_000)) * time.Millisecond),
		}
		if r.IntN(4) > 0 { // else unknown: the median, still between the victim and the arrivals
			f.Predicted = float64(100 + r.IntN(10_000))
		}
		waiting[f.TrajID] = &waitState{fact: f, ageTick: -1}
	}
	returning := map[int][]Fact{} // tick -> facts coming back from an env step
	res := simResult{victimAgeTick: -1, victimServed: -1}
	arrived := 0
	for tick := range horizon {
		now := t0.Add(time.Duration(tick) * dt)
		// The adversary: more arrivals than slots, each preferred over all
		// before it, each started waiting just after the previous tick.
		joined := returning[tick]
		delete(returning, tick)
		for range k + 1 + r.IntN(2) {
			arrived++
			f := Fact{TrajID: fmt.Sprintf("a%05d", arrived), Replica: "r0", AdmittedAt: now}
			switch name {
			case NameFCFS:
				f.AdmittedAt = t0.Add(-time.Hour - time.Duration(arrived)*time.Second)
			case NameLPT:
				f.Predicted = 1e6 + float64(arrived)
			case NameSJF:
				f.Predicted = 1 / float64(arrived+1)
			}
			joined = append(joined, f)
		}
		for _, f := range joined {
			f.WaitingSince = now.Add(-dt + time.Duration(1+r.Int64N(int64(dt))))
			waiting[f.TrajID] = &waitState{fact: f, ageTick: -1}
		}

		facts := make([]Fact, 0, len(waiting))
		for _, w := range waiting {
			facts = append(facts, w.fact)
		}
		ranked := p.Rank(facts, now)
		for i, f := range ranked {
			w := waiting[f.TrajID]
			if w.ageTick < 0 && Aged(f, now, limit) {
				w.ageTick, w.ahead, w.deadline = tick, i, tick+i/k
				if f.TrajID == "x" {
					res.victimAgeTick, res.victimAhead = tick, i
					for _, g := range ranked[:i] {
						if !Aged(g, now, limit) || !g.WaitingSince.Before(f.WaitingSince) && !g.WaitingSince.Equal(f.WaitingSince) {
							t.Fatalf("%s tick %d: %+v ranked ahead of the aged victim", name, tick, g)
						}
					}
				}
			}
		}
		for i, f := range ranked {
			w := waiting[f.TrajID]
			if i >= k {
				if w.ageTick >= 0 && tick >= w.deadline {
					t.Fatalf("%s K=%d limit=%v: %s aged at tick %d with %d ahead, still waiting at tick %d (rank %d)", name, k, limit, f.TrajID, w.ageTick, w.ahead, tick, i)
				}
				continue
			}
			delete(waiting, f.TrajID)
			if f.TrajID == "x" {
				res.victimServed = tick
				continue
			}
			if r.IntN(4) == 0 { // back after an env step, waiting anew
				back := tick + 1 + r.IntN(5)
				returning[back] = append(returning[back], f)
			}
		}
	}
	return res
}

func TestNoStarvation(t *testing.T) {
	limits := []time.Duration{3 * time.Second, 20 * time.Second, 45*time.Second + 500*time.Millisecond, 60 * time.Second}
	for _, name := range Names() {
		for seed := range uint64(16) {
			r := rand.New(rand.NewPCG(seed, 0xa9e))
			limit := limits[r.IntN(len(limits))]
			k := 1 + r.IntN(8)
			n0 := r.IntN(50)
			p := mustNew(t, name, Config{AgeLimit: limit})

			// Ticks until the victim (waiting since t0-5s) ages, plus the bound.
			ta := int((limit - 5*time.Second + time.Second - 1) / time.Second)
			ta = max(ta, 0)
			bound := ta + n0/k
			res := simulate(t, r, p, limit, k, n0, bound+10)
			where := fmt.Sprintf("%s seed %d K=%d n0=%d limit=%v", name, seed, k, n0, limit)
			if res.victimAgeTick != ta {
				t.Fatalf("%s: victim aged at tick %d, want %d", where, res.victimAgeTick, ta)
			}
			if res.victimAhead > n0 {
				t.Fatalf("%s: %d ahead of the victim when it aged, more than the %d present at the start", where, res.victimAhead, n0)
			}
			if res.victimServed < 0 || res.victimServed > ta+res.victimAhead/k {
				t.Fatalf("%s: victim served at tick %d, bound %d + %d/%d", where, res.victimServed, ta, res.victimAhead, k)
			}
			if res.victimServed < ta {
				t.Fatalf("%s: victim served at tick %d before ageing at %d: the adversary is too weak", where, res.victimServed, ta)
			}

			// The same adversary without ageing starves the victim.
			r = rand.New(rand.NewPCG(seed, 0xa9e))
			r.IntN(len(limits))
			r.IntN(8)
			r.IntN(50)
			if res := simulate(t, r, mustNew(t, name, Config{}), 0, k, n0, 2*(bound+10)); res.victimServed >= 0 {
				t.Fatalf("%s: without ageing the victim was served at tick %d", where, res.victimServed)
			}
		}
	}
}
