package sim

import (
	"container/list"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/actloop/actloop/internal/tokenize"
)

// maxBody bounds a request body.
const maxBody = 64 << 20

// Pause modes of /pause_generation (PauseGenerationReqInput.mode in
// python/sglang/srt/managers/io_struct.py).
const (
	pauseAbort   = "abort"
	pauseInPlace = "in_place"
	pauseRetract = "retract"
)

// modelName is what /get_model_info reports.
const modelName = "actloop/sim"

// Server is a simulated SGLang server; it implements http.Handler.
type Server struct {
	cfg Config
	mux *http.ServeMux
	voc *vocab
	// vocErr says why Config.Tokenizer cannot be used; /generate answers
	// it with a 500.
	vocErr error

	mu        sync.Mutex
	jobs      map[*job]struct{}
	byRID     map[string]*job // the live jobs by rid
	queue     list.List       // of *job waiting for a slot
	running   int
	paused    bool
	pauseMode string
	pauseCh   chan struct{} // closed when a pause starts
	resumeCh  chan struct{} // closed when generation continues
	version   string
	cache     *prefixCache
	mdl       *modelled // the server model, with Config.Model
	stats     Stats     // counters only; gauges are computed
}

var _ http.Handler = (*Server)(nil)

// New returns a simulated server configured by cfg.
func New(cfg Config) *Server {
	cfg = cfg.withDefaults()
	s := &Server{
		cfg:      cfg,
		mux:      http.NewServeMux(),
		jobs:     make(map[*job]struct{}),
		byRID:    make(map[string]*job),
		pauseCh:  make(chan struct{}),
		resumeCh: make(chan struct{}),
		version:  cfg.WeightVersion,
		cache:    newPrefixCache(cfg.CacheTokens),
	}
	if s.voc, s.vocErr = newVocab(cfg.Tokenizer); s.vocErr != nil {
		s.voc, _ = newVocab(tokenize.Bytes{}) // for the endpoints that only count
	}
	if cfg.Model != nil {
		var err error
		if s.mdl, err = newModelled(*cfg.Model); err != nil && s.vocErr == nil {
			s.vocErr = err // /generate answers it
		}
	}
	for _, r := range []struct {
		pattern string
		h       http.HandlerFunc
	}{
		{"POST /generate", s.handleGenerate},
		{"PUT /generate", s.handleGenerate},
		{"POST /abort_request", s.handleAbort},
		{"POST /pause_generation", s.handlePause},
		{"POST /continue_generation", s.handleContinue},
		{"POST /update_weight_version", s.handleUpdateWeightVersion},
		{"GET /health", handleHealth},
		{"GET /health_generate", handleHealth},
		{"GET /get_model_info", s.handleModelInfo},
		{"GET /get_weight_version", s.handleWeightVersion},
		{"GET /v1/loads", s.handleLoads},
		{"GET /get_load", s.handleGetLoad},
		{"GET /get_server_info", s.handleServerInfo},
		{"GET /server_info", s.handleServerInfo},
		{"GET /metrics", s.handleMetrics},
		{"GET /flush_cache", s.handleFlushCache},
		{"POST " + PlanPath, s.handlePlan},
		{"POST /flush_cache", s.handleFlushCache},
	} {
		s.mux.HandleFunc(r.pattern, r.h)
	}
	s.registerOpenAI()
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Stats returns the server's counters and gauges.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Running = s.running
	st.Waiting = s.queue.Len()
	if s.mdl != nil {
		s.modelStatsLocked(&st)
	}
	return st
}

// Request describes the live request with id rid; ok is false if there is
// none (never was, or already answered).
func (s *Server) Request(rid string) (info RequestInfo, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j, ok := s.byRID[rid]; ok {
		return s.infoLocked(j), true
	}
	return RequestInfo{}, false
}

// Requests describes every live request.
func (s *Server) Requests() []RequestInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]RequestInfo, 0, len(s.jobs))
	for j := range s.jobs {
		out = append(out, s.infoLocked(j))
	}
	return out
}

// WeightVersion returns the version reported in meta_info.weight_version.
func (s *Server) WeightVersion() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}

// errDuplicateRID refuses a request whose rid is live already: SGLang's
// TokenizerManager._init_req_state raises "Duplicate request ID detected:
// <rid>" (a ValueError its HTTP server answers 400), and vLLM's
// OutputProcessor.add_request "Request id <id> already running."; the live
// request goes on. Once it has answered (finished or aborted), its rid may
// be used again.
var errDuplicateRID = errors.New("rid in flight already")

// accept tokenizes req's prompt if it came as text, plans req and counts
// it as a live request, waiting for a slot; a request whose rid is live
// already is refused with errDuplicateRID.
func (s *Server) accept(req *genRequest) (*job, error) {
	if req.text != nil {
		req.InputIDs = s.voc.tok.Encode(*req.text)
	}
	j := &job{
		req:     req,
		plan:    s.makePlan(req),
		start:   time.Now(),
		abortCh: make(chan struct{}),
		doneCh:  make(chan struct{}),
		phase:   PhaseWaiting,
	}
	s.mu.Lock()
	if _, ok := s.byRID[req.RID]; ok {
		s.stats.Duplicates++
		s.mu.Unlock()
		return nil, errDuplicateRID
	}
	s.jobs[j] = struct{}{}
	s.byRID[req.RID] = j
	s.stats.Requests++
	s.mu.Unlock()
	return j, nil
}

func (s *Server) handleGenerate(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	if s.vocErr != nil {
		writeError(w, http.StatusInternalServerError, s.vocErr)
		return
	}
	req, err := decodeGenerateRequest(body, s.cfg.ContextLength)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	j, err := s.accept(req)
	if err != nil {
		writeError(w, http.StatusBadRequest, errField("", "Duplicate request ID detected: %s", req.RID))
		return
	}
	var kind endKind
	if s.mdl != nil {
		if kind, err = s.runModel(r.Context(), j); err != nil {
			s.end(j, endGone)
			writeError(w, http.StatusBadRequest, errModel(err))
			return
		}
	} else {
		kind = s.run(r.Context(), j)
	}
	out := s.end(j, kind)
	if out == nil {
		return // the client went away
	}
	writeJSON(w, http.StatusOK, out)
}

// abortInput is AbortReq (python/sglang/srt/managers/io_struct.py): rid,
// abort_all.
type abortInput struct {
	RID      *string `json:"rid"`
	AbortAll *bool   `json:"abort_all"`
}

func (s *Server) handleAbort(w http.ResponseWriter, r *http.Request) {
	var in abortInput
	if !decodeBody(w, r, &in) {
		return
	}
	all := in.AbortAll != nil && *in.AbortAll
	rid := ""
	if in.RID != nil {
		rid = *in.RID
	}
	s.mu.Lock()
	// An empty rid would prefix-match every request; SGLang ignores it too.
	if all || rid != "" {
		s.abortMatchingLocked(rid, all)
	}
	s.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// pauseInput is PauseGenerationReqInput: mode, default "abort".
type pauseInput struct {
	Mode *string `json:"mode"`
}

func (s *Server) handlePause(w http.ResponseWriter, r *http.Request) {
	var in pauseInput
	if !decodeBody(w, r, &in) {
		return
	}
	mode := pauseAbort
	if in.Mode != nil {
		mode = *in.Mode
	}
	switch mode {
	case pauseAbort, pauseInPlace, pauseRetract:
	default:
		writeError(w, http.StatusBadRequest, errField("mode", "must be one of abort, in_place, retract; got %q", mode))
		return
	}
	s.mu.Lock()
	if !s.paused {
		s.paused = true
		close(s.pauseCh)
		s.resumeCh = make(chan struct{})
	}
	s.pauseMode = mode
	var done []chan struct{}
	switch {
	case mode == pauseAbort:
		done = s.abortMatchingLocked("", true)
	case mode == pauseRetract && s.mdl != nil:
		s.retractModelLocked()
	}
	s.mu.Unlock()
	// As SGLang does in abort mode, answer once the aborted requests have.
	for _, d := range done {
		select {
		case <-d:
		case <-r.Context().Done():
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"message": "Generation paused successfully.", "status": "ok"})
}

func (s *Server) handleContinue(w http.ResponseWriter, r *http.Request) {
	var in map[string]json.RawMessage // ContinueGenerationReqInput; older servers take no body
	if !decodeBody(w, r, &in) {
		return
	}
	s.mu.Lock()
	if s.paused {
		s.paused = false
		close(s.resumeCh)
		s.pauseCh = make(chan struct{})
		s.admitLocked()
		if s.mdl != nil {
			s.kickLocked()
		}
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]string{"message": "Generation continued successfully.", "status": "ok"})
}

// updateWeightVersionInput is UpdateWeightVersionReqInput: new_version
// (required), abort_all_requests (default true).
type updateWeightVersionInput struct {
	NewVersion       *string `json:"new_version"`
	AbortAllRequests *bool   `json:"abort_all_requests"`
}

func (s *Server) handleUpdateWeightVersion(w http.ResponseWriter, r *http.Request) {
	var in updateWeightVersionInput
	if !decodeBody(w, r, &in) {
		return
	}
	if in.NewVersion == nil {
		writeError(w, http.StatusBadRequest, errField("new_version", "field required"))
		return
	}
	s.mu.Lock()
	if in.AbortAllRequests == nil || *in.AbortAllRequests {
		s.abortMatchingLocked("", true)
	}
	s.version = *in.NewVersion
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{
		"success":     true,
		"message":     "Weight version updated to " + *in.NewVersion,
		"new_version": *in.NewVersion,
	})
}

func handleHealth(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }

func (s *Server) handleModelInfo(w http.ResponseWriter, _ *http.Request) {
	// The keys of /get_model_info in python/sglang/srt/entrypoints/http_server.py.
	writeJSON(w, http.StatusOK, map[string]any{
		"model_path":                modelName,
		"tokenizer_path":            modelName,
		"is_generation":             true,
		"preferred_sampling_params": nil,
		"weight_version":            s.WeightVersion(),
		// Not SGLang's: tells a client (the oracle predictor) it talks to
		// this simulator and may ask PlanPath.
		SimulatorKey: true,
	})
}

// PlanPath answers POST {"input_ids": [...]} with what is left of the
// unscripted trajectory those ids are about to continue: {"turns_total",
// "turn", "remaining_turns", "remaining_tokens"}. It is the simulator's
// ground truth for the oracle predictor (internal/predict), not an SGLang
// endpoint.
const PlanPath = "/actloop/plan"

// SimulatorKey is the key /get_model_info sets to true on this simulator.
const SimulatorKey = "actloop_simulator"

func (s *Server) handlePlan(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	ids, err := decodePlanRequest(body, s.cfg.ContextLength)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	writeJSON(w, http.StatusOK, s.planOf(ids))
}

func (s *Server) handleWeightVersion(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"weight_version": s.WeightVersion()})
}

// validLoadSections are the include= tokens of /v1/loads (LoadSnapshot's
// VALID_SECTIONS in python/sglang/srt/managers/load_snapshot.py).
var validLoadSections = map[string]bool{"core": true, "memory": true, "spec": true, "lora": true, "disagg": true, "queues": true, "all": true}

// handleLoads answers GET /v1/loads in the shape of
// python/sglang/srt/entrypoints/v1_loads.py: {timestamp, version,
// accelerator, num_accelerators, loads: [LoadSnapshot core keys]}. The
// simulator has only the core section.
func (s *Server) handleLoads(w http.ResponseWriter, r *http.Request) {
	if inc := r.URL.Query().Get("include"); inc != "" {
		for _, sec := range strings.Split(inc, ",") {
			if !validLoadSections[strings.TrimSpace(sec)] {
				writeError(w, http.StatusBadRequest, errField("include", "invalid section %q", strings.TrimSpace(sec)))
				return
			}
		}
	}
	loads := []map[string]any{}
	if dp := r.URL.Query().Get("dp_rank"); dp == "" || dp == "0" {
		loads = append(loads, s.loadCore())
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"timestamp":        time.Now().UTC().Format(time.RFC3339Nano),
		"version":          modelName,
		"accelerator":      nil,
		"num_accelerators": 0,
		"loads":            loads,
	})
}

func (s *Server) loadCore() map[string]any {
	l := s.load()
	return map[string]any{
		"dp_rank":                     0,
		"num_running_reqs":            l.running,
		"num_waiting_reqs":            l.waiting,
		"num_waiting_uncached_tokens": l.waitingTokens,
		"num_used_tokens":             l.used,
		"num_total_tokens":            l.used,
		"max_total_num_tokens":        l.pool,
		"max_running_requests":        l.maxRunning,
		"token_usage":                 l.usage(),
		"gen_throughput":              0.0,
		"cache_hit_rate":              l.hitRate,
		"utilization":                 float64(l.running) / float64(l.maxRunning),
	}
}

// serverLoad is what /v1/loads, /metrics and /get_server_info report.
type serverLoad struct {
	running, waiting, waitingTokens int
	used, pool, maxRunning          int
	chunk                           int    // chunked_prefill_size; -1 without a server model
	policy                          string // schedule_policy
	hitRate                         float64
}

func (l serverLoad) usage() float64 {
	if l.pool <= 0 {
		return 0
	}
	return float64(l.used) / float64(l.pool)
}

// load is the server's load now: the plain cost model's slots and prefix
// cache, or the server model's pool and limits.
func (s *Server) load() serverLoad {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := serverLoad{running: s.running, waiting: s.queue.Len(), used: s.cache.usedTokens(), pool: s.cfg.CacheTokens,
		maxRunning: s.cfg.MaxRunning, chunk: -1, policy: "fcfs"}
	if s.stats.PromptTokens > 0 {
		l.hitRate = float64(s.stats.CachedTokens) / float64(s.stats.PromptTokens)
	}
	if s.mdl == nil {
		for e := s.queue.Front(); e != nil; e = e.Next() {
			l.waitingTokens += len(e.Value.(*job).req.InputIDs)
		}
		return l
	}
	o, mc := s.mdl.srv.Occupancy(), s.mdl.srv.Config()
	l.running, l.waiting, l.used = o.Running, o.Queued, o.Used
	l.pool, l.maxRunning, l.chunk, l.policy = mc.MaxTotalTokens, mc.MaxRunning, mc.ChunkedPrefill, mc.Policy
	for _, j := range s.mdl.jobs {
		if j.phase == PhaseWaiting {
			l.waitingTokens += len(j.m.input)
		}
	}
	return l
}

// handleGetLoad answers the older GET /get_load: one entry per DP rank with
// num_reqs (running + waiting), num_waiting_reqs and num_tokens.
func (s *Server) handleGetLoad(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	tokens := 0
	for j := range s.jobs {
		tokens += len(j.req.InputIDs) + j.generated
	}
	load := map[string]any{
		"rid":              nil,
		"http_worker_ipc":  nil,
		"dp_rank":          0,
		"num_reqs":         s.running + s.queue.Len(),
		"num_waiting_reqs": s.queue.Len(),
		"num_tokens":       tokens,
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, []any{load})
}

func (s *Server) handleFlushCache(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	busy := len(s.jobs) > 0
	if !busy {
		s.cache.reset()
		if s.mdl != nil {
			s.mdl.srv.Flush()
		}
	}
	s.mu.Unlock()
	if busy {
		http.Error(w, "Cache not flushed: there are running or waiting requests.", http.StatusBadRequest)
		return
	}
	_, _ = io.WriteString(w, "Cache flushed.\n")
}

// readBody reads a request body, answering 400/413 itself on failure.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, errField("", "request body larger than %d bytes", maxBody))
		} else {
			writeError(w, http.StatusBadRequest, errField("", "read body: %v", err))
		}
		return nil, false
	}
	return b, true
}

// decodeBody decodes an optional JSON body into v (an empty body leaves v
// as is), answering 400 itself on failure.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	b, ok := readBody(w, r)
	if !ok {
		return false
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return true
	}
	if err := decodeJSON(b, v); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return false
	}
	return true
}

// writeError answers as SGLang's _create_error_response does:
// {"error": {"message": ...}}.
func writeError(w http.ResponseWriter, status int, err error) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"message": err.Error()}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
