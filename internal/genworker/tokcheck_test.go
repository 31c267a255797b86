package genworker

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/sim"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/pkg/llm"
)

// tokenWorker is a Worker with just what tokenCheckLoop uses, for chat
// (its tokenizer and template) and gen.
func tokenWorker(t *testing.T, chat tokenize.Chat, url string, gen llm.Generator) (*Worker, *lockedBuffer) {
	t.Helper()
	tmpl, err := chat.Template()
	if err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	w := &Worker{cfg: Config{Replica: "r0", LLMURL: url, LLMHealthInterval: 10 * time.Millisecond, Chat: chat},
		d: &service.Deps{Log: slog.New(slog.NewTextHandler(logs, nil))}, gen: gen, tmpl: tmpl, tok: tmpl.Tokenizer(),
		health: newReplicaHealth(1, time.Hour, nil, discard)}
	return w, logs
}

// runTokenCheck runs w's tokenCheckLoop until the test ends; the channel
// receives what it returned.
func runTokenCheck(t *testing.T, w *Worker) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Go(func() { out <- w.tokenCheckLoop(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return out
}

func mustTokenizer(t *testing.T, name string) tokenize.Tokenizer {
	t.Helper()
	tok, err := tokenize.OpenTokenizer(name)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// clients are the two inference clients, on the server at ts.
func clients(ts *httptest.Server) map[llm.API]llm.Generator {
	return map[llm.API]llm.Generator{
		llm.APISGLang: llm.NewSGLang(ts.URL, llm.SGLangOptions{HTTPClient: ts.Client(), Retries: -1}),
		llm.APIOpenAI: llm.NewOpenAI(ts.URL, llm.OpenAIOptions{HTTPClient: ts.Client(), Retries: -1}),
	}
}

// A simulator tokenizing as the worker passes the check with every chat
// template the tokenizer has, in both APIs: the worker becomes ready and
// says so once.
func TestTokenizerCheckPasses(t *testing.T) {
	for _, tt := range []struct{ tokenizer, template string }{
		{tokenize.TokenizerQwen, tokenize.TemplateChatML},
		{tokenize.TokenizerQwen, tokenize.TemplateQwen3},
		{tokenize.TokenizerQwen, tokenize.TemplateQwen3NoThink},
		{"bytes", tokenize.TemplateChatML},
	} {
		ts := httptest.NewServer(sim.New(sim.Config{Tokenizer: mustTokenizer(t, tt.tokenizer)}))
		t.Cleanup(ts.Close)
		for api, gen := range clients(ts) {
			t.Run(tt.tokenizer+"/"+tt.template+"/"+string(api), func(t *testing.T) {
				w, logs := tokenWorker(t, tokenize.Chat{Tokenizer: tt.tokenizer, ChatTemplate: tt.template}, ts.URL, gen)
				runTokenCheck(t, w)
				testkit.Eventually(t, 10*time.Second, "checked", w.tokCheck.ready)
				if !logs.has("tokenizes the probe conversation as actloop does") {
					t.Fatalf("log: %s", logs)
				}
			})
		}
	}
}

// A simulator with another tokenizer makes the worker refuse, naming both
// tokenizers, the position and the ids there; it never becomes ready.
func TestTokenizerCheckRefusesAnotherTokenizer(t *testing.T) {
	ts := httptest.NewServer(sim.New(sim.Config{Tokenizer: tokenize.Bytes{}}))
	t.Cleanup(ts.Close)
	for api, gen := range clients(ts) {
		t.Run(string(api), func(t *testing.T) {
			w, _ := tokenWorker(t, tokenize.Chat{Tokenizer: tokenize.TokenizerQwen, ChatTemplate: tokenize.TemplateChatML}, ts.URL, gen)
			var err error
			select {
			case err = <-runTokenCheck(t, w):
			case <-time.After(10 * time.Second):
				t.Fatal("no refusal")
			}
			var m *TokenizerMismatchError
			if !errors.As(err, &m) {
				t.Fatalf("err = %v, want a *TokenizerMismatchError", err)
			}
			if w.tokCheck.ready() {
				t.Fatal("ready after a mismatch")
			}
			// ChatML's <|im_start|> is the same token in neither: they
			// differ at once.
			if m.Pos != 0 || m.Ours[0] != 151644 || m.Server[0] != tokenize.ImStart {
				t.Fatalf("pos %d, ours %v…, server's %v…", m.Pos, m.Ours[:3], m.Server[:3])
			}
			msg := err.Error()
			for _, want := range []string{ts.URL, "actloop/sim", "ACTLOOP_TOKENIZER=qwen ACTLOOP_CHAT_TEMPLATE=chatml",
				"position 0", "ours 151644 \"<|im_start|>\", the server's 256", "[<151644> 8948 198"} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not say %q", msg, want)
				}
			}
		})
	}
}

// A server without /tokenize is said once in the log and tolerated, also
// when it comes back after being down.
func TestTokenizerCheckToleratesNoEndpoint(t *testing.T) {
	s := sim.New(sim.Config{})
	var tokenizeCalls atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/tokenize" {
			tokenizeCalls.Add(1)
			http.NotFound(rw, r) // FastAPI's {"detail":"Not Found"} in spirit
			return
		}
		s.ServeHTTP(rw, r)
	}))
	t.Cleanup(ts.Close)
	for api, gen := range clients(ts) {
		t.Run(string(api), func(t *testing.T) {
			before := tokenizeCalls.Load()
			w, logs := tokenWorker(t, tokenize.Chat{Tokenizer: "bytes", ChatTemplate: tokenize.TemplateChatML}, ts.URL, gen)
			runTokenCheck(t, w)
			testkit.Eventually(t, 10*time.Second, "ready", w.tokCheck.ready)
			w.health.tokUp <- struct{}{} // the server came back: checked again
			testkit.Eventually(t, 10*time.Second, "checked again", func() bool { return tokenizeCalls.Load()-before >= 2 })
			const said = "the inference server cannot tokenize the probe conversation"
			testkit.Eventually(t, 10*time.Second, "said", func() bool { return logs.has(said) })
			if n := strings.Count(logs.String(), said); n != 1 {
				t.Fatalf("said %d times: %s", n, logs)
			}
			if !logs.has(llm.ErrNoTokenize.Error()) {
				t.Fatalf("log does not say why: %s", logs)
			}
		})
	}
}

// A server that fails transiently keeps the worker from being ready until
// it answers.
func TestTokenizerCheckWaitsForTheServer(t *testing.T) {
	s := sim.New(sim.Config{})
	var fail atomic.Bool
	fail.Store(true)
	ts := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if fail.Load() {
			http.Error(rw, "starting", http.StatusServiceUnavailable)
			return
		}
		s.ServeHTTP(rw, r)
	}))
	t.Cleanup(ts.Close)
	w, logs := tokenWorker(t, tokenize.Chat{Tokenizer: "bytes", ChatTemplate: tokenize.TemplateChatML}, ts.URL,
		clients(ts)[llm.APISGLang])
	runTokenCheck(t, w)
	testkit.Eventually(t, 10*time.Second, "a failed check", func() bool { return logs.has("trying again") })
	if w.tokCheck.ready() {
		t.Fatal("ready before the server answered")
	}
	fail.Store(false)
	testkit.Eventually(t, 10*time.Second, "ready", w.tokCheck.ready)
}

func TestFirstDifference(t *testing.T) {
	for _, tt := range []struct {
		a, b []int32
		want int
	}{
		{nil, nil, -1},
		{[]int32{1, 2}, []int32{1, 2}, -1},
		{[]int32{1, 2}, []int32{1, 3}, 1},
		{[]int32{1, 2}, []int32{1, 2, 3}, 2},
		{[]int32{1, 2, 3}, []int32{1}, 1},
	} {
		if got := firstDifference(tt.a, tt.b); got != tt.want {
			t.Errorf("firstDifference(%v, %v) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
	if got := window([]int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 6); got != "[… 1 2 3 4 5 <6> 7 8 9 10 11 …]" {
		t.Errorf("window = %s", got)
	}
	if got := window([]int32{1, 2}, 2); got != "[1 2 <end>]" {
		t.Errorf("window at the end = %s", got)
	}
}

func TestChatSettings(t *testing.T) {
	for _, tt := range []struct {
		chat tokenize.Chat
		want string
	}{
		{tokenize.Chat{}, "ACTLOOP_TOKENIZER=qwen ACTLOOP_CHAT_TEMPLATE=chatml"},
		{tokenize.Chat{Tokenizer: "bytes", ChatTemplate: "qwen3"}, "ACTLOOP_TOKENIZER=bytes ACTLOOP_CHAT_TEMPLATE=qwen3"},
		{tokenize.Chat{ModelDir: "/models/q"}, "ACTLOOP_MODEL_DIR=/models/q"},
		{tokenize.Chat{ModelDir: "/models/q", ChatTemplate: "qwen3"}, "ACTLOOP_MODEL_DIR=/models/q ACTLOOP_CHAT_TEMPLATE=qwen3"},
	} {
		if got := chatSettings(tt.chat); got != tt.want {
			t.Errorf("chatSettings(%+v) = %q, want %q", tt.chat, got, tt.want)
		}
	}
}
