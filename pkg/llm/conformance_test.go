package llm_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"

	"github.com/actloop/actloop/internal/sim"
	"github.com/actloop/actloop/pkg/llm"
	"github.com/actloop/actloop/pkg/llm/llmtest"
)

// TestConformance runs the conformance suite on both clients against the
// simulator, each directly and through a recording proxy that checks every
// request it forwards against the upstream server's own request fields.
func TestConformance(t *testing.T) {
	for _, api := range []llm.API{llm.APISGLang, llm.APIOpenAI} {
		for _, recorded := range []bool{false, true} {
			name := string(api)
			if recorded {
				name += "/recorded"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				llmtest.Run(t, func(t *testing.T) llm.Generator { return newConformanceGen(t, api, recorded) })
				llmtest.RunTokenizer(t, func(t *testing.T) llm.Tokenizer { return newConformanceTokenizer(t, api, recorded) })
			})
		}
	}
}

// newConformanceTokenizer is api's client of a fresh simulator, through the
// strict proxy when recorded.
func newConformanceTokenizer(t *testing.T, api llm.API, recorded bool) llm.Tokenizer {
	ts := httptest.NewServer(sim.New(sim.Config{}))
	t.Cleanup(ts.Close)
	url := ts.URL
	if recorded {
		url = newStrictProxyFor(t, ts.URL, api, "/tokenize").URL
	}
	if api == llm.APIOpenAI {
		return llm.NewOpenAI(url, llm.OpenAIOptions{Model: "actloop/sim"})
	}
	return llm.NewSGLang(url, llm.SGLangOptions{})
}

func newConformanceGen(t *testing.T, api llm.API, recorded bool) llm.Generator {
	s := sim.New(sim.Config{DecodeTokensPerSec: 5000, TimeScale: 1, Seed: 7})
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	url := ts.URL
	if recorded {
		url = newStrictProxy(t, ts.URL, api).URL
	}
	switch api {
	case llm.APIOpenAI:
		g := llm.NewOpenAI(url, llm.OpenAIOptions{})
		return llmtest.WithProgress(g, func(rid string) (int, bool) {
			n, ok := g.Received(rid)
			return n, ok && n > 0
		})
	default:
		g := llm.NewSGLang(url, llm.SGLangOptions{})
		return llmtest.WithProgress(g, func(rid string) (int, bool) {
			info, ok := s.Request(rid)
			return info.Generated, ok && info.Phase == sim.PhaseDecode
		})
	}
}

// The request fields of each endpoint, named as upstream names them; a
// request with any other field fails the test. SGLang:
// python/sglang/srt/managers/io_struct.py (GenerateReqInput, AbortReq) and
// python/sglang/srt/sampling/sampling_params.py (SamplingParams). vLLM:
// vllm/entrypoints/openai/protocol.py (CompletionRequest, StreamOptions).
type (
	sglangGenerate struct {
		RID            *string         `json:"rid"`
		InputIDs       []int32         `json:"input_ids"`
		SamplingParams *sglangSampling `json:"sampling_params"`
		ReturnLogprob  *bool           `json:"return_logprob"`
		Stream         *bool           `json:"stream"`
	}
	sglangSampling struct {
		MaxNewTokens      *int              `json:"max_new_tokens"`
		Temperature       *float64          `json:"temperature"`
		TopP              *float64          `json:"top_p"`
		TopK              *int              `json:"top_k"`
		MinP              *float64          `json:"min_p"`
		Stop              []string          `json:"stop"`
		StopTokenIDs      []int32           `json:"stop_token_ids"`
		SkipSpecialTokens *bool             `json:"skip_special_tokens"`
		NoStopTrim        *bool             `json:"no_stop_trim"`
		CustomParams      map[string]string `json:"custom_params"`
	}
	sglangAbort struct {
		RID      *string `json:"rid"`
		AbortAll *bool   `json:"abort_all"`
	}
	vllmCompletion struct {
		Model                  *string           `json:"model"`
		Prompt                 []int32           `json:"prompt"`
		MaxTokens              *int              `json:"max_tokens"`
		Temperature            *float64          `json:"temperature"`
		TopP                   *float64          `json:"top_p"`
		TopK                   *int              `json:"top_k"`
		MinP                   *float64          `json:"min_p"`
		Stop                   []string          `json:"stop"`
		StopTokenIDs           []int32           `json:"stop_token_ids"`
		SkipSpecialTokens      *bool             `json:"skip_special_tokens"`
		IncludeStopStrInOutput *bool             `json:"include_stop_str_in_output"`
		Logprobs               *int              `json:"logprobs"`
		ReturnTokensAsTokenIDs *bool             `json:"return_tokens_as_token_ids"`
		Stream                 *bool             `json:"stream"`
		StreamOptions          *vllmStreamOpts   `json:"stream_options"`
		RequestID              *string           `json:"request_id"`
		VLLMXArgs              map[string]string `json:"vllm_xargs"`
	}
	// tokenizeCompletion is POST /tokenize's body: vLLM's
	// TokenizeCompletionRequest (vllm/entrypoints/serve/tokenize/protocol.py)
	// and SGLang's TokenizeRequest have these fields.
	tokenizeCompletion struct {
		Model            *string `json:"model"`
		Prompt           *string `json:"prompt"`
		AddSpecialTokens *bool   `json:"add_special_tokens"`
		ReturnTokenStrs  *bool   `json:"return_token_strs"`
	}
	vllmStreamOpts struct {
		IncludeUsage         *bool `json:"include_usage"`
		ContinuousUsageStats *bool `json:"continuous_usage_stats"`
	}
)

// newStrictProxy forwards to target, failing t on a request whose path the
// api does not serve or whose body has a field upstream does not define,
// and on a completion whose X-Request-Id is not its request_id.
func newStrictProxy(t *testing.T, target string, api llm.API) *httptest.Server {
	want := "/generate"
	if api == llm.APIOpenAI {
		want = "/v1/completions"
	}
	return newStrictProxyFor(t, target, api, want)
}

// newStrictProxyFor is newStrictProxy that wants a request to path.
func newStrictProxyFor(t *testing.T, target string, api llm.API, want string) *httptest.Server {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	paths := map[string]int{}
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if err := checkRequest(api, r, body); err != nil {
			t.Errorf("%s %s: %v\n%s", r.Method, r.URL.Path, err, body)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		paths[r.URL.Path]++
		mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		srv.Close()
		if t.Skipped() {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if paths[want] == 0 {
			t.Errorf("no %s request went through the proxy (saw %v)", want, paths)
		}
	})
	return srv
}

func checkRequest(api llm.API, r *http.Request, body []byte) error {
	strict := func(v any) error {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		return dec.Decode(v)
	}
	switch {
	case api == llm.APISGLang && r.URL.Path == "/generate":
		var g sglangGenerate
		if err := strict(&g); err != nil {
			return err
		}
		if g.RID == nil || !llm.ValidRID(*g.RID) || len(g.InputIDs) == 0 || g.SamplingParams == nil ||
			g.SamplingParams.MaxNewTokens == nil || g.ReturnLogprob == nil || !*g.ReturnLogprob {
			return fmt.Errorf("rid, input_ids, sampling_params.max_new_tokens or return_logprob missing")
		}
	case api == llm.APISGLang && r.URL.Path == "/abort_request":
		var a sglangAbort
		if err := strict(&a); err != nil {
			return err
		}
		if a.RID == nil || (len(*a.RID) != 32 && len(*a.RID) != llm.RIDPrefixLen) {
			return fmt.Errorf("rid is not a request id or a prefix")
		}
	case api == llm.APIOpenAI && r.URL.Path == "/v1/completions":
		var c vllmCompletion
		if err := strict(&c); err != nil {
			return err
		}
		hdr := r.Header.Get("X-Request-Id")
		if c.RequestID == nil || *c.RequestID != hdr || !llm.ValidRID(hdr) {
			return fmt.Errorf("X-Request-Id %q and request_id differ or are not request ids", hdr)
		}
		if len(c.Prompt) == 0 || c.MaxTokens == nil || c.Logprobs == nil || c.ReturnTokensAsTokenIDs == nil ||
			!*c.ReturnTokensAsTokenIDs || c.Stream == nil || !*c.Stream {
			return fmt.Errorf("prompt, max_tokens, logprobs, return_tokens_as_token_ids or stream missing")
		}
	case r.URL.Path == "/tokenize":
		var k tokenizeCompletion
		if err := strict(&k); err != nil {
			return err
		}
		if k.Prompt == nil || k.AddSpecialTokens == nil {
			return fmt.Errorf("prompt or add_special_tokens missing")
		}
		if api == llm.APISGLang && k.Model != nil {
			return fmt.Errorf("model sent by the SGLang client")
		}
	default:
		return fmt.Errorf("the %s client has no business with this endpoint", api)
	}
	return nil
}
