package sim

import (
	"math"
	"slices"
	"strconv"
	"strings"
)

// finishKind is why a planned output ends.
type finishKind int

const (
	finishStopToken finishKind = iota + 1
	finishStopString
	finishLength
)

// plan is the whole output a request gets if nothing interrupts it.
type plan struct {
	ids        []int32
	lps        []float32
	kind       finishKind
	matchedID  int32  // finishStopToken
	matchedStr string // finishStopString
	length     int    // finishLength: max_new_tokens
}

// hash64 takes 64-bit words FNV-1a style (xor, then multiply by the FNV
// prime), each step followed by an xor-shift so that high bits reach low
// ones, and is finished with a splitmix64 mix: stable across runs and
// platforms, which is what determinism needs. Every step is a bijection, so
// two inputs that differ in one word never collide. A word at a time, not a
// byte: the prefix cache hashes every token of every context.
type hash64 uint64

const (
	fnvOffset hash64 = 14695981039346656037
	fnvPrime  hash64 = 1099511628211
)

func (h hash64) add(v uint64) hash64 {
	h = (h ^ hash64(v)) * fnvPrime
	return h ^ h>>32
}

func (h hash64) ids(ids []int32) hash64 {
	for _, id := range ids {
		h = h.add(uint64(uint32(id)))
	}
	return h
}

func (h hash64) sum() uint64 { return mix(uint64(h)) }

// mix is splitmix64's finaliser.
func mix(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// rng is a splitmix64 stream.
type rng uint64

func (r *rng) next() uint64 {
	*r += 0x9e3779b97f4a7c15
	return mix(uint64(*r) - 0x9e3779b97f4a7c15)
}

func (r *rng) intn(n int) int { return int(r.next() % uint64(n)) }

// Submission is the command of an unscripted trajectory's last turn.
const Submission = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"

var words = strings.Fields(`the a file test function error output check run look
fix bug code change build module package import config value path line
first next then now need should will let me see inspect update verify
parse handle return type struct field method call loop case`)

// taskSeed is the hash every unscripted reply of a trajectory derives from:
// Config.Seed and the task prefix, nothing later in the conversation.
func (s *Server) taskSeed(prefix []int32) hash64 {
	return hash64(fnvOffset).add(uint64(s.cfg.Seed)).ids(prefix)
}

// totalTurns is how many turns (1..MaxTurns) the unscripted trajectory of a
// task takes, its submission included.
// totalTurns is long-tailed, as agent trajectories are: u³ for u uniform in
// [0, 1) puts most trajectories at a few turns and a few near MaxTurns.
func (s *Server) totalTurns(seed hash64) int {
	u := float64(seed.sum()>>11) / (1 << 53)
	return 1 + int(float64(s.cfg.MaxTurns)*u*u*u)
}

// script is what an unscripted trajectory plays: derived from its task
// prefix, or fixed by a Directive in its task text.
type script struct {
	seed  hash64
	turns int
	dir   *Directive
}

// scriptOf returns the script of the trajectory whose task prefix is
// prefix. A directive that does not parse is ignored (and the trajectory
// plays the derived script), as a real model ignores odd text.
func (s *Server) scriptOf(prefix []int32) script {
	sc := script{seed: s.taskSeed(prefix)}
	if d, ok, err := ParseDirective(s.voc.tok.Decode(prefix)); ok && err == nil {
		sc.dir, sc.turns = &d, len(d.Tokens)
		return sc
	}
	sc.turns = s.totalTurns(sc.seed)
	return sc
}

// reply is turn k's reply (1-based) of sc.
func (s *Server) reply(sc script, k int) string {
	if sc.dir != nil {
		r := rng(sc.seed.add(1).add(uint64(k)).sum())
		return sc.dir.replyOf(&r, min(k, sc.turns), s.voc.tok)
	}
	return s.replyAt(sc.seed, sc.turns, k)
}

// synthReply is the unscripted reply to input.
func (s *Server) synthReply(input []int32) string {
	return s.reply(s.scriptOf(s.voc.taskPrefix(input)), max(s.voc.countAssistantTurns(input), 1))
}

// replyAt is turn k's reply (1-based) of the trajectory of seed, which takes
// turns turns. It depends on nothing else, so the length of every future
// reply is known in advance (see planOf).
func (s *Server) replyAt(seed hash64, turns, k int) string {
	if k >= turns {
		return "```bash\n" + Submission + "\n```"
	}
	r := rng(seed.add(1).add(uint64(k)).sum())
	n := 6 + r.intn(60)
	var b strings.Builder
	b.WriteString("THOUGHT: ")
	for i := range n {
		w := words[r.intn(len(words))]
		if i == 0 {
			w = strings.ToUpper(w[:1]) + w[1:]
		} else {
			b.WriteByte(' ')
		}
		b.WriteString(w)
		if i%12 == 11 && i+1 < n {
			b.WriteByte(',')
		}
	}
	b.WriteString(".\n\n```bash\necho step ")
	b.WriteString(strconv.Itoa(k))
	b.WriteString("\n```")
	return b.String()
}

// TurnPlan is the answer of PlanPath: what is left of the unscripted
// trajectory whose input is about to generate turn Turn (1-based, the
// input's count of assistant turns). RemainingTurns = TurnsTotal − Turn + 1
// (0 past the end) counts this turn; RemainingTokens is the exact number of
// output tokens those turns produce, each reply's ids plus its <|im_end|>.
type TurnPlan struct {
	TurnsTotal      int `json:"turns_total"`
	Turn            int `json:"turn"`
	RemainingTurns  int `json:"remaining_turns"`
	RemainingTokens int `json:"remaining_tokens"`
}

// planOf is the plan of input: the turns still to generate, this one
// included, and the output tokens they will produce when each stops at
// <|im_end|> (each reply's ids plus the <|im_end|>).
func (s *Server) planOf(input []int32) TurnPlan {
	sc := s.scriptOf(s.voc.taskPrefix(input))
	p := TurnPlan{TurnsTotal: sc.turns, Turn: max(s.voc.countAssistantTurns(input), 1)}
	p.RemainingTurns = max(p.TurnsTotal-p.Turn+1, 0)
	for k := p.Turn; k <= p.TurnsTotal; k++ {
		p.RemainingTokens += len(s.voc.tok.Encode(s.reply(sc, k))) + 1
	}
	if p.RemainingTurns > 0 { // what an interrupted generation of this turn already produced
		p.RemainingTokens = max(p.RemainingTokens-len(s.voc.partialTurn(input)), 0)
	}
	return p
}

// makePlan computes the output of req: the model's token stream (the reply,
// <|im_end|>, then <|endoftext|> forever) cut at the first stop token, stop
// string or max_new_tokens.
func (s *Server) makePlan(req *genRequest) plan {
	var reply string
	if req.Reply != nil {
		reply = *req.Reply
	} else {
		reply = s.synthReply(req.InputIDs)
	}
	script := append(s.voc.tok.Encode(reply), s.voc.imEnd)
	// A resumed generation (its input ends with the partial output of an
	// interrupted one) continues where that one stopped, so the turn's
	// tokens and log-probs are those of an uninterrupted run.
	context, offset := req.InputIDs, 0
	if part := s.voc.partialTurn(req.InputIDs); len(part) > 0 && len(part) < len(script) && slices.Equal(script[:len(part)], part) {
		script, offset = script[len(part):], len(part)
		context = req.InputIDs[:len(req.InputIDs)-len(part)]
	}
	lpSeed := hash64(fnvOffset).add(uint64(s.cfg.Seed)).add(2).ids(context)

	p := plan{kind: finishLength, length: req.MaxNewTokens}
	var text strings.Builder
	maxStop := 0
	for _, st := range req.Stop {
		maxStop = max(maxStop, len(st))
	}
	for i := 0; i < req.MaxNewTokens; i++ {
		tok := s.voc.endOfText
		if i < len(script) {
			tok = script[i]
		}
		p.ids = append(p.ids, tok)
		p.lps = append(p.lps, logprob(lpSeed, i+offset, tok))
		if slices.Contains(req.StopTokenIDs, tok) {
			p.kind, p.matchedID = finishStopToken, tok
			break
		}
		if maxStop > 0 {
			text.WriteString(s.voc.tok.Decode([]int32{tok}))
			if st, ok := endsWithAny(text.String(), req.Stop, maxStop); ok {
				p.kind, p.matchedStr = finishStopString, st
				break
			}
		}
	}
	return p
}

// endsWithAny reports the first of stops that s ends with.
func endsWithAny(s string, stops []string, maxLen int) (string, bool) {
	if len(s) > maxLen+16 {
		s = s[len(s)-maxLen-16:]
	}
	for _, st := range stops {
		if st != "" && strings.HasSuffix(s, st) {
			return st, true
		}
	}
	return "", false
}

// logprob is a deterministic log-probability in [-5, 0], mostly near 0 as a
// confident model's are.
func logprob(seed hash64, pos int, tok int32) float32 {
	u := float64(seed.add(uint64(pos)).add(uint64(uint32(tok))).sum()>>11) / (1 << 53)
	lp := float32(-5 * math.Pow(u, 4))
	if lp == 0 {
		return 0 // no -0
	}
	return lp
}
