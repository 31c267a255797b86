package batching

import (
	"math"
	"math/rand/v2"
	"testing"
)

// small is a server with a small pool, so tests reach its limits.
func small(t testing.TB, pool int) *Server {
	t.Helper()
	cfg := DefaultConfig()
	cfg.MaxTotalTokens = pool
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// run drives s until it is idle, checking the pool after every iteration,
// and returns the requests done by id and the time.
func run(t testing.TB, s *Server, now float64) (map[int64]Done, float64) {
	t.Helper()
	done := map[int64]Done{}
	if s.InFlight() {
		for _, d := range s.Finish() {
			done[d.ID] = d
		}
	}
	for i := 0; s.Busy(); i++ {
		if i > 1_000_000 {
			t.Fatal("server never went idle")
		}
		now = s.Form(now)
		if err := s.check(); err != nil {
			t.Fatalf("after forming at %.3f: %v", now, err)
		}
		for _, d := range s.Finish() {
			done[d.ID] = d
		}
		if err := s.check(); err != nil {
			t.Fatalf("after finishing at %.3f: %v", now, err)
		}
	}
	return done, now
}

func TestOneRequestTakesItsPrefillAndDecodeTime(t *testing.T) {
	s := small(t, 100_000)
	if err := s.Submit(Request{ID: 1, Input: []Segment{{1, 1000}}, Output: 50, MaxNew: 8192, OutputKey: 2}); err != nil {
		t.Fatal(err)
	}
	done, end := run(t, s, 0)
	d := done[1]
	if d.Generated != 50 || d.Prefilled != 1000 || d.Cached != 0 || d.Aborted {
		t.Fatalf("done = %+v", d)
	}
	c := s.Config().Cost
	want := c.Seconds(Shape{PrefillTokens: 1000, PrefillAttn: AttnPairs(1000, 0)})
	for k := 1; k < 50; k++ { // the prefill emits the first token; each decode one more
		want += c.Seconds(Shape{DecodeBatch: 1, DecodeKV: 1000 + k})
	}
	if math.Abs(end-want) > 1e-9 || d.At != end {
		t.Errorf("ended at %.6f (done at %.6f), want %.6f", end, d.At, want)
	}
	// Its input and all but its last output token stay cached.
	if o := s.Occupancy(); o.Cached != 1049 || o.Used != 0 || o.Running != 0 {
		t.Errorf("occupancy = %+v, want 1049 cached, none used", o)
	}
}

func TestNextTurnHitsTheCache(t *testing.T) {
	s := small(t, 100_000)
	first := []Segment{{1, 3000}}
	_ = s.Submit(Request{ID: 1, Input: first, Output: 200, MaxNew: 8192, OutputKey: 2})
	_, now := run(t, s, 0)
	next := []Segment{{1, 3000}, {2, 200}, {3, 500}}
	_ = s.Submit(Request{ID: 2, Input: next, Output: 10, MaxNew: 8192, OutputKey: 4})
	done, _ := run(t, s, now)
	if d := done[2]; d.Cached != 3199 || d.Prefilled != 501 {
		t.Errorf("second turn: cached %d prefilled %d, want 3199 and 501", d.Cached, d.Prefilled)
	}
	// A sibling sharing only the prompt matches the prompt.
	_ = s.Submit(Request{ID: 3, Input: []Segment{{1, 3000}, {9, 100}}, Output: 1, MaxNew: 10, OutputKey: 10})
	done, _ = run(t, s, now)
	if d := done[3]; d.Cached != 3000 {
		t.Errorf("sibling: cached %d, want the 3000-token prompt", d.Cached)
	}
}

func TestLongInputIsPrefilledInChunks(t *testing.T) {
	s := small(t, 100_000)
	_ = s.Submit(Request{ID: 1, Input: []Segment{{1, 20_000}}, Output: 1, MaxNew: 10, OutputKey: 2})
	var chunks []int
	now := 0.0
	for s.Busy() {
		now = s.Form(now)
		sh := s.shape(s.inFly)
		chunks = append(chunks, sh.PrefillTokens)
		s.Finish()
	}
	if len(chunks) != 3 || chunks[0] != 8192 || chunks[1] != 8192 || chunks[2] != 20_000-2*8192 {
		t.Errorf("prefill chunks = %v, want 8192, 8192, 3616", chunks)
	}
}

func TestPoolBoundsAdmission(t *testing.T) {
	// Each request needs 10,000 input tokens plus the clipped 4,096 of
	// output reserve: a 50,000-token pool admits three at once.
	s := small(t, 50_000)
	for i := range 8 {
		_ = s.Submit(Request{ID: int64(i), Input: []Segment{{uint64(100 + i), 10_000}}, Output: 100, MaxNew: 8192, OutputKey: uint64(200 + i)})
	}
	most := 0
	now := 0.0
	for s.Busy() {
		now = s.Form(now)
		most = max(most, s.Occupancy().Running)
		if err := s.check(); err != nil {
			t.Fatal(err)
		}
		s.Finish()
	}
	if most != 3 {
		t.Errorf("at most %d running, want 3 (what the pool holds with its reserve)", most)
	}
}

func TestRetractionWhenDecodeOutgrowsThePool(t *testing.T) {
	// Long outputs that admission's decaying reserve lets in together:
	// the pool runs out mid-decode and some are retracted, then finish
	// after re-prefilling their input and output so far.
	s := small(t, 30_000)
	for i := range 6 {
		_ = s.Submit(Request{ID: int64(i), Input: []Segment{{uint64(100 + i), 2000}}, Output: 6000, MaxNew: 6000, OutputKey: uint64(200 + i)})
	}
	done, _ := run(t, s, 0)
	retracted := 0
	for i := range 6 {
		d := done[int64(i)]
		if d.Generated != 6000 || d.Aborted {
			t.Fatalf("request %d: %+v", i, d)
		}
		retracted += d.Retracted
		if d.Retracted > 0 && d.Prefilled <= 2000 {
			t.Errorf("request %d was retracted but prefilled only %d", i, d.Prefilled)
		}
	}
	if retracted == 0 || s.Stats().Retractions != int64(retracted) {
		t.Errorf("retractions: %d in results, %d in stats; want some", retracted, s.Stats().Retractions)
	}
}

func TestEvictionIsLeastRecentlyUsedFirst(t *testing.T) {
	s := small(t, 20_000)
	now := 0.0
	for i := range 3 { // three 5,000-token prompts, cached in turn
		_ = s.Submit(Request{ID: int64(i), Input: []Segment{{uint64(10 + i), 5000}}, Output: 1, MaxNew: 1, OutputKey: uint64(20 + i)})
		_, now = run(t, s, now+1)
	}
	// Touch the first again, then need room for 8,000 more: the second
	// (least recently used) goes first, then the third.
	_ = s.Submit(Request{ID: 10, Input: []Segment{{10, 5000}}, Output: 1, MaxNew: 1, OutputKey: 30})
	_, now = run(t, s, now+1)
	_ = s.Submit(Request{ID: 11, Input: []Segment{{99, 8000}}, Output: 1, MaxNew: 1, OutputKey: 31})
	_, now = run(t, s, now+1)
	for _, c := range []struct {
		key  uint64
		want int
	}{{10, 5000}, {11, 0}, {12, 5000}} {
		_, got := s.tree.match([]Segment{{c.key, 5000}}, false, now)
		if got != c.want {
			t.Errorf("prompt %d: %d tokens cached, want %d", c.key, got, c.want)
		}
	}
}

func TestAbortAnswersWithWhatWasGenerated(t *testing.T) {
	s := small(t, 100_000)
	_ = s.Submit(Request{ID: 1, Input: []Segment{{1, 100}}, Output: 1000, MaxNew: 1000, OutputKey: 2})
	now := 0.0
	for range 11 { // the prefill and ten decodes
		now = s.Form(now)
		s.Finish()
	}
	end := s.Form(now) // one more in flight
	d, ok := s.Abort(1, (now+end)/2)
	if !ok || !d.Aborted || d.Generated != 11 {
		t.Fatalf("abort = %+v, %v; want 11 tokens (the iteration in flight does not count)", d, ok)
	}
	s.Finish()
	if err := s.check(); err != nil {
		t.Fatal(err)
	}
	// Its input and output so far are cached for a resumption.
	_, got := s.tree.match([]Segment{{1, 100}, {2, 11}}, false, end)
	if got < 110 {
		t.Errorf("after the abort %d tokens are cached, want its input and output", got)
	}
	if _, ok := s.Abort(1, end); ok {
		t.Error("a second abort found the request")
	}
}

// TestRandomWorkKeepsThePoolConsistent submits, aborts and flushes at
// random and checks the pool's accounting after every step.
func TestRandomWorkKeepsThePoolConsistent(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 1))
		s := small(t, 5000+r.IntN(40_000))
		live := map[int64]bool{}
		now := 0.0
		id := int64(0)
		for step := 0; step < 3000; step++ {
			switch k := r.IntN(10); {
			case k < 3:
				prompt := uint64(r.IntN(4))
				in := []Segment{{prompt, 100 + r.IntN(2000)}}
				if r.IntN(2) == 0 {
					in = append(in, Segment{uint64(1000 + id), 1 + r.IntN(500)})
				}
				out := 1 + r.IntN(400)
				_ = s.Submit(Request{ID: id, Input: in, Output: out, MaxNew: out + r.IntN(5000), OutputKey: uint64(1_000_000 + id)})
				live[id] = true
				id++
			case k == 3 && len(live) > 0:
				for v := range live {
					s.Abort(v, now)
					delete(live, v)
					break
				}
			case k == 4:
				s.Flush()
			case k == 5:
				s.Drop([]Segment{{uint64(r.IntN(4)), 100 + r.IntN(2000)}}, now)
			}
			if !s.InFlight() && s.Busy() {
				now = s.Form(now)
			} else if s.InFlight() {
				for _, d := range s.Finish() {
					delete(live, d.ID)
				}
			}
			if err := s.check(); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
		}
		done, _ := run(t, s, now)
		for v := range live {
			if d, ok := done[v]; !ok || d.Generated < 1 {
				t.Errorf("seed %d: request %d never finished", seed, v)
			}
		}
	}
}

// Under lpm the request with the longest cached prefix goes first; under
// fcfs arrival order holds.
func TestLongestPrefixMatchOrdersTheQueue(t *testing.T) {
	for _, policy := range []string{PolicyFCFS, PolicyLPM} {
		cfg := DefaultConfig()
		cfg.Policy = policy
		cfg.MaxPrefillTokens = 1000 // one of the two per prefill iteration
		s, _ := New(cfg)
		_ = s.Submit(Request{ID: 1, Input: []Segment{{7, 900}}, Output: 1, MaxNew: 1, OutputKey: 8})
		_, now := run(t, s, 0)
		_ = s.Submit(Request{ID: 2, Input: []Segment{{5, 900}}, Output: 1, MaxNew: 1, OutputKey: 9})
		_ = s.Submit(Request{ID: 3, Input: []Segment{{7, 900}, {6, 150}}, Output: 1, MaxNew: 1, OutputKey: 10})
		done, _ := run(t, s, now)
		first := done[2].At < done[3].At
		if first != (policy == PolicyFCFS) {
			t.Errorf("%s: request 2 done at %.4f, request 3 (cached prefix) at %.4f", policy, done[2].At, done[3].At)
		}
	}
}

// Chunks of a long input join the cache as they are computed: a request
// aborted after two chunks leaves them cached.
func TestChunksJoinTheCache(t *testing.T) {
	s := small(t, 100_000)
	_ = s.Submit(Request{ID: 1, Input: []Segment{{1, 5000}, {2, 20_000}}, Output: 1, MaxNew: 10, OutputKey: 3})
	now := 0.0
	for range 2 {
		now = s.Form(now)
		s.Finish()
	}
	s.Abort(1, now)
	if err := s.check(); err != nil {
		t.Fatal(err)
	}
	if _, got := s.tree.match([]Segment{{1, 5000}, {2, 20_000}}, false, now); got != 2*8192 {
		t.Errorf("%d tokens cached after two chunks, want %d", got, 2*8192)
	}
}
