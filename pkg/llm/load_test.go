package llm_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/batching"
	"github.com/actloop/actloop/internal/sim"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/pkg/llm"
)

// Both clients read the simulator's load from SGLang's and vLLM's own
// metric names: the pool, its use, running and waiting requests.
func TestLoadOnSimulator(t *testing.T) {
	m := batching.DefaultConfig()
	s := sim.New(sim.Config{Model: &m, TimeScale: 0.1})
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	opts := llm.SGLangOptions{HTTPClient: ts.Client()}
	readers := map[string]llm.LoadReader{
		"sglang": llm.NewSGLang(ts.URL, opts),
		"openai": llm.NewOpenAI(ts.URL, llm.OpenAIOptions{HTTPClient: ts.Client()}),
	}
	for name, r := range readers {
		l, err := r.Load(context.Background())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// vLLM counts the pool in blocks of 16.
		if want := m.MaxTotalTokens / 16 * 16; l.CapacityTokens != want && l.CapacityTokens != m.MaxTotalTokens {
			t.Errorf("%s: capacity %d, want %d", name, l.CapacityTokens, m.MaxTotalTokens)
		}
		if l.Usage != 0 || l.Running != 0 || l.Waiting != 0 {
			t.Errorf("%s: idle server reports %+v", name, l)
		}
	}
	// With a generation running, both see it.
	gen := llm.NewSGLang(ts.URL, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		reply := strings.Repeat("0123456789", 300)
		in := slices.Concat(tokenize.NewByteChatML().Message("user", "write"), tokenize.NewByteChatML().GenerationPrompt())
		_, _ = gen.Generate(ctx, llm.Request{RID: llm.NewRID(), InputIDs: in, Reply: reply,
			Sampling: llm.SamplingParams{MaxNewTokens: 4000, StopTokenIDs: []int32{tokenize.ImEnd}}})
	}()
	for name, r := range readers {
		var l llm.Load
		testkit.Poll(context.Background(), 30*time.Second, func() bool {
			l, _ = r.Load(context.Background())
			return l.Running > 0
		})
		if l.Running != 1 || l.Usage <= 0 {
			t.Errorf("%s: with a generation running: %+v", name, l)
		}
	}
	cancel()
	<-done
}

// A server whose /metrics has none of the names (SGLang without
// --enable-metrics answers 404) gives a clear error.
func TestLoadWithoutMetrics(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			_, _ = w.Write([]byte("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1\n"))
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(ts.Close)
	_, err := llm.NewSGLang(ts.URL, llm.SGLangOptions{HTTPClient: ts.Client()}).Load(context.Background())
	if !errors.Is(err, llm.ErrNoMetrics) {
		t.Fatalf("err = %v, want ErrNoMetrics", err)
	}
}

// Real SGLang /metrics text (several data-parallel ranks) sums the counts
// and takes the largest usage; the pool comes from /get_server_info when
// the gauge is missing.
func TestSGLangLoadFromText(t *testing.T) {
	const text = `# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{dp_rank="0",engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 3.0
sglang:num_running_reqs{dp_rank="1",engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 4.0
# TYPE sglang:token_usage gauge
sglang:token_usage{dp_rank="0",engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 0.25
sglang:token_usage{dp_rank="1",engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 0.5
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{dp_rank="0",engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 2.0
`
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			_, _ = w.Write([]byte(text))
		case "/get_server_info":
			_, _ = w.Write([]byte(`{"max_total_num_tokens": 123456, "max_running_requests": null}`))
		}
	}))
	t.Cleanup(ts.Close)
	l, err := llm.NewSGLang(ts.URL, llm.SGLangOptions{HTTPClient: ts.Client()}).Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if l != (llm.Load{CapacityTokens: 123456, Usage: 0.5, Running: 7, Waiting: 2, CacheHitRate: -1}) {
		t.Fatalf("load = %+v", l)
	}
}

// FuzzParseMetrics: any /metrics body parses or is refused, and what
// parses reads as a load without panicking.
func FuzzParseMetrics(f *testing.F) {
	f.Add([]byte("# TYPE sglang:token_usage gauge\nsglang:token_usage{model_name=\"m\"} 0.5\n"))
	f.Add([]byte("vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"x\"} 1\n"))
	f.Add([]byte("sglang:num_running_reqs NaN\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		fams, err := llm.ParseMetrics(b)
		if err != nil {
			return
		}
		for name, fam := range fams {
			if fam == nil || name == "" {
				t.Fatalf("family %q: %v", name, fam)
			}
		}
	})
}
