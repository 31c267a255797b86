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
			ids, err := tok.Tokenize(context.Background(), "hi")
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
	if _, err := tok.Tokenize(context.Background(), "x"); !errors.Is(err, ErrBadResponse) {
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
