package batching

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Request is one generation request: its input as segments (the prefix
// cache matches them), the number of tokens it generates before it stops
// (the caller knows: the workload drew it), its max_new_tokens (for the
// reserve admission keeps) and the stream its output tokens belong to, so
// that the next request, whose input ends with this output, matches it.
type Request struct {
	ID        int64
	Input     []Segment
	Output    int
	MaxNew    int
	OutputKey uint64
	// With, when set, is how the input followed by its first n output
	// tokens is segmented (what joins the cache when it ends, and what a
	// retracted request prefills again); nil: Input followed by n tokens of
	// OutputKey. A caller whose segments are blocks of token ids (as a
	// server that sees only ids makes them) sets it so that the next turn's
	// input matches.
	With func(n int) []Segment
}

// Done is a request that left the server: finished (its Output generated)
// or aborted.
type Done struct {
	ID        int64
	At        float64 // the iteration boundary it left at
	Generated int     // output tokens generated
	Aborted   bool
	// Prefilled is the input tokens computed for it (every prefill after a
	// retraction included), Cached the input tokens its first prefill found
	// in the cache (on the device or, with a host tier, in host memory),
	// Loaded how many of those came back from host memory, Retracted how
	// often it was retracted.
	Prefilled, Cached, Loaded, Retracted int
}

// Stats are a server's counters since it started.
type Stats struct {
	Iterations, PrefillIterations int64
	Generated, Prefilled, Cached  int64
	Retractions                   int64
	Evicted                       int64
	// With a host tier: device tokens whose KV went to host memory when
	// evicted (Offloaded), tokens written to host memory (WrittenToHost),
	// tokens freed from host memory (HostEvicted) and tokens loaded back
	// to the device instead of prefilled (Loaded), with the seconds those
	// loads took (LoadS; they overlap the iteration's compute).
	Offloaded, WrittenToHost, HostEvicted, Loaded int64
	LoadS                                         float64
	// BusyS is the time spent in iterations; UsageTokenS integrates the
	// tokens in use (token_usage × max_total_num_tokens) over time.
	BusyS, UsageTokenS float64
}

// Occupancy is what SGLang's /metrics reports of a server now.
type Occupancy struct {
	Running, Queued int
	// Used is the tokens of the pool held by running requests and by
	// cached prefixes they lock: max_total_num_tokens − (available +
	// evictable), as sglang:token_usage counts it (× the pool).
	Used int
	// Cached is the tokens of the radix cache on the device, locked or
	// not; Host the tokens held in host memory (hierarchical cache).
	Cached, Host int
}

// req is a request inside the server.
type req struct {
	Request
	origin   int       // input tokens as submitted
	orig     []Segment // input as submitted, with a spare element
	input    []Segment // input now (longer after a retraction)
	inputLen int       // tokens of input (grows on retraction by the output so far)
	out      int       // output tokens generated
	node     *node     // the last node of its locked prefix; nil when none is locked
	treeLen  int       // input tokens in the tree and locked
	filled   int       // input tokens computed or cached so far (chunked prefill)
	// kvOut is the output tokens whose KV is in the pool: a token's KV is
	// written by the iteration that feeds it back, so out−1 between
	// iterations and out while a decode is in flight.
	kvOut     int
	arrival   int64 // submission order
	done      Done
	inRunning bool
	aborted   bool
}

// Server is one inference server's continuous batching, iteration by
// iteration, as SGLang's scheduler runs it with its default settings (no
// mixed chunks, no overlap scheduling, page size 1). See the package
// documentation for what is modelled and where each rule was read.
//
// The caller owns the clock: Form starts an iteration at a time and returns
// when it ends; Finish applies it at that time. Submit and Abort may come
// between. Not safe for concurrent use.
type Server struct {
	cfg  Config
	tree *radix

	waiting  []*req // arrival order (retracted ones at the back)
	running  []*req // decoding
	chunked  *req   // being prefilled in chunks
	byID     map[int64]*req
	arrivals int64

	ratio  float64 // new_token_ratio
	minR   float64
	decay  float64
	used   int // pool tokens held: tree + private
	inFly  *iteration
	it     iteration // the one iteration, reused
	now    float64
	lastAt float64 // last time UsageTokenS was integrated to
	stats  Stats
}

// iteration is the batch of the iteration in flight.
type iteration struct {
	end      float64
	prefill  []*req // whole or last-chunk prefills: they emit their first token at the end
	chunks   []int  // tokens each of prefill computes in this iteration
	partial  *req   // a chunk that does not finish its request's input
	partialN int
	decode   []*req
	loaded   int // tokens loaded back from host memory for its prefills
}

// New returns an idle server at time 0. cfg must be valid.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, tree: newRadix(), byID: map[int64]*req{}}
	s.tree.stats = &s.stats
	if cfg.HostTokens > 0 {
		s.tree.hostCap, s.tree.policy = cfg.HostTokens, cfg.WritePolicy
		s.tree.backupAfter = 1
		if cfg.WritePolicy == WriteThroughSelective {
			s.tree.backupAfter = SelectiveHits
		}
	}
	s.ratio = cfg.initRatio()
	s.minR = min(s.ratio*cfg.MinNewTokenRatioFactor, 1)
	s.decay = (s.ratio - s.minR) / float64(cfg.NewTokenRatioDecaySteps)
	return s, nil
}

// Config returns the server's configuration.
func (s *Server) Config() Config { return s.cfg }

// ErrDuplicate is returned by Submit for an id already inside.
var ErrDuplicate = errors.New("request id already in the server")

// ErrTooLong is returned by Submit for an input the pool cannot hold.
var ErrTooLong = errors.New("input longer than the server can hold")

// Submit puts r at the back of the waiting queue. As SGLang's scheduler
// does, it refuses an input of max_total_num_tokens − 1 tokens or more, and
// lowers max_new_tokens so that input and output fit in the pool; a request
// whose Output no longer fits stops at the lowered max_new_tokens.
func (s *Server) Submit(r Request) error {
	if s.byID[r.ID] != nil {
		return fmt.Errorf("submit %d: %w", r.ID, ErrDuplicate)
	}
	if r.Output < 1 || r.MaxNew < r.Output {
		return fmt.Errorf("submit %d: output %d must be in [1, max_new %d]", r.ID, r.Output, r.MaxNew)
	}
	// A spare element, so that the input with its output (what joins the
	// cache when it ends) is usually made without copying.
	in := make([]Segment, len(r.Input), len(r.Input)+1)
	copy(in, r.Input)
	q := &req{Request: r, orig: in, input: in, arrival: s.arrivals}
	for _, g := range r.Input {
		q.inputLen += g.Tokens
	}
	if limit := s.cfg.MaxTotalTokens - 1; q.inputLen >= limit {
		return fmt.Errorf("submit %d: %d input tokens, the most is %d (max_total_num_tokens − 1): %w", r.ID, q.inputLen, limit-1, ErrTooLong)
	}
	q.MaxNew = min(q.MaxNew, s.cfg.MaxTotalTokens-1-q.inputLen)
	q.Output = min(q.Output, q.MaxNew)
	q.origin = q.inputLen
	q.done.ID = r.ID
	s.arrivals++
	s.byID[r.ID] = q
	s.waiting = append(s.waiting, q)
	return nil
}

// Abort takes the request id out at time at (it answers with what it has
// generated by the last iteration boundary; an iteration in flight does not
// count for it). Its prefix and output go into the cache, as SGLang's
// cache_finished_req does for an aborted request. It reports false for an
// id not inside.
func (s *Server) Abort(id int64, at float64) (Done, bool) {
	q := s.byID[id]
	if q == nil {
		return Done{}, false
	}
	s.integrate(at)
	q.aborted = true
	switch {
	case q.inRunning:
		s.running = slices.DeleteFunc(s.running, func(x *req) bool { return x == q })
	case q == s.chunked:
		s.chunked = nil
	default:
		s.waiting = slices.DeleteFunc(s.waiting, func(x *req) bool { return x == q })
	}
	s.release(q, at, true)
	q.done.At, q.done.Aborted, q.done.Generated = at, true, q.out
	return q.done, true
}

// Phases of a request inside the server.
const (
	Waiting    = "waiting"
	Prefilling = "prefill"
	Decoding   = "decode"
)

// State reports where request id is (Waiting, Prefilling or Decoding) and
// how many output tokens it has generated; ok is false for an id not
// inside.
func (s *Server) State(id int64) (phase string, generated int, ok bool) {
	q := s.byID[id]
	switch {
	case q == nil:
		return "", 0, false
	case q.inRunning:
		return Decoding, q.out, true
	case q.filled > 0:
		return Prefilling, q.out, true
	}
	return Waiting, q.out, true
}

// Busy reports whether the server has an iteration to run.
func (s *Server) Busy() bool {
	return s.inFly != nil || len(s.running) > 0 || s.chunked != nil || len(s.waiting) > 0
}

// InFlight reports whether an iteration is in flight.
func (s *Server) InFlight() bool { return s.inFly != nil }

// Occupancy returns what the server's /metrics would say now.
func (s *Server) Occupancy() Occupancy {
	running := len(s.running)
	if s.chunked != nil {
		running++
	}
	return Occupancy{Running: running, Queued: len(s.waiting),
		Used: s.used - s.tree.evictable, Cached: s.tree.tokens, Host: s.tree.hostTokens}
}

// Stats returns the counters.
func (s *Server) Stats() Stats { return s.stats }

// Flush evicts every unlocked prefix, as /flush_cache does after a weight
// update.
func (s *Server) Flush() {
	s.used -= s.tree.flush()
}

// Drop frees the cached tokens of input that no one else shares, as a
// scheduler that knows the context will not come back would. SGLang has no
// such call: the virtual engine's clairvoyant reference uses it.
func (s *Server) Drop(input []Segment, at float64) {
	s.used -= s.tree.drop(input, at)
}

// integrate adds the pool use up to at into UsageTokenS.
func (s *Server) integrate(at float64) {
	if at > s.lastAt {
		s.stats.UsageTokenS += float64(s.used-s.tree.evictable) * (at - s.lastAt)
		s.lastAt = at
	}
}

// release frees what q holds: its private tokens (with insert, after
// putting its input and output into the cache) and its lock.
func (s *Server) release(q *req, at float64, insert bool) {
	delete(s.byID, q.ID)
	s.freeKV(q, at, insert)
	q.inRunning = false
}

// freeKV gives back q's KV: with insert its input and output join the
// cache (what was already there is freed as a duplicate); without, its
// tokens not in the tree are freed at once. Its lock goes either way.
func (s *Server) freeKV(q *req, at float64, insert bool) {
	if insert && q.filled == q.inputLen {
		_, added := s.tree.insert(q.with(q.inputLen-q.origin+q.kvOut), at)
		s.used -= q.held() - added
	} else {
		s.used -= q.held()
	}
	if q.node != nil {
		s.tree.unlock(q.node)
		q.node = nil
	}
	q.treeLen, q.filled, q.kvOut = 0, 0, 0
}

// held is the pool tokens q holds outside the tree.
func (q *req) held() int { return q.filled - q.treeLen + q.kvOut }

// with is q's input as submitted followed by its first n output tokens.
func (q *req) with(n int) []Segment {
	if q.With != nil {
		return q.With(n)
	}
	return withOutput(q.orig, q.OutputKey, n)
}

// withOutput is input followed by n tokens of stream key: a last segment of
// that stream grows (in a copy), else one is appended (into input's spare
// capacity when it has some: the result is for reading at once, not
// keeping).
func withOutput(input []Segment, key uint64, n int) []Segment {
	if n == 0 {
		return input
	}
	if len(input) > 0 && input[len(input)-1].Key == key {
		out := slices.Clone(input)
		out[len(out)-1].Tokens += n
		return out
	}
	return append(input, Segment{key, n})
}

// Form starts the iteration at time at (>= the end of the last one) and
// returns when it ends. It panics if one is in flight or there is nothing
// to run (check Busy).
func (s *Server) Form(at float64) float64 {
	if s.inFly != nil {
		panic("batching: Form with an iteration in flight")
	}
	at = max(at, s.now)
	s.integrate(at)
	it := &s.it
	*it = iteration{prefill: it.prefill[:0], chunks: it.chunks[:0], decode: it.decode[:0]}
	if !s.formPrefill(it, at) {
		s.formDecode(it, at)
	}
	if len(it.prefill) == 0 && it.partial == nil && len(it.decode) == 0 {
		// Nothing could run (every waiting request is refused and nothing
		// runs): an idle tick, as SGLang's loop polls again.
		it.end = at + s.cfg.IdleTickS
	} else {
		t := s.cfg.Cost.Seconds(s.shape(it))
		if it.loaded > 0 {
			// The load runs on its own stream layer by layer and each
			// layer's attention waits for its layer (cache_controller.py's
			// layer_done_counter): the iteration takes the longer of the
			// two.
			load := s.cfg.LoadSeconds(it.loaded)
			s.stats.LoadS += load
			t = max(t, load)
		}
		it.end = at + t
		s.stats.Iterations++
		s.stats.BusyS += it.end - at
	}
	s.inFly = it
	return it.end
}

// shape is the cost model's view of it.
func (s *Server) shape(it *iteration) Shape {
	var sh Shape
	add := func(q *req, n int) {
		sh.PrefillTokens += n
		ctx := q.filled - n // tokens before this chunk
		sh.PrefillAttn += AttnPairs(n, ctx)
	}
	for i, q := range it.prefill {
		add(q, it.chunks[i])
	}
	if it.partial != nil {
		add(it.partial, it.partialN)
	}
	for _, q := range it.decode {
		sh.DecodeBatch++
		sh.DecodeKV += q.inputLen + q.out
	}
	return sh
}

// Finish applies the iteration in flight, which ends at the time Form
// returned, and returns the requests that ended with it.
func (s *Server) Finish() []Done {
	it := s.inFly
	if it == nil {
		panic("batching: Finish without an iteration in flight")
	}
	s.inFly = nil
	s.integrate(it.end)
	s.now = it.end
	var done []Done
	emit := func(q *req) {
		s.stats.Generated++
		q.out++
		if q.out >= q.Output {
			s.running = slices.DeleteFunc(s.running, func(x *req) bool { return x == q })
			s.release(q, it.end, true)
			q.done.At, q.done.Generated = it.end, q.out
			done = append(done, q.done)
		}
	}
	if it.partial != nil && !it.partial.aborted {
		s.cachePrefill(it.partial, it.end)
	}
	for _, q := range it.prefill {
		if q.aborted {
			continue
		}
		s.cachePrefill(q, it.end)
		q.inRunning = true
		s.running = append(s.running, q)
		emit(q)
	}
	for _, q := range it.decode {
		if !q.aborted && q.inRunning {
			emit(q)
		}
	}
	if !s.Busy() {
		s.ratio = s.cfg.initRatio() // self_check_during_idle
	}
	return done
}

// cachePrefill puts q's computed input into the tree and moves its lock
// there (cache_unfinished_req): the tokens were private, now the tree holds
// them, and a duplicate of what is there already is freed.
func (s *Server) cachePrefill(q *req, at float64) {
	last, added := s.tree.insertUpTo(q.input, q.filled, at)
	s.used -= (q.filled - q.treeLen) - added
	s.tree.lock(last)
	if q.node != nil {
		s.tree.unlock(q.node)
	}
	q.node, q.treeLen = last, q.filled
}

// formPrefill builds a prefill batch as SGLang's get_new_batch_prefill and
// PrefillAdder do, and allocates its tokens; it reports whether there is
// one.
func (s *Server) formPrefill(it *iteration, at float64) bool {
	if len(s.running) >= s.cfg.MaxRunning && s.chunked == nil {
		return false
	}
	if s.chunked == nil && len(s.waiting) == 0 {
		return false
	}
	remChunk := s.cfg.ChunkedPrefill
	remInput := s.cfg.MaxPrefillTokens
	offset := 0.0 // rem_total_token_offset
	for _, q := range s.running {
		offset += float64(min(q.MaxNew-q.out, s.cfg.ClipMaxNew)) * s.ratio
	}
	// The pool is allocated after the adder, so available stays as it is
	// while locks move tokens out of evictable.
	avail := s.available()
	remTotal := func() float64 { return float64(avail+s.tree.evictable) - offset }
	reserve := func(q *req) int { return min(max(q.MaxNew-q.out, 0), s.cfg.ClipMaxNew) }
	alloc := 0
	take := func(q *req, n int) {
		alloc += n
		q.filled += n
		q.done.Prefilled += n
		s.stats.Prefilled += int64(n)
		remChunk -= n
		remInput -= n
	}
	// A request being chunked goes on first, without a memory check: its
	// memory was counted when it was admitted.
	if q := s.chunked; q != nil {
		n := min(q.inputLen-q.filled, remChunk)
		take(q, n)
		if q.filled < q.inputLen {
			offset += float64(n)
			it.partial, it.partialN = q, n
			s.alloc(alloc)
			return true
		}
		offset += float64(n + reserve(q))
		s.chunked = nil
		it.prefill, it.chunks = append(it.prefill, q), append(it.chunks, n)
	}
	admitted := len(it.prefill)
	var taken []*req
	for _, q := range s.order(at) {
		if len(s.running)+admitted >= s.cfg.MaxRunning || remChunk <= 0 || remInput <= 0 || remTotal() <= 0 {
			break
		}
		last, cached := s.tree.match(q.input, true, at)
		// With a host tier the match runs on through prefixes held only
		// in host memory (inHost of its tokens); they are loaded back
		// if there are at least LoadBackThreshold of them, else computed
		// again (init_load_back, load_back).
		dev, inHost := s.tree.device(last)
		if inHost < LoadBackThreshold {
			last, cached, inHost = dev, cached-inHost, 0
		}
		extend := q.inputLen - cached
		// What is loaded needs device memory as what is computed does
		// (extend_input_len counts both), but no chunk budget
		// (schedule_policy.py, add_one_req: real_input_tokens).
		total := float64(extend + inHost + reserve(q))
		if total >= remTotal() {
			break // NO_TOKEN: the adder stops at the first refusal
		}
		if extend >= remInput && admitted > 0 {
			break
		}
		s.tree.lock(dev)
		if total >= remTotal() { // locking took evictable tokens
			s.tree.unlock(dev)
			break
		}
		if inHost > 0 {
			if short := inHost - s.available(); short > 0 {
				s.tree.pin(last, true) // a write_back eviction may need host room
				freed := s.tree.evict(short)
				s.tree.pin(last, false)
				s.used -= freed
				s.stats.Evicted += int64(freed)
			}
			s.used += s.tree.load(last)
			s.tree.unlock(dev)
			s.tree.lock(last)
			avail = s.available()
			it.loaded += inHost
			q.done.Loaded += inHost
			s.stats.Loaded += int64(inHost)
		}
		taken = append(taken, q)
		q.node, q.treeLen, q.filled = last, cached, cached
		if q.done.Retracted == 0 && q.done.Prefilled == 0 {
			q.done.Cached = cached
		}
		s.stats.Cached += int64(cached)
		n := min(extend, remChunk)
		take(q, n)
		admitted++
		if q.filled < q.inputLen {
			offset += float64(n)
			s.chunked = q
			it.partial, it.partialN = q, n
			break
		}
		offset += float64(n + reserve(q))
		it.prefill, it.chunks = append(it.prefill, q), append(it.chunks, n)
	}
	if len(taken) > 0 {
		s.unqueue(taken)
	}
	if len(it.prefill) == 0 && it.partial == nil {
		return false
	}
	s.alloc(alloc)
	return true
}

// unqueue takes the requests admitted out of the waiting queue: under fcfs
// they are its head.
func (s *Server) unqueue(taken []*req) {
	if len(taken) <= len(s.waiting) && slices.Equal(s.waiting[:len(taken)], taken) {
		s.waiting = s.waiting[len(taken):]
		return
	}
	in := make(map[*req]bool, len(taken))
	for _, q := range taken {
		in[q] = true
	}
	s.waiting = slices.DeleteFunc(s.waiting, func(x *req) bool { return in[x] })
}

// order is the waiting queue in the policy's order: arrival (fcfs), or
// longest cached prefix first (lpm) while at most LPMQueueLimit wait.
func (s *Server) order(at float64) []*req {
	if s.cfg.Policy != PolicyLPM || len(s.waiting) > LPMQueueLimit {
		return s.waiting
	}
	q := slices.Clone(s.waiting)
	matched := make(map[*req]int, len(q))
	for _, r := range q {
		_, matched[r] = s.tree.match(r.input, false, at)
	}
	slices.SortStableFunc(q, func(a, b *req) int { return matched[b] - matched[a] })
	return q
}

// formDecode builds the decode batch: every running request, after making
// room for one token each by evicting the cache and, when that is not
// enough, retracting requests (check_decode_mem, retract_decode).
func (s *Server) formDecode(it *iteration, at float64) {
	if len(s.running) == 0 {
		return
	}
	if s.free() < len(s.running) {
		s.retract(at)
	} else {
		s.ratio = max(s.ratio-s.decay, s.minR)
	}
	s.alloc(len(s.running))
	for _, q := range s.running {
		q.kvOut++
	}
	it.decode = append(it.decode, s.running...)
}

// retract takes requests out of the running batch, fewest output tokens
// first (ties: longest input first), until the rest can decode a step, or
// one is left; their private KV is freed, their prefix stays cached
// (unlocked), and they go to the back of the waiting queue with their
// output so far as part of their input.
func (s *Server) retract(at float64) {
	slices.SortStableFunc(s.running, func(a, b *req) int {
		if a.out != b.out {
			return b.out - a.out
		}
		return a.origin - b.origin
	})
	for len(s.running) > 1 && s.free() < len(s.running) {
		q := s.running[len(s.running)-1]
		s.running = s.running[:len(s.running)-1]
		s.freeKV(q, at, false)
		q.inRunning = false
		q.input = slices.Clone(q.with(q.out))
		q.inputLen = q.origin + q.out
		q.done.Retracted++
		s.stats.Retractions++
		s.waiting = append(s.waiting, q)
	}
	var outs, maxNew int
	for _, q := range s.running {
		outs += q.out
		maxNew += q.MaxNew
	}
	s.ratio = min(1, float64(outs+RetractDecodeSteps*len(s.running))/float64(maxNew+1))
}

// available is the pool's free tokens; free adds what eviction could free.
func (s *Server) available() int { return s.cfg.MaxTotalTokens - s.used }
func (s *Server) free() int      { return s.available() + s.tree.evictable }

// alloc takes n tokens from the pool, evicting cached prefixes as needed.
func (s *Server) alloc(n int) {
	if short := n - s.available(); short > 0 {
		freed := s.tree.evict(short)
		s.used -= freed
		s.stats.Evicted += int64(freed)
	}
	s.used += n
	if s.used > s.cfg.MaxTotalTokens {
		// Admission and retraction keep this from happening; a caller
		// that submits an input larger than the pool gets here.
		panic(fmt.Sprintf("batching: pool over-committed: %d of %d tokens", s.used, s.cfg.MaxTotalTokens))
	}
}

// check verifies the pool accounting (tests).
func (s *Server) check() error {
	private := 0
	for _, q := range s.byID {
		private += q.held()
	}
	if got := s.tree.tokens + private; got != s.used {
		return fmt.Errorf("pool: %d used, but tree %d + private %d = %d", s.used, s.tree.tokens, private, got)
	}
	if s.used > s.cfg.MaxTotalTokens || s.used < 0 {
		return fmt.Errorf("pool: %d used of %d", s.used, s.cfg.MaxTotalTokens)
	}
	if err := s.tree.checkHost(); err != nil {
		return err
	}
	if math.IsNaN(s.ratio) {
		return errors.New("new_token_ratio is NaN")
	}
	return nil
}
