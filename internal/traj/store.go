package traj

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/actloop/actloop/pkg/schema"
)

// Status is where a trajectory is in its life.
type Status string

// Statuses (siiRL-agentic's StepStatus, plus the start and finish phases).
const (
	StatusStarting        Status = "starting"         // admitted; sandbox not yet up
	StatusNeedsGeneration Status = "needs_generation" // next: a gen step
	StatusNeedsEnvStep    Status = "needs_env_step"   // next: run the pending action
	StatusFinishing       Status = "finishing"        // next: diff, eval, result
	StatusTerminated      Status = "terminated"       // result published
	StatusAborted         Status = "aborted"          // fallback result published
)

// Terminal reports whether no step follows.
func (s Status) Terminal() bool { return s == StatusTerminated || s == StatusAborted }

// Errors.
var (
	ErrNotFound = errors.New("trajectory not found")
	// ErrStale: the step was already committed (the trajectory's seq moved on).
	ErrStale  = errors.New("stale step")
	ErrExists = errors.New("trajectory exists")
)

// Trajectory is the state of one trajectory as Load returns it. Only
// transitions change it (Store.Commit); its hash fields are in fields
// (codec.go).
type Trajectory struct {
	ID      string
	Status  Status
	Seq     int64
	Replica string
	Owner   string
	Handle  string
	Action  string
	// End is the result's status once the trajectory's end is known
	// (schema.StatusSubmitted, …), Limit the limit that ended it.
	End    string
	Limit  string
	Reason string
	Diff   string
	Tests  map[string]string // per-test outcome of the eval, for samples that list tests
	Reward float64
	// RewardComponents are the reward's named parts, RewardError why the
	// reward endpoint gave none (schema.ResultHead's fields).
	RewardComponents map[string]float64
	RewardError      string
	Trace            string
	Sample           schema.Sample
	Calls            int
	Commands         int
	GenTokens        int
	PromptLen        int
	// RID is the trajectory's request id, made at its first generation and
	// kept across its turns, resumes and moves, so the engine sees one
	// multi-turn request. Resuming and TurnGen describe an interrupted
	// generation: its next generation resumes it, and how many tokens of
	// the current turn it produced (already appended).
	RID      string
	Resuming bool
	TurnGen  int
	GenCtx   int
	Preempts int
	Restarts int
	// LastExit and LastObs are the last command's exit code and its
	// observation's tokens (0 before the first): what a remaining-length
	// predictor reads of it.
	LastExit int
	LastObs  int
	// FormatErrors counts the model's turns in a row without a valid
	// action (limits.format_error_limit).
	FormatErrors int
	// Digests holds a digest of each command's outcome (ExecDigest), one
	// per command run, space-separated: what a replay of the commands in a
	// rebuilt sandbox is checked against. Replays counts the sandboxes
	// rebuilt by replay; Diverged the replayed commands whose outcome
	// differed from the first run.
	Digests  string
	Replays  int
	Diverged int
	// Replaced counts the commands whose output held invalid UTF-8, which
	// the observation holds replaced with U+FFFD (sandbox.ExecResult.Replaced).
	Replaced int
	// Run is 0 for a trajectory's first run, and counts the times it was
	// admitted again after its state was lost: its seqs start over, so its
	// work messages carry the run in their ids (MsgID).
	Run int
	// Proxy flow: Segment is where the current segment of the token
	// stream starts (a generation's input is the stream from there), and
	// SegmentStarts where each one started, in order. Call is the pending
	// call's own sampling fields as JSON (proxy.SamplingFields; "" for
	// none), Finish how the last turn's generation ended (JSON of an
	// llm.Finish; "" for none).
	Segment       int
	SegmentStarts []int
	Call          string
	Finish        string
	PreemptedAt   time.Time
	AdmittedAt    time.Time
	UpdatedAt     time.Time
	FinishedAt    time.Time

	// Filled only when loaded with WithMessages / WithTokens (Tokens alone
	// with WithTokenIDs).
	Messages []schema.Message
	Tokens   []int32
	Logprobs []float32
	Mask     []int8
	Versions []int32
}

// Parts selects what Load reads beyond the hash.
type Parts uint8

// Parts of a trajectory.
const (
	WithMessages Parts                 = 1 << iota
	WithTokenIDs                       // the token ids only: a generation's context
	WithTokens   = 1<<2 | WithTokenIDs // ids, log-probs, mask and versions
	WithAll      = WithMessages | WithTokens
)

// Store reads and writes trajectories in Redis.
type Store struct {
	rdb redis.UniversalClient
	now func() time.Time
	// term fences the writes of a coordinator's term (see Fenced); 0 for
	// the workers' writes, which are not fenced.
	term     uint64
	onFenced func(error)
}

// ErrFenced: a write of a coordinator whose term is over: a coordinator of
// a later term (a newer leader lease) has stamped the trajectory.
var ErrFenced = errors.New("fenced: a coordinator of a later term leads")

// fieldTerm holds the latest coordinator term that wrote the trajectory.
// Like fieldLease it is not a field of Trajectory: it guards writes, it is
// not state.
const fieldTerm = "term"

// Fenced returns a Store over the same Redis whose writes (Create, Commit,
// SetReplica, SetOwner) carry term, the leader lease's revision of a
// coordinator's term: each stamps the trajectory with it, and is refused
// with ErrFenced when the trajectory carries a later one. onFenced, if not
// nil, is told of every refusal (the coordinator steps down). Stamp marks
// the trajectories a new term takes over.
func (s *Store) Fenced(term uint64, onFenced func(error)) *Store {
	f := *s
	f.term, f.onFenced = term, onFenced
	return &f
}

// fenced turns a refused write into ErrFenced and tells onFenced.
func (s *Store) fenced(what string) error {
	err := fmt.Errorf("%s: %w (this term: %d)", what, ErrFenced, s.term)
	if s.onFenced != nil {
		s.onFenced(err)
	}
	return err
}

// Stamp marks each of ids (those that exist) with this Store's term, so
// that a coordinator of an earlier term can no longer write them. It
// returns ErrFenced if one already carries a later term.
func (s *Store) Stamp(ctx context.Context, ids []string) error {
	if s.term == 0 {
		return nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(ids))
	for i, id := range ids {
		cmds[i] = stampScript.Eval(ctx, pipe, []string{keysOf(id).hash}, s.term)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("stamp term %d: %w", s.term, err)
	}
	for i, c := range cmds {
		if n, _ := c.Int(); n == -2 {
			return s.fenced("stamp " + ids[i])
		}
	}
	return nil
}

// fenceLua reads ARGV[1], a term, into term, and sets fenced when the
// trajectory KEYS[1] carries a later one: the script must then refuse the
// write (-2) before its first. A term of 0 (a worker's write) is never
// fenced. Scripts that use it take the term as their first argument.
const fenceLua = `
local term = tonumber(ARGV[1])
local fenced = term > 0 and tonumber(redis.call('HGET', KEYS[1], 'term') or '0') > term
`

// stampLua stores the term checked by fenceLua.
const stampLua = `
if term > 0 then redis.call('HSET', KEYS[1], 'term', term) end
`

var stampScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
` + fenceLua + `
if fenced then return -2 end
` + stampLua + `
return 1
`)

// New returns a Store over rdb. now is the clock (time.Now when nil).
func New(rdb redis.UniversalClient, now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{rdb: rdb, now: now}
}

type keys struct{ hash, msgs, tok, lp, mask, ver, audit, exec string }

func keysOf(id string) keys {
	base := "actloop:traj:{" + id + "}"
	return keys{base, base + ":msgs", base + ":tok", base + ":lp", base + ":mask", base + ":ver", base + ":audit", base + ":exec"}
}

// all is every key of a trajectory, in the order commitScript takes them.
func (k keys) all() []string {
	return []string{k.hash, k.msgs, k.tok, k.lp, k.mask, k.ver, k.audit, k.exec}
}

// ExecRecord is the outcome of the command of step Seq, recorded as soon
// as it ran and before the step's commit: a delivery of the step after a
// crash between the two finds it and does not run the command again.
type ExecRecord struct {
	Run        int    `json:"run,omitempty"` // the trajectory's run (Trajectory.Run)
	Seq        int64  `json:"seq"`
	Output     string `json:"output"`
	ReturnCode int    `json:"return_code"`
	TimedOut   bool   `json:"timed_out,omitempty"`
	Truncated  bool   `json:"truncated,omitempty"`
	Replaced   bool   `json:"replaced,omitempty"`
}

// RecordExec records the outcome of a trajectory's command (one record a
// trajectory: each replaces the last).
func (s *Store) RecordExec(ctx context.Context, id string, r ExecRecord) error {
	b, err := json.Marshal(r)
	if err == nil {
		err = s.rdb.Set(ctx, keysOf(id).exec, b, 0).Err()
	}
	if err != nil {
		return fmt.Errorf("record the command of %s step %d: %w", id, r.Seq, err)
	}
	return nil
}

// RecordedExec returns the recorded outcome of the command of step seq of
// run, if there is one.
func (s *Store) RecordedExec(ctx context.Context, id string, run int, seq int64) (ExecRecord, bool, error) {
	b, err := s.rdb.Get(ctx, keysOf(id).exec).Bytes()
	if errors.Is(err, redis.Nil) {
		return ExecRecord{}, false, nil
	}
	if err != nil {
		return ExecRecord{}, false, fmt.Errorf("recorded command of %s: %w", id, err)
	}
	var r ExecRecord
	if json.Unmarshal(b, &r) != nil || r.Run != run || r.Seq != seq {
		return ExecRecord{}, false, nil // another step's, or unreadable: none for this one
	}
	return r, true, nil
}

// Admission is a new trajectory: its sample, the replica it is assigned
// to and the traceparent of its root span.
type Admission struct {
	Sample  schema.Sample
	Replica string
	Trace   string
	Run     int // 0, or the re-admission (see Trajectory.Run)
}

// Create stores a new trajectory at seq 0, starting. It returns ErrExists,
// changing nothing, if the trajectory exists.
func (s *Store) Create(ctx context.Context, a Admission) error {
	if !schema.ValidID(a.Sample.ID) {
		return fmt.Errorf("create: invalid trajectory id %q", a.Sample.ID)
	}
	now := s.now()
	t := &Trajectory{ID: a.Sample.ID, Status: StatusStarting, Sample: a.Sample, Replica: a.Replica, Trace: a.Trace,
		AdmittedAt: now, UpdatedAt: now, Run: a.Run}
	args := append([]any{s.term, fieldSeq, "0"}, encodeFields(&Trajectory{}, t, false)...)
	k := keysOf(t.ID)
	args = append(args, auditEntry(0, "Created", now))
	n, err := createScript.Run(ctx, s.rdb, []string{k.hash, k.audit}, args...).Int()
	if err != nil {
		return fmt.Errorf("create %s: %w", t.ID, err)
	}
	if n == 0 {
		return ErrExists
	}
	return nil
}

var createScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local term = tonumber(ARGV[1])
redis.call('HSET', KEYS[1], unpack(ARGV, 2, #ARGV - 1))
redis.call('RPUSH', KEYS[2], ARGV[#ARGV])
` + stampLua + `
return 1
`)

// auditEntry is one line of a trajectory's audit log: "<seq> <what> <unix
// ms>", seq being the one the write produced.
func auditEntry(seq int64, what string, at time.Time) string {
	return fmt.Sprintf("%d %s %d", seq, what, at.UnixMilli())
}

// Audit returns a trajectory's audit log: one line per write that moved
// its seq, in order ("<seq> <transition> <unix ms>", starting with "0
// Created …"). It is appended in the same script as each write, so a
// checker outside actloop can tell from it alone whether a step was
// applied twice (a seq twice) or lost (a gap). Put does not write it.
func (s *Store) Audit(ctx context.Context, id string) ([]string, error) {
	l, err := s.rdb.LRange(ctx, keysOf(id).audit, 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("audit of %s: %w", id, err)
	}
	return l, nil
}

// Put stores t whole, messages and tokens included, replacing whatever was
// stored under its id: a state seeded by a test or a tool, not a step.
func (s *Store) Put(ctx context.Context, t *Trajectory) error {
	n := len(t.Tokens)
	if len(t.Logprobs) != n || len(t.Mask) != n || len(t.Versions) != n {
		return fmt.Errorf("put %s: token arrays differ in length (%d, %d, %d, %d)",
			t.ID, n, len(t.Logprobs), len(t.Mask), len(t.Versions))
	}
	k := keysOf(t.ID)
	pipe := s.rdb.TxPipeline()
	pipe.Del(ctx, k.all()...)
	pipe.HSet(ctx, k.hash, encodeFields(&Trajectory{Seq: -1}, t, false)...)
	for _, m := range t.Messages {
		b, err := json.Marshal(m)
		if err != nil {
			return fmt.Errorf("put %s: %w", t.ID, err)
		}
		pipe.RPush(ctx, k.msgs, string(b))
	}
	if n > 0 {
		pipe.Set(ctx, k.tok, packInt32(t.Tokens), 0)
		pipe.Set(ctx, k.lp, packFloat32(t.Logprobs), 0)
		pipe.Set(ctx, k.mask, packInt8(t.Mask), 0)
		pipe.Set(ctx, k.ver, packInt32(t.Versions), 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("put %s: %w", t.ID, err)
	}
	return nil
}

// Load reads a trajectory in one round trip: the hash, plus the parts asked
// for, in one MULTI so a concurrent commit is seen whole or not at all.
func (s *Store) Load(ctx context.Context, id string, parts Parts) (*Trajectory, error) {
	k := keysOf(id)
	pipe := s.rdb.TxPipeline()
	hash := pipe.HGetAll(ctx, k.hash)
	var msgs *redis.StringSliceCmd
	var tok, lp, mask, ver *redis.StringCmd
	if parts&WithMessages != 0 {
		msgs = pipe.LRange(ctx, k.msgs, 0, -1)
	}
	if parts&WithTokenIDs != 0 {
		tok = pipe.Get(ctx, k.tok)
	}
	if parts&WithTokens == WithTokens {
		lp, mask, ver = pipe.Get(ctx, k.lp), pipe.Get(ctx, k.mask), pipe.Get(ctx, k.ver)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("load %s: %w", id, err)
	}
	h := hash.Val()
	if len(h) == 0 {
		return nil, fmt.Errorf("load %s: %w", id, ErrNotFound)
	}
	t, err := decodeHash(id, h)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", id, err)
	}
	if msgs != nil {
		t.Messages = make([]schema.Message, len(msgs.Val()))
		for i, m := range msgs.Val() {
			if err := json.Unmarshal([]byte(m), &t.Messages[i]); err != nil {
				return nil, fmt.Errorf("load %s: message %d: %w", id, i, err)
			}
		}
	}
	if tok != nil {
		t.Tokens = unpackInt32(tok.Val())
	}
	if lp != nil {
		t.Logprobs = unpackFloat32(lp.Val())
		t.Mask = unpackInt8(mask.Val())
		t.Versions = unpackInt32(ver.Val())
		n := len(t.Tokens)
		if len(t.Logprobs) != n || len(t.Mask) != n || len(t.Versions) != n {
			return nil, fmt.Errorf("load %s: token arrays differ in length (%d, %d, %d, %d)",
				id, n, len(t.Logprobs), len(t.Mask), len(t.Versions))
		}
	}
	return t, nil
}

// Commit applies transition tr to t atomically: only if the stored
// trajectory is still at t.Seq, moving it to t.Seq+1. On success t is the
// new state: its fields, its messages and tokens (those it was loaded
// with) and its replica as of the commit (the coordinator may have moved
// it, SetReplica, since it was loaded: its next gen step goes to the new
// one). It returns ErrStale, changing nothing, if the trajectory is no
// longer at t.Seq, ErrNotFound if it does not exist, and ErrTransition if
// t's status does not allow tr.
func (s *Store) Commit(ctx context.Context, t *Trajectory, tr Transition) error {
	now := s.now()
	after := *t
	a, err := tr.apply(&after, now)
	if err != nil {
		return fmt.Errorf("commit %s seq %d: %w", t.ID, t.Seq, err)
	}
	if a.uneven {
		return fmt.Errorf("commit %s seq %d: %T: log-probs and tokens differ in length", t.ID, t.Seq, tr)
	}
	set := encodeFields(t, &after, true)
	args := make([]any, 0, 8+len(set)+len(a.messages))
	reset := 0
	if a.reset {
		reset = 1
	}
	args = append(args, s.term, t.Seq, now.UnixMilli(),
		packInt32(a.tokens), packFloat32(a.logprobs), packInt8(a.mask), packInt32(a.versions),
		len(set)/2, reset)
	args = append(args, set...)
	for _, m := range a.messages {
		b, err := json.Marshal(m)
		if err != nil {
			return fmt.Errorf("commit %s seq %d: %w", t.ID, t.Seq, err)
		}
		args = append(args, string(b))
	}
	args = append(args, strings.TrimPrefix(strings.TrimLeft(fmt.Sprintf("%T", tr), "*"), "traj."))
	res, err := commitScript.Run(ctx, s.rdb, keysOf(t.ID).all(), args...).Slice()
	if err != nil || len(res) != 3 {
		return fmt.Errorf("commit %s seq %d: %w (reply %v)", t.ID, t.Seq, err, res)
	}
	code, _ := res[0].(int64)
	cur, _ := res[1].(int64)
	replica, _ := res[2].(string)
	switch code {
	case 1:
	case 0:
		return fmt.Errorf("commit %s seq %d (now %d): %w", t.ID, t.Seq, cur, ErrStale)
	case -2:
		return s.fenced(fmt.Sprintf("commit %s seq %d", t.ID, t.Seq))
	default:
		return fmt.Errorf("commit %s seq %d: %w", t.ID, t.Seq, ErrNotFound)
	}
	after.Seq, after.UpdatedAt, after.Replica = t.Seq+1, now, replica
	if a.reset {
		if after.Messages != nil {
			after.Messages = after.Messages[:0:0]
		}
		if after.Tokens != nil {
			after.Tokens = after.Tokens[:0:0]
			if after.Logprobs != nil {
				after.Logprobs, after.Mask, after.Versions = after.Logprobs[:0:0], after.Mask[:0:0], after.Versions[:0:0]
			}
		}
	}
	if after.Messages != nil {
		after.Messages = append(after.Messages, a.messages...)
	}
	if after.Tokens != nil {
		after.Tokens = append(after.Tokens, a.tokens...)
		if after.Logprobs != nil {
			after.Logprobs = append(after.Logprobs, a.logprobs...)
			after.Mask = append(after.Mask, a.mask...)
			after.Versions = append(after.Versions, a.versions...)
		}
	}
	*t = after
	return nil
}

// commitScript checks everything before its first write: Lua in Redis has no
// rollback.
var commitScript = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], 'seq')
if not cur then return {-1, 0, ''} end
cur = tonumber(cur)
` + fenceLua + `
if fenced then return {-2, cur, ''} end
if cur ~= tonumber(ARGV[2]) then return {0, cur, ''} end
local nset = tonumber(ARGV[8])
local h = {'seq', cur + 1, 'updated_at', ARGV[3]}
for i = 10, 9 + 2 * nset do h[#h + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(h))
` + stampLua + `
if ARGV[9] == '1' then
  redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6])
end
if #ARGV[4] > 0 then
  redis.call('APPEND', KEYS[3], ARGV[4])
  redis.call('APPEND', KEYS[4], ARGV[5])
  redis.call('APPEND', KEYS[5], ARGV[6])
  redis.call('APPEND', KEYS[6], ARGV[7])
end
local first = 10 + 2 * nset
if #ARGV - 1 >= first then
  redis.call('RPUSH', KEYS[2], unpack(ARGV, first, #ARGV - 1))
end
redis.call('RPUSH', KEYS[7], (cur + 1) .. ' ' .. ARGV[#ARGV] .. ' ' .. ARGV[3])
return {1, cur + 1, redis.call('HGET', KEYS[1], 'replica') or ''}
`)

// Expire makes every key of a trajectory expire after ttl.
func (s *Store) Expire(ctx context.Context, id string, ttl time.Duration) error {
	pipe := s.rdb.Pipeline()
	for _, k := range keysOf(id).all() {
		pipe.PExpire(ctx, k, ttl)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("expire %s: %w", id, err)
	}
	return nil
}

// Progress returns the seq and status of each trajectory in one round trip;
// a missing trajectory is absent from the map.
func (s *Store) Progress(ctx context.Context, ids []string) (map[string]Progress, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HMGet(ctx, keysOf(id).hash, fieldSeq, fieldStatus, fieldUpdatedAt, fieldOwner, fieldLease, fieldReplica)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("progress: %w", err)
	}
	out := make(map[string]Progress, len(ids))
	for i, c := range cmds {
		v := c.Val()
		if len(v) != 6 || v[0] == nil {
			continue
		}
		seq, _ := strconv.ParseInt(fmt.Sprint(v[0]), 10, 64)
		upd, _ := strconv.ParseInt(fmt.Sprint(v[2]), 10, 64)
		owner, _ := v[3].(string)
		lease, _ := v[4].(string)
		replica, _ := v[5].(string)
		out[ids[i]] = Progress{Seq: seq, Status: Status(fmt.Sprint(v[1])), UpdatedAt: msTime(upd), Owner: owner,
			Replica: replica, LeaseUntil: leaseUntil(lease, seq)}
	}
	return out, nil
}

// Progress is what Progress reports of one trajectory.
type Progress struct {
	Seq       int64
	Status    Status
	UpdatedAt time.Time
	Owner     string // the env-worker holding its sandbox ("" before one started it)
	Replica   string // the replica its generations run on
	// LeaseUntil is when the lease of the step running now lapses (zero:
	// no step of this seq holds one).
	LeaseUntil time.Time
}

// fieldLease holds "<seq>:<unix ms>": the step for seq runs, and its lease
// lapses then. It is not a field of Trajectory: a step's liveness, not its
// state, and no transition touches it.
const fieldLease = "lease"

// RenewLease extends the lease of the step for seq of trajectory id to d
// from now. It does nothing when the trajectory is gone or has moved past
// seq (the step committed, or another delivery did).
func (s *Store) RenewLease(ctx context.Context, id string, seq int64, d time.Duration) error {
	until := s.now().Add(d).UnixMilli()
	err := renewLeaseScript.Run(ctx, s.rdb, []string{keysOf(id).hash}, seq, fmt.Sprintf("%d:%d", seq, until)).Err()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("renew lease of %s step %d: %w", id, seq, err)
	}
	return nil
}

var renewLeaseScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'seq') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'lease', ARGV[2])
return 1
`)

// ClaimRID records rid as the request id of trajectory id, at step seq,
// before its first generation is sent, and returns the request id in
// force: rid, or the one another delivery of the step recorded first. So a
// worker that dies during that generation leaves a request its retry knows
// by name (and aborts when the server refuses the rid as a duplicate),
// instead of one under an id no one has. ErrStale: the trajectory moved
// past seq; ErrNotFound: it is gone.
func (s *Store) ClaimRID(ctx context.Context, id string, seq int64, rid string) (string, error) {
	v, err := claimRIDScript.Run(ctx, s.rdb, []string{keysOf(id).hash}, seq, rid).Text()
	switch {
	case errors.Is(err, redis.Nil):
		return "", fmt.Errorf("claim rid of %s: %w", id, ErrNotFound)
	case err != nil:
		return "", fmt.Errorf("claim rid of %s: %w", id, err)
	case v == "":
		return "", fmt.Errorf("claim rid of %s step %d: %w", id, seq, ErrStale)
	}
	return v, nil
}

var claimRIDScript = redis.NewScript(`
local seq = redis.call('HGET', KEYS[1], 'seq')
if not seq then return false end
if seq ~= ARGV[1] then return '' end
local cur = redis.call('HGET', KEYS[1], 'rid')
if cur and cur ~= '' then return cur end
redis.call('HSET', KEYS[1], 'rid', ARGV[2])
return ARGV[2]
`)

// leaseUntil reads a lease field for the trajectory at seq.
func leaseUntil(v string, seq int64) time.Time {
	s, ms, ok := strings.Cut(v, ":")
	if !ok || s != strconv.FormatInt(seq, 10) {
		return time.Time{}
	}
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return time.Time{}
	}
	return msTime(n)
}

func packInt32(v []int32) string {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return string(b)
}

func unpackInt32(s string) []int32 {
	v := make([]int32, len(s)/4)
	for i := range v {
		v[i] = int32(binary.LittleEndian.Uint32([]byte(s[4*i : 4*i+4])))
	}
	return v
}

func packFloat32(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return string(b)
}

func unpackFloat32(s string) []float32 {
	v := make([]float32, len(s)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32([]byte(s[4*i : 4*i+4])))
	}
	return v
}

func packInt8(v []int8) string {
	b := make([]byte, len(v))
	for i, x := range v {
		b[i] = byte(x)
	}
	return string(b)
}

func unpackInt8(s string) []int8 {
	v := make([]int8, len(s))
	for i := range len(s) {
		v[i] = int8(s[i])
	}
	return v
}
