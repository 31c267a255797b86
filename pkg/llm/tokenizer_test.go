package llm

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"testing"
	"time"
)

func TestServerTokenizerSendsFields(t *testing.T) {
	for _, tt := range []struct {
		api        API
		answer     string
		detokenize string // the exact JSON body
	}{
		{APIOpenAI, `{"prompt":"hi","tokens":[104,105],"count":2,"max_model_len":8}`, `{"tokens":[104,105]}`},
		{APISGLang, `{"text":"hi","tokens":[104,105],"count":2,"max_model_len":8}`, `{"tokens":[104,105],"skip_special_tokens":false}`},
	} {
		t.Run(string(tt.api), func(t *testing.T) {
			rec := newRecorder(t, http.StatusOK, tt.answer)
			tok := NewServerTokenizer(rec.srv.URL, tt.api, SGLangOptions{HTTPClient: rec.srv.Client()})
			ids, err := tok.Tokenize(context.Background(), "hi", false)
			if err != nil || !reflect.DeepEqual(ids, []int32{104, 105}) {
				t.Fatalf("Tokenize = %v, %v", ids, err)
			}
			text, err := tok.Detokenize(context.Background(), ids)
			if err != nil || text != "hi" {
				t.Fatalf("Detokenize = %q, %v", text, err)
			}
			calls := rec.recorded()
			if len(calls) != 2 || calls[0].path != "/tokenize" || calls[1].path != "/detokenize" {
				t.Fatalf("calls %+v", calls)
			}
			assertJSONEqual(t, calls[0].body, `{"prompt":"hi","add_special_tokens":false}`)
			assertJSONEqual(t, calls[1].body, tt.detokenize)
		})
	}
}

func TestBoundTokenizerKeepsFirstError(t *testing.T) {
	rec := newRecorder(t, http.StatusBadRequest, `{"error":{"message":"no"}}`)
	tok := NewServerTokenizer(rec.srv.URL, APIOpenAI, SGLangOptions{HTTPClient: rec.srv.Client()})
	b := tok.Bind(context.Background(), time.Second)
	if ids := b.Encode("x"); ids != nil {
		t.Fatalf("Encode = %v on a failing server", ids)
	}
	var he *HTTPError
	if err := b.Err(); !errors.As(err, &he) || he.Status != 400 {
		t.Fatalf("Err = %v", err)
	}
	rec.mu.Lock()
	rec.status, rec.body = http.StatusOK, `{"tokens":null}`
	rec.mu.Unlock()
	if s := b.Decode([]int32{1}); s != "" {
		t.Fatalf("Decode = %q", s)
	}
	if err := b.Err(); !errors.As(err, &he) {
		t.Fatalf("Err = %v, want the first error kept", err)
	}
	if _, err := tok.Tokenize(context.Background(), "x", false); !errors.Is(err, ErrBadResponse) {
		t.Fatalf("tokens null: %v", err)
	}
}

func TestPauseAndContinue(t *testing.T) {
	rec := newRecorder(t, http.StatusOK, `{"message":"ok","status":"ok"}`)
	c := rec.client(SGLangOptions{})
	for _, mode := range []string{PauseModeAbort, PauseModeRetract, PauseModeInPlace} {
		if err := c.PauseGeneration(context.Background(), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.ContinueGeneration(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c.PauseGeneration(context.Background(), "drain"); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("bad mode: %v", err)
	}
	calls := rec.recorded()
	if len(calls) != 4 {
		t.Fatalf("%d calls", len(calls))
	}
	for i, mode := range []string{"abort", "retract", "in_place"} {
		if calls[i].path != "/pause_generation" {
			t.Fatalf("call %d to %s", i, calls[i].path)
		}
		assertJSONEqual(t, calls[i].body, `{"mode":"`+mode+`"}`)
	}
	if calls[3].path != "/continue_generation" {
		t.Fatalf("continue sent to %s", calls[3].path)
	}
	assertJSONEqual(t, calls[3].body, `{}`)
}

func TestAPIValid(t *testing.T) {
	for a, want := range map[API]bool{APISGLang: true, APIOpenAI: true, "": false, "vllm": false} {
		if a.Valid() != want {
			t.Errorf("%q.Valid() = %v", a, !want)
		}
	}
}

// TestClientsTokenize checks the generators' POST /tokenize: the exact body
// (model only from an OpenAI client that names one, add_special_tokens
// always), and a 404 for the path as ErrNoTokenize but not vLLM's 404 for
// an unknown model.
func TestClientsTokenize(t *testing.T) {
	const answer = `{"tokens":[1,2],"count":2,"max_model_len":32768}`
	for _, tt := range []struct {
		name     string
		status   int
		answer   string
		client   func(rec *recorder) Tokenizer
		special  bool
		wantBody string
		wantErr  error
	}{
		{name: "sglang", status: 200, answer: answer, client: func(rec *recorder) Tokenizer { return rec.client(SGLangOptions{}) },
			wantBody: `{"prompt":"hi","add_special_tokens":false}`},
		{name: "sglang special", status: 200, answer: answer, special: true,
			client:   func(rec *recorder) Tokenizer { return rec.client(SGLangOptions{}) },
			wantBody: `{"prompt":"hi","add_special_tokens":true}`},
		{name: "openai model", status: 200, answer: answer,
			client: func(rec *recorder) Tokenizer {
				return NewOpenAI(rec.srv.URL, OpenAIOptions{HTTPClient: rec.srv.Client(), Model: "Qwen/Qwen3-8B"})
			},
			wantBody: `{"model":"Qwen/Qwen3-8B","prompt":"hi","add_special_tokens":false}`},
		{name: "no endpoint", status: 404, answer: `{"detail":"Not Found"}`,
			client:  func(rec *recorder) Tokenizer { return rec.client(SGLangOptions{}) },
			wantErr: ErrNoTokenize},
		{name: "unknown model", status: 404,
			answer: `{"object":"error","message":"The model ` + "`x`" + ` does not exist.","type":"NotFoundError","code":404}`,
			client: func(rec *recorder) Tokenizer {
				return NewOpenAI(rec.srv.URL, OpenAIOptions{HTTPClient: rec.srv.Client(), Model: "x"})
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder(t, tt.status, tt.answer)
			ids, err := tt.client(rec).Tokenize(context.Background(), "hi", tt.special)
			switch {
			case tt.status == 404 && tt.wantErr == nil:
				var he *HTTPError
				if errors.Is(err, ErrNoTokenize) || !errors.As(err, &he) || he.Status != 404 {
					t.Fatalf("err = %v, want the 404 and not ErrNoTokenize", err)
				}
				return
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			case err != nil || !reflect.DeepEqual(ids, []int32{1, 2}):
				t.Fatalf("Tokenize = %v, %v", ids, err)
			}
			calls := rec.recorded()
			if len(calls) != 1 || calls[0].path != "/tokenize" {
				t.Fatalf("calls %+v", calls)
			}
			assertJSONEqual(t, calls[0].body, tt.wantBody)
		})
	}
}
