package genworker

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/sim"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/pkg/llm"
)

// A step run again while the server still runs the request an earlier run
// of it started under the trajectory's request id (its worker died, say):
// the server refuses the second request, as SGLang does, so the worker
// aborts the stale one by its id and runs its own. A generation paused
// meanwhile gives up at once, with nothing generated.
func TestStaleRequestIsAbortedBeforeRetry(t *testing.T) {
	srv := sim.New(sim.Config{DecodeTokensPerSec: 2000, TimeScale: 1})
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	gen := llm.NewSGLang(ts.URL, llm.SGLangOptions{HTTPClient: ts.Client()})
	w := &Worker{cfg: Config{Replica: "r0"}, gen: gen, d: &service.Deps{Log: discard}}
	chat := tokenize.NewByteChatML()
	in := append(chat.Message("user", "task"), chat.GenerationPrompt()...)
	req := func(rid, reply string) llm.Request {
		return llm.Request{RID: rid, InputIDs: in, Reply: reply,
			Sampling: llm.SamplingParams{MaxNewTokens: 1 << 16, StopTokenIDs: []int32{tokenize.ImEnd}}}
	}
	// stale starts a long generation under rid, as a dead worker's run of
	// the step left it, and waits until it decodes.
	stale := func(rid string) <-chan llm.Result {
		out := make(chan llm.Result, 1)
		go func() {
			res, err := gen.Generate(context.Background(), req(rid, strings.Repeat("0123456789", 2000)))
			if err != nil {
				t.Errorf("stale request: %v", err)
			}
			out <- res
		}()
		testkit.Eventually(t, 30*time.Second, "the stale request decoding", func() bool {
			info, ok := srv.Request(rid)
			return ok && info.Generated > 0
		})
		return out
	}

	rid := llm.NewRID()
	old := stale(rid)
	g := newGeneration()
	g.rid = rid
	res, err := w.generate(context.Background(), req(rid, "ls"), g)
	if err != nil || res.Finish.Type != llm.FinishStop {
		t.Fatalf("generate under a rid still running: %+v, %v", res.Finish, err)
	}
	if r := <-old; r.Finish.Type != llm.FinishAbort || len(r.OutputIDs) == 0 {
		t.Fatalf("the stale request: %+v with %d tokens, want aborted mid-decode", r.Finish, len(r.OutputIDs))
	}
	if st := srv.Stats(); st.Duplicates < 1 || st.Requests != 2 {
		t.Fatalf("server stats %+v: want the second request refused once, then run", st)
	}

	rid = llm.NewRID()
	old = stale(rid)
	g = newGeneration()
	g.rid = rid
	g.paused.Store(true)
	res, err = w.generate(context.Background(), req(rid, "ls"), g)
	if err != nil || res.Finish.Type != llm.FinishAbort || len(res.OutputIDs) != 0 {
		t.Fatalf("a paused generation under a rid still running: %+v, %d tokens, %v", res.Finish, len(res.OutputIDs), err)
	}
	if _, ok := srv.Request(rid); !ok {
		t.Fatal("the paused generation aborted the stale request (the pause does that)")
	}
	if err := gen.Abort(context.Background(), rid); err != nil {
		t.Fatal(err)
	}
	<-old
}

func TestDuplicateRID(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{&llm.HTTPError{Status: 400, Body: `{"error":{"message":"Duplicate request ID detected: 0123"}}`}, true},
		{&llm.HTTPError{Status: 400, Body: "Request id cmpl-0123-0 already running."}, true},
		{&llm.HTTPError{Status: 400, Body: `{"error":{"message":"input_ids is empty"}}`}, false},
		{&llm.HTTPError{Status: 503, Body: "Duplicate request ID detected"}, false},
	} {
		if got := duplicateRID(tt.err); got != tt.want {
			t.Errorf("duplicateRID(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
