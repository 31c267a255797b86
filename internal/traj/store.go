package traj

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
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

// Hash fields of actloop:traj:{id}.
const (
	FieldStatus      = "status"
	FieldSeq         = "seq"
	FieldReplica     = "replica"
	FieldOwner       = "owner"
	FieldHandle      = "handle"
	FieldAction      = "action"
	FieldReason      = "reason"
	FieldDiff        = "diff"
	FieldTests       = "tests" // JSON object: each listed test's outcome in the eval
	FieldReward      = "reward"
	FieldTrace       = "trace"
	FieldSample      = "sample"
	FieldCalls       = "calls"
	FieldCommands    = "commands"
	FieldGenTokens   = "gen_tokens"
	FieldPromptLen   = "prompt_len"
	FieldGenCtx      = "gen_ctx"      // context length the server saw at the end of the last generation
	FieldRID         = "rid"          // request id of an interrupted generation, kept for its resume
	FieldTurnGen     = "turn_gen"     // tokens generated in the current turn before an interruption
	FieldPreempts    = "preempts"     // times the trajectory's generations were preempted
	FieldPreemptedAt = "preempted_at" // when last preempted (unix ms)
	FieldRestarts    = "restarts"     // times started again because it went stale
	FieldAdmittedAt  = "admitted_at"
	FieldUpdatedAt   = "updated_at"
	FieldFinishedAt  = "finished_at"
)

// Errors.
var (
	ErrNotFound = errors.New("trajectory not found")
	// ErrStale: the step was already committed (the trajectory's seq moved on).
	ErrStale  = errors.New("stale step")
	ErrExists = errors.New("trajectory exists")
)

// Trajectory is the state of one trajectory as Load returns it.
type Trajectory struct {
	ID        string
	Status    Status
	Seq       int64
	Replica   string
	Owner     string
	Handle    string
	Action    string
	Reason    string
	Diff      string
	Tests     map[string]string // per-test outcome of the eval, for samples that list tests
	Reward    float64
	Trace     string
	Sample    schema.Sample
	Calls     int
	Commands  int
	GenTokens int
	PromptLen int
	// RID and TurnGen describe an interrupted generation: its request id and
	// how many tokens of the current turn it produced (already appended).
	RID         string
	TurnGen     int
	GenCtx      int
	Preempts    int
	Restarts    int
	PreemptedAt time.Time
	AdmittedAt  time.Time
	UpdatedAt   time.Time
	FinishedAt  time.Time

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
}

// New returns a Store over rdb. now is the clock (time.Now when nil).
func New(rdb redis.UniversalClient, now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{rdb: rdb, now: now}
}

type keys struct{ hash, msgs, tok, lp, mask, ver string }

func keysOf(id string) keys {
	base := "actloop:traj:{" + id + "}"
	return keys{base, base + ":msgs", base + ":tok", base + ":lp", base + ":mask", base + ":ver"}
}

func (k keys) all() []string { return []string{k.hash, k.msgs, k.tok, k.lp, k.mask, k.ver} }

// Create stores a new trajectory at seq 0 with the given status, sample and
// fields. It returns ErrExists, changing nothing, if the trajectory exists.
func (s *Store) Create(ctx context.Context, sample schema.Sample, status Status, fields map[string]string) error {
	if !schema.ValidID(sample.ID) {
		return fmt.Errorf("create: invalid trajectory id %q", sample.ID)
	}
	sj, err := json.Marshal(sample)
	if err != nil {
		return fmt.Errorf("create %s: %w", sample.ID, err)
	}
	now := strconv.FormatInt(s.now().UnixMilli(), 10)
	args := []any{FieldStatus, string(status), FieldSeq, "0", FieldSample, string(sj),
		FieldAdmittedAt, now, FieldUpdatedAt, now}
	for k, v := range fields {
		args = append(args, k, v)
	}
	n, err := createScript.Run(ctx, s.rdb, keysOf(sample.ID).all()[:1], args...).Int()
	if err != nil {
		return fmt.Errorf("create %s: %w", sample.ID, err)
	}
	if n == 0 {
		return ErrExists
	}
	return nil
}

var createScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
`)

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
	t, err := parseHash(id, h)
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

// decodeTests reads FieldTests; what this package wrote always decodes, so
// anything else reads as no outcomes.
func decodeTests(v string) map[string]string {
	if v == "" {
		return nil
	}
	var m map[string]string
	if json.Unmarshal([]byte(v), &m) != nil {
		return nil
	}
	return m
}

func parseHash(id string, h map[string]string) (*Trajectory, error) {
	t := &Trajectory{
		ID: id, Status: Status(h[FieldStatus]), Replica: h[FieldReplica], Owner: h[FieldOwner],
		Handle: h[FieldHandle], Action: h[FieldAction], Reason: h[FieldReason], Diff: h[FieldDiff],
		Trace: h[FieldTrace], RID: h[FieldRID], Tests: decodeTests(h[FieldTests]),
	}
	var err error
	intField := func(name string) int64 {
		v, ok := h[name]
		if !ok || err != nil {
			return 0
		}
		n, e := strconv.ParseInt(v, 10, 64)
		if e != nil {
			err = fmt.Errorf("field %s: %w", name, e)
		}
		return n
	}
	t.Seq = intField(FieldSeq)
	t.Calls = int(intField(FieldCalls))
	t.Commands = int(intField(FieldCommands))
	t.GenTokens = int(intField(FieldGenTokens))
	t.PromptLen = int(intField(FieldPromptLen))
	t.TurnGen = int(intField(FieldTurnGen))
	t.GenCtx = int(intField(FieldGenCtx))
	t.Preempts = int(intField(FieldPreempts))
	t.Restarts = int(intField(FieldRestarts))
	t.PreemptedAt = msTime(intField(FieldPreemptedAt))
	t.AdmittedAt = msTime(intField(FieldAdmittedAt))
	t.UpdatedAt = msTime(intField(FieldUpdatedAt))
	t.FinishedAt = msTime(intField(FieldFinishedAt))
	if err != nil {
		return nil, err
	}
	if v, ok := h[FieldReward]; ok {
		if t.Reward, err = strconv.ParseFloat(v, 64); err != nil {
			return nil, fmt.Errorf("field %s: %w", FieldReward, err)
		}
	}
	if err := json.Unmarshal([]byte(h[FieldSample]), &t.Sample); err != nil {
		return nil, fmt.Errorf("field %s: %w", FieldSample, err)
	}
	return t, nil
}

func msTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// Commit is one step's change to a trajectory: it applies only if the
// trajectory is at Seq, and moves it to Seq+1.
type Commit struct {
	ID  string
	Seq int64
	// Set overwrites hash fields (see the Field constants).
	Set map[string]string
	// Reset empties the message list and the token arrays before Messages
	// and Tokens are appended: the trajectory starts again.
	Reset bool
	// Messages are appended to the message list.
	Messages []schema.Message
	// Tokens are appended with one entry each in Logprobs, Mask and
	// Versions.
	Tokens   []int32
	Logprobs []float32
	Mask     []int8
	Versions []int32
}

// Append adds tokens with their log-probs, mask and versions to c.
func (c *Commit) Append(tokens []int32, logprobs []float32, mask int8, version int32) {
	c.Tokens = append(c.Tokens, tokens...)
	for i := range tokens {
		var lp float32
		if logprobs != nil {
			lp = logprobs[i]
		}
		c.Logprobs = append(c.Logprobs, lp)
		c.Mask = append(c.Mask, mask)
		c.Versions = append(c.Versions, version)
	}
}

// Commit applies c atomically. It returns ErrStale, changing nothing, if the
// trajectory is no longer at c.Seq, and ErrNotFound if it does not exist.
func (s *Store) Commit(ctx context.Context, c Commit) error {
	_, err := s.CommitReplica(ctx, c)
	return err
}

// CommitReplica is Commit that also returns the replica the trajectory is on
// as of the commit: the coordinator may have moved it (SetReplica) since it
// was loaded, and its next gen step must go to the new one.
func (s *Store) CommitReplica(ctx context.Context, c Commit) (string, error) {
	n := len(c.Tokens)
	if len(c.Logprobs) != n || len(c.Mask) != n || len(c.Versions) != n {
		return "", fmt.Errorf("commit %s seq %d: token arrays differ in length (%d, %d, %d, %d)",
			c.ID, c.Seq, n, len(c.Logprobs), len(c.Mask), len(c.Versions))
	}
	args := make([]any, 0, 9+2*len(c.Set)+len(c.Messages))
	reset := 0
	if c.Reset {
		reset = 1
	}
	args = append(args, c.Seq, s.now().UnixMilli(),
		packInt32(c.Tokens), packFloat32(c.Logprobs), packInt8(c.Mask), packInt32(c.Versions),
		len(c.Set), reset)
	for k, v := range c.Set {
		if k == FieldSeq {
			return "", fmt.Errorf("commit %s seq %d: seq is set by the commit itself", c.ID, c.Seq)
		}
		args = append(args, k, v)
	}
	for _, m := range c.Messages {
		b, err := json.Marshal(m)
		if err != nil {
			return "", fmt.Errorf("commit %s seq %d: %w", c.ID, c.Seq, err)
		}
		args = append(args, string(b))
	}
	res, err := commitScript.Run(ctx, s.rdb, keysOf(c.ID).all(), args...).Slice()
	if err != nil || len(res) != 3 {
		return "", fmt.Errorf("commit %s seq %d: %w (reply %v)", c.ID, c.Seq, err, res)
	}
	code, _ := res[0].(int64)
	now, _ := res[1].(int64)
	replica, _ := res[2].(string)
	switch code {
	case 1:
		return replica, nil
	case 0:
		return "", fmt.Errorf("commit %s seq %d (now %d): %w", c.ID, c.Seq, now, ErrStale)
	default:
		return "", fmt.Errorf("commit %s seq %d: %w", c.ID, c.Seq, ErrNotFound)
	}
}

// commitScript checks everything before its first write: Lua in Redis has no
// rollback.
var commitScript = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], 'seq')
if not cur then return {-1, 0, ''} end
cur = tonumber(cur)
if cur ~= tonumber(ARGV[1]) then return {0, cur, ''} end
local nset = tonumber(ARGV[7])
local h = {'seq', cur + 1, 'updated_at', ARGV[2]}
for i = 9, 8 + 2 * nset do h[#h + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(h))
if ARGV[8] == '1' then
  redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6])
end
if #ARGV[3] > 0 then
  redis.call('APPEND', KEYS[3], ARGV[3])
  redis.call('APPEND', KEYS[4], ARGV[4])
  redis.call('APPEND', KEYS[5], ARGV[5])
  redis.call('APPEND', KEYS[6], ARGV[6])
end
local first = 9 + 2 * nset
if #ARGV >= first then
  redis.call('RPUSH', KEYS[2], unpack(ARGV, first, #ARGV))
end
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
		cmds[i] = pipe.HMGet(ctx, keysOf(id).hash, FieldSeq, FieldStatus, FieldUpdatedAt, FieldOwner)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("progress: %w", err)
	}
	out := make(map[string]Progress, len(ids))
	for i, c := range cmds {
		v := c.Val()
		if len(v) != 4 || v[0] == nil {
			continue
		}
		seq, _ := strconv.ParseInt(fmt.Sprint(v[0]), 10, 64)
		upd, _ := strconv.ParseInt(fmt.Sprint(v[2]), 10, 64)
		owner, _ := v[3].(string)
		out[ids[i]] = Progress{Seq: seq, Status: Status(fmt.Sprint(v[1])), UpdatedAt: msTime(upd), Owner: owner}
	}
	return out, nil
}

// Progress is what Progress reports of one trajectory.
type Progress struct {
	Seq       int64
	Status    Status
	UpdatedAt time.Time
	Owner     string // the env-worker holding its sandbox ("" before one started it)
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

// Apply updates a loaded trajectory with what c committed, so a worker can
// derive the follow-up (or the result) without loading again. Messages and
// tokens are appended only if they were loaded.
func (t *Trajectory) Apply(c Commit) {
	t.Seq = c.Seq + 1
	h := map[string]string{}
	for k, v := range c.Set {
		h[k] = v
	}
	num := func(name string, dst *int) {
		if v, ok := h[name]; ok {
			*dst, _ = strconv.Atoi(v)
		}
	}
	for k, v := range h {
		switch k {
		case FieldStatus:
			t.Status = Status(v)
		case FieldReason:
			t.Reason = v
		case FieldOwner:
			t.Owner = v
		case FieldHandle:
			t.Handle = v
		case FieldAction:
			t.Action = v
		case FieldRID:
			t.RID = v
		case FieldPreemptedAt:
			ms, _ := strconv.ParseInt(v, 10, 64)
			t.PreemptedAt = msTime(ms)
		case FieldDiff:
			t.Diff = v
		case FieldTests:
			t.Tests = decodeTests(v)
		case FieldReward:
			t.Reward, _ = strconv.ParseFloat(v, 64)
		case FieldFinishedAt:
			ms, _ := strconv.ParseInt(v, 10, 64)
			t.FinishedAt = msTime(ms)
		}
	}
	num(FieldCalls, &t.Calls)
	num(FieldCommands, &t.Commands)
	num(FieldGenTokens, &t.GenTokens)
	num(FieldPromptLen, &t.PromptLen)
	num(FieldTurnGen, &t.TurnGen)
	num(FieldGenCtx, &t.GenCtx)
	num(FieldPreempts, &t.Preempts)
	num(FieldRestarts, &t.Restarts)
	if c.Reset {
		if t.Messages != nil {
			t.Messages = t.Messages[:0]
		}
		if t.Tokens != nil {
			t.Tokens, t.Logprobs, t.Mask, t.Versions = t.Tokens[:0], t.Logprobs[:0], t.Mask[:0], t.Versions[:0]
		}
	}
	if t.Messages != nil {
		t.Messages = append(t.Messages, c.Messages...)
	}
	if t.Tokens != nil {
		t.Tokens = append(t.Tokens, c.Tokens...)
		t.Logprobs = append(t.Logprobs, c.Logprobs...)
		t.Mask = append(t.Mask, c.Mask...)
		t.Versions = append(t.Versions, c.Versions...)
	}
}
