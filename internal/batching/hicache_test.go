package batching

import (
	"math"
	"math/rand/v2"
	"testing"
)

// tiered is a server with a small device pool and a host tier of host
// tokens under policy.
func tiered(t testing.TB, pool, host int, policy string) *Server {
	t.Helper()
	cfg := DefaultConfig()
	cfg.MaxTotalTokens, cfg.HostTokens, cfg.WritePolicy = pool, host, policy
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// turn submits a request of input in segments and out output tokens and
// runs the server until it is idle.
func turn(t *testing.T, s *Server, id int64, in []Segment, out int, now float64) (Done, float64) {
	t.Helper()
	if err := s.Submit(Request{ID: id, Input: in, Output: out, MaxNew: 8192, OutputKey: uint64(1000 + id)}); err != nil {
		t.Fatal(err)
	}
	done, end := run(t, s, now)
	return done[id], end
}

// A returning trajectory whose context was evicted from the device finds it
// in host memory and loads it back; without the host tier it prefills it
// again.
func TestReturningPrefixIsLoadedFromHost(t *testing.T) {
	for _, tc := range []struct {
		name          string
		host          int
		policy        string
		wantLoaded    int
		wantPrefilled int
	}{
		{"no host tier", 0, "", 0, 8100 + 500},
		{"write_through", 60_000, WriteThrough, 8100, 500},
		{"write_back", 60_000, WriteBack, 8100, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tiered(t, 20_000, tc.host, tc.policy)
			a := []Segment{{1, 8000}}
			_, now := turn(t, s, 1, a, 101, 0)
			// Two other contexts push a out of the device pool.
			_, now = turn(t, s, 2, []Segment{{2, 9000}}, 10, now)
			_, now = turn(t, s, 3, []Segment{{3, 9000}}, 10, now)
			if s.Stats().Evicted == 0 {
				t.Fatal("nothing was evicted from the device")
			}
			next := []Segment{{1, 8000}, {1001, 100}, {7, 500}} // a, its reply, an observation
			d, _ := turn(t, s, 4, next, 10, now)
			if d.Loaded != tc.wantLoaded || d.Prefilled != tc.wantPrefilled {
				t.Errorf("return: loaded %d prefilled %d, want %d and %d", d.Loaded, d.Prefilled, tc.wantLoaded, tc.wantPrefilled)
			}
		})
	}
}

// The host tier holds what the device evicts up to its size, least
// recently used out first; a prefix gone from both is prefilled again.
func TestHostTierHoldsEvictedPrefixesUpToItsSize(t *testing.T) {
	const pool, host = 20_000, 40_000
	s := tiered(t, pool, host, WriteThrough)
	now := 0.0
	for id := int64(1); id <= 8; id++ { // 8 contexts of 9,001 tokens: 72,008 in all
		_, now = turn(t, s, id, []Segment{{uint64(id), 9000}}, 2, now)
		if o := s.Occupancy(); o.Host > host {
			t.Fatalf("after %d: %d tokens in host memory, more than its %d", id, o.Host, host)
		}
	}
	if o := s.Occupancy(); o.Host < host-9001 {
		t.Errorf("host memory holds %d tokens, want it nearly full (%d)", o.Host, host)
	}
	if s.Stats().HostEvicted == 0 {
		t.Error("nothing was freed from host memory")
	}
	// The newest evicted context is in host memory; the oldest is gone.
	d, now := turn(t, s, 20, []Segment{{6, 9000}, {99, 50}}, 1, now)
	if d.Loaded != 9000 || d.Prefilled != 50 {
		t.Errorf("context 6: loaded %d prefilled %d, want 9000 and 50", d.Loaded, d.Prefilled)
	}
	d, _ = turn(t, s, 21, []Segment{{1, 9000}, {99, 50}}, 1, now)
	if d.Loaded != 0 || d.Prefilled != 9050 {
		t.Errorf("context 1: loaded %d prefilled %d, want 0 and 9050", d.Loaded, d.Prefilled)
	}
}

// Under write_through a prefix is in host memory as soon as it is cached;
// under write_through_selective once it has been hit twice (the input's
// node is inserted when prefilled and again when the request ends, the
// output's only at the end); under write_back only once the device evicts
// it.
func TestWritePolicies(t *testing.T) {
	for _, tc := range []struct {
		policy   string
		wantHost int
	}{{WriteThrough, 1049}, {WriteThroughSelective, 1000}, {WriteBack, 0}} {
		s := tiered(t, 100_000, 200_000, tc.policy)
		turn(t, s, 1, []Segment{{1, 1000}}, 50, 0)
		if o := s.Occupancy(); o.Host != tc.wantHost || o.Cached != 1049 {
			t.Errorf("%s: %d tokens in host memory and %d on the device, want %d and 1049", tc.policy, o.Host, o.Cached, tc.wantHost)
		}
	}
}

// Loading takes the tokens' bytes over the link's rate: twice the tokens,
// twice the time; an iteration that loads takes at least that long.
func TestLoadTimeScalesWithTokens(t *testing.T) {
	cfg := DefaultConfig()
	if got, want := cfg.LoadSeconds(20_000)/cfg.LoadSeconds(10_000), 2.0; math.Abs(got-want) > 1e-12 {
		t.Errorf("20,000 tokens load in %.3f× the time of 10,000, want 2", got)
	}
	if got, want := cfg.LoadSeconds(1), float64(KVBytesPerToken)/(PCIeGen4GBps*1e9); math.Abs(got-want) > 1e-18 {
		t.Errorf("one token loads in %g s, want %g", got, want)
	}
	iter := func(n int) float64 {
		s := tiered(t, 3*n, 8*n, WriteThrough)
		s.cfg.HostLoadGBps = 0.5 // slow enough that the load is the iteration
		_, now := turn(t, s, 1, []Segment{{1, n}}, 1, 0)
		_, now = turn(t, s, 2, []Segment{{2, 2*n + n/2}}, 1, now) // evicts the first
		if err := s.Submit(Request{ID: 3, Input: []Segment{{1, n}, {9, 20}}, Output: 1, MaxNew: 10, OutputKey: 5}); err != nil {
			t.Fatal(err)
		}
		end := s.Form(now)
		if s.inFly.loaded != n {
			t.Fatalf("the iteration loads %d tokens, want %d", s.inFly.loaded, n)
		}
		s.Finish()
		return end - now
	}
	small, large := iter(4000), iter(8000)
	slow := DefaultConfig()
	slow.HostLoadGBps = 0.5
	if want := slow.LoadSeconds(4000); math.Abs(small-want) > 1e-9 {
		t.Errorf("an iteration loading 4,000 tokens takes %.4f s, want the load's %.4f s", small, want)
	}
	if math.Abs(large/small-2) > 1e-9 {
		t.Errorf("loading 8,000 tokens takes %.3f× loading 4,000, want 2", large/small)
	}
}

// fp8_e4m3 halves a token's KV bytes: the same memory holds twice the
// tokens, and a host-to-device load of a token takes half the time.
func TestFP8DoublesThePool(t *testing.T) {
	bf := DefaultConfig()
	fp, err := bf.WithKVDtype(KVDtypeFP8)
	if err != nil {
		t.Fatal(err)
	}
	if fp.MaxTotalTokens != 2*bf.MaxTotalTokens || 2*fp.KVBytes != bf.KVBytes {
		t.Errorf("fp8: %d tokens of %d bytes, want %d of %d", fp.MaxTotalTokens, fp.KVBytes, 2*bf.MaxTotalTokens, bf.KVBytes/2)
	}
	if got := fp.LoadSeconds(1000) / bf.LoadSeconds(1000); math.Abs(got-0.5) > 1e-12 {
		t.Errorf("fp8 loads in %.2f× bf16's time, want 0.5", got)
	}
	if fp.MaxRunning < bf.MaxRunning {
		t.Errorf("fp8 runs at most %d requests, fewer than bf16's %d", fp.MaxRunning, bf.MaxRunning)
	}
	if _, err := bf.WithKVDtype("int3"); err == nil {
		t.Error("an unknown dtype was taken")
	}
	// A server holds twice the requests at once.
	held := func(cfg Config) int {
		cfg.MaxTotalTokens /= 20
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for id := range int64(40) {
			_ = s.Submit(Request{ID: id, Input: []Segment{{uint64(id), 4000}}, Output: 1000, MaxNew: 1000, OutputKey: uint64(100 + id)})
		}
		now := 0.0
		for range 40 {
			now = s.Form(now)
			s.Finish()
		}
		return s.Occupancy().Running
	}
	if b, f := held(bf), held(fp); f < 2*b-1 {
		t.Errorf("fp8 admits %d requests at once, bf16 %d: want about twice", f, b)
	}
}

func TestWithHiCacheSizesTheHostPool(t *testing.T) {
	c := DefaultConfig()
	r, err := c.WithHiCache(DefaultHiCacheRatio, 0, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.HostTokens != 2*c.MaxTotalTokens || r.WritePolicy != WriteThrough || r.HostLoadGBps != PCIeGen4GBps {
		t.Errorf("ratio 2: %+v", r)
	}
	g, err := c.WithHiCache(DefaultHiCacheRatio, 200, WriteBack, PCIeGen5GBps)
	if err != nil {
		t.Fatal(err)
	}
	if want := int(200_000_000_000 / KVBytesPerToken); g.HostTokens != want {
		t.Errorf("200 GB: %d host tokens, want %d", g.HostTokens, want)
	}
	if _, err := c.WithHiCache(0.5, 0, "", 0); err == nil {
		t.Error("a host pool smaller than the device pool was taken")
	}
	if _, err := c.WithHiCache(2, 0, "write_sometimes", 0); err == nil {
		t.Error("an unknown write policy was taken")
	}
}

// TestRandomWorkKeepsTheTiersConsistent is TestRandomWorkKeepsThePoolConsistent
// with a host tier under each write policy.
func TestRandomWorkKeepsTheTiersConsistent(t *testing.T) {
	for _, policy := range []string{WriteThrough, WriteThroughSelective, WriteBack} {
		for seed := range uint64(3) {
			r := rand.New(rand.NewPCG(seed, 2))
			pool := 5000 + r.IntN(40_000)
			s := tiered(t, pool, pool+r.IntN(3*pool), policy)
			live := map[int64]bool{}
			now := 0.0
			id := int64(0)
			ctx := map[int64][]Segment{}
			for step := 0; step < 3000; step++ {
				switch k := r.IntN(12); {
				case k < 3:
					prompt := uint64(r.IntN(4))
					in := []Segment{{prompt, 100 + r.IntN(2000)}}
					if r.IntN(2) == 0 {
						in = append(in, Segment{uint64(1000 + id), 1 + r.IntN(500)})
					}
					if k == 2 && len(ctx) > 0 { // a returning context
						for _, c := range ctx {
							in = append(append([]Segment{}, c...), Segment{uint64(5000 + id), 1 + r.IntN(300)})
							break
						}
					}
					out := 1 + r.IntN(400)
					_ = s.Submit(Request{ID: id, Input: in, Output: out, MaxNew: out + r.IntN(5000), OutputKey: uint64(1_000_000 + id)})
					ctx[id] = append(in, Segment{uint64(1_000_000 + id), out})
					live[id] = true
					id++
				case k == 3 && len(live) > 0:
					for v := range live {
						s.Abort(v, now)
						delete(live, v)
						break
					}
				case k == 4 && r.IntN(4) == 0:
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
					t.Fatalf("%s seed %d step %d: %v", policy, seed, step, err)
				}
			}
			done, _ := run(t, s, now)
			for v := range live {
				if d, ok := done[v]; !ok || d.Generated < 1 {
					t.Errorf("%s seed %d: request %d never finished", policy, seed, v)
				}
			}
		}
	}
}
